//! The admin endpoint's answer to one request ([`handle`], what `serve` runs once a request's
//! head is in): the method, path and query routing, the `/explain` and `/estimate` queries,
//! the lists' `POST` bodies and `DELETE` queries, the token check.
//!
//! The input is the request as text: `METHOD TARGET`, then `Name: value` header lines, an
//! empty line and the body (lines end with `\n` or `\r\n`). A request hyper would refuse
//! before the admin sees it (a bad method, target or header) is skipped. Every request runs
//! over one [`Shared`] (a small policy, no cluster) on a current-thread runtime, both built
//! once per process; the token is [`TOKEN`].

use std::sync::{Arc, OnceLock};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode, Uri};
use serde_json::Value;
use tollgate::admin::{Access, Token, handle};
use tollgate::config::{ProxyConfig, TokenSource};
use tollgate::server::shared_state;
use tollgate::shared::Shared;
use tollgate_filter::{ListEntry, ListKind, MAX_REASON};

/// The admin's bearer token in the harness.
pub const TOKEN: &str = "fuzz";

/// The policy behind the endpoint: a limit with a penalty, and a file deny list.
const CONFIG: &str = "[sketch]\nmemory = \"256KiB\"\n[lists]\ndeny = [\"198.51.100.0/24\"]\n\
    [[rule]]\nname = \"r\"\nlimits = [{ rate = \"5/10s\" }, { rate = \"50/10s\", ipv4_prefix = 24 }]\n\
    penalty = \"10s\"\n";

/// What every request runs on, built once per process.
struct Endpoint {
    runtime: tokio::runtime::Runtime,
    shared: Arc<Shared>,
    access: Access,
}

fn endpoint() -> &'static Endpoint {
    static ENDPOINT: OnceLock<Endpoint> = OnceLock::new();
    ENDPOINT.get_or_init(|| {
        let config = ProxyConfig::parse(CONFIG).expect("the harness's config parses");
        let shared = Arc::new(shared_state(config, None).expect("the harness's config fits"));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a current-thread runtime");
        Endpoint {
            runtime,
            shared,
            access: Access {
                token: Some(token()),
                everything: false,
            },
        }
    })
}

/// [`TOKEN`] read as the proxy reads it at start (from a file, removed at once).
fn token() -> Token {
    let file = tempfile::NamedTempFile::new().expect("a token file");
    std::fs::write(file.path(), TOKEN).expect("the token written");
    Token::read(&TokenSource::File(file.path().to_owned())).expect("the token read")
}

/// The request `data` stands for, if hyper would hand it to the admin.
fn request(data: &[u8]) -> Option<Request<Full<Bytes>>> {
    let (head, body) = match data.windows(2).position(|w| w == b"\n\n") {
        Some(at) => (&data[..at], &data[at + 2..]),
        None => (data, &[][..]),
    };
    let mut lines = head
        .split(|&b| b == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line));
    let first = lines.next()?;
    let space = first.iter().position(|&b| b == b' ')?;
    let method = Method::from_bytes(&first[..space]).ok()?;
    let target = Uri::try_from(&first[space + 1..]).ok()?;
    let mut request = Request::builder().method(method).uri(target);
    for line in lines.filter(|line| !line.is_empty()) {
        let colon = line.iter().position(|&b| b == b':')?;
        let name = HeaderName::from_bytes(&line[..colon]).ok()?;
        let value = HeaderValue::from_bytes(line[colon + 1..].trim_ascii()).ok()?;
        request = request.header(name, value);
    }
    request.body(Full::new(Bytes::copy_from_slice(body))).ok()
}

/// A request of the harness's own, with the token.
fn own(method: Method, target: &str) -> Request<Full<Bytes>> {
    Request::builder()
        .method(method)
        .uri(target)
        .header(AUTHORIZATION, format!("Bearer {TOKEN}"))
        .body(Full::default())
        .expect("the harness's request")
}

/// The answer to `request`: its status, whether it is JSON, and its body as text.
fn ask(request: Request<Full<Bytes>>) -> (StatusCode, bool, String) {
    let endpoint = endpoint();
    let answer: Response<Full<Bytes>> =
        endpoint
            .runtime
            .block_on(handle(&endpoint.shared, &endpoint.access, request));
    let status = answer.status();
    let kind = answer
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|kind| kind.to_str().ok())
        .unwrap_or_else(|| panic!("a {status} answer without a content type"))
        .to_owned();
    let body = endpoint
        .runtime
        .block_on(answer.into_body().collect())
        .map(|body| body.to_bytes().to_vec())
        .unwrap_or_default();
    let body = String::from_utf8(body).unwrap_or_else(|e| panic!("a {status} answer in {e}"));
    let json = kind == "application/json";
    if json {
        let parsed = serde_json::from_str::<Value>(&body);
        assert!(
            parsed.is_ok(),
            "a {status} JSON answer that is not JSON: {body:?}"
        );
    } else {
        assert!(
            kind.starts_with("text/"),
            "a {status} answer of type {kind}"
        );
    }
    (status, json, body)
}

/// The refusal's message: `{"error": ...}` in JSON, the text otherwise.
fn message(json: bool, body: &str) -> String {
    if !json {
        return body.to_owned();
    }
    let value: Value = serde_json::from_str(body).unwrap_or_default();
    value["error"]
        .as_str()
        .unwrap_or_else(|| panic!("a JSON refusal without an error: {body}"))
        .to_owned()
}

/// The run-time entries held once the expired ones are taken out (an entry a `DELETE` did
/// not find because it had just ended, too).
fn held() -> Vec<ListEntry> {
    let shared = &endpoint().shared;
    shared.filter().lists().sweep(shared.now());
    entries_now()
}

/// The run-time entries held, expired ones left in: what a request may have changed.
fn entries_now() -> Vec<ListEntry> {
    let mut entries = endpoint()
        .shared
        .filter()
        .lists()
        .entries(tollgate_sketch::Tick::ZERO);
    entries.sort_by_key(|e| (e.kind.as_str(), e.cidr.to_string()));
    entries
}

/// The lists a `/lists/allow` or `/lists/deny` path names.
fn list_of(path: &str) -> Option<ListKind> {
    match path {
        "/lists/allow" => Some(ListKind::Allow),
        "/lists/deny" => Some(ListKind::Deny),
        _ => None,
    }
}

/// Answers the request `data` stands for.
///
/// # Panics
/// When an invariant breaks: the answer panics, is a server error (other than 507 at the
/// lists' cap), is not text or valid JSON as it says, or refuses with an empty message or,
/// for a change to the lists, one that names neither the network, the time to live, the
/// reason, the body nor the token; a refused request changes the lists; a successful `POST`
/// adds one entry of its list, within the bounds (the reason's length, the longest time to
/// live, the cap), shown by `GET /lists` and taken out by a `DELETE` of its network.
pub fn check(data: &[u8]) {
    let Some(request) = request(data) else {
        return;
    };
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let before = held();
    let (status, json, body) = ask(request);
    assert!(
        status.is_success()
            || status.is_client_error()
            || (status == StatusCode::INSUFFICIENT_STORAGE && body.contains("at most")),
        "answered {status}: {body}"
    );
    let after = entries_now();
    if !status.is_success() {
        let said = message(json, &body);
        assert!(
            !said.trim().is_empty(),
            "a {status} refusal that says nothing"
        );
        if list_of(&path).is_some() && method != Method::GET {
            let names = [
                "cidr", "network", "entry", "ttl", "reason", "body", "token", "Bearer", "POST",
            ];
            assert!(
                names.iter().any(|name| said.contains(name)),
                "a {status} refusal of a list change that names no culprit: {said}"
            );
        }
        assert_eq!(before, after, "a {status} refusal changed the lists");
        return;
    }
    match list_of(&path) {
        Some(kind) if method == Method::POST => added(kind, &before, &after),
        _ => assert_eq!(before, after, "{method} {path} changed the lists"),
    }
}

/// Checks the one entry a successful `POST` to list `kind` added (or replaced), then takes it
/// out with a `DELETE`, as an operator would.
fn added(kind: ListKind, before: &[ListEntry], after: &[ListEntry]) {
    let lists = endpoint().shared.filter().lists();
    let new: Vec<&ListEntry> = after.iter().filter(|e| !before.contains(e)).collect();
    let [entry] = new[..] else {
        panic!("a successful POST changed {} entries: {new:?}", new.len());
    };
    assert_eq!(entry.kind, kind, "an entry added to the other list");
    assert!(entry.reason.len() <= MAX_REASON, "a reason past the bound");
    let now = endpoint().shared.now();
    assert!(
        entry.expires.saturating_since(now) <= lists.max_ttl(),
        "an entry living past the longest time to live"
    );
    assert!(after.len() <= lists.capacity(), "the lists past their cap");
    let others = |entries: &[ListEntry]| -> Vec<ListEntry> {
        let key = (entry.kind, entry.cidr);
        entries
            .iter()
            .filter(|e| (e.kind, e.cidr) != key)
            .cloned()
            .collect()
    };
    assert_eq!(
        others(before),
        others(after),
        "a POST changed other entries"
    );

    let cidr = entry.cidr.to_string();
    let (_, _, shown) = ask(own(Method::GET, "/lists?format=json"));
    let shown: Value = serde_json::from_str(&shown).expect("GET /lists in JSON");
    let listed = shown["entries"].as_array().is_some_and(|entries| {
        entries.iter().any(|e| {
            e["cidr"] == cidr.as_str() && e["list"] == kind.as_str() && e["reason"] == *entry.reason
        })
    });
    let live = |entry: &ListEntry| endpoint().shared.now() < entry.expires;
    assert!(listed || !live(entry), "{cidr} added, not shown: {shown}");

    let target = format!("/lists/{}?cidr={cidr}", kind.as_str());
    let (status, _, said) = ask(own(Method::DELETE, &target));
    assert!(
        status == StatusCode::OK || !live(entry),
        "DELETE {target}: {status} {said}"
    );
    assert_eq!(
        held(),
        others(after),
        "DELETE {target} left the lists otherwise"
    );
}
