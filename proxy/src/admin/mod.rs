//! The admin endpoint (HTTP, loopback by default):
//!
//! - `GET /metrics`: Prometheus metrics;
//! - `GET /top?n=20`: the most rejected sources;
//! - `GET /estimate?source=ADDRESS`: where a source stands under each limit of each rule
//!   (counting nothing);
//! - `GET /explain?source=ADDRESS[&transport=tcp|udp]`: why a source gets its verdict: the
//!   list entry, rules, limits, keys, estimates with their overcount bounds, penalties
//!   (counting nothing);
//! - `GET /explain?domain=DOMAIN&descriptor=KEY:VALUE,KEY:VALUE`: the rate-limit service's
//!   rule for a descriptor, its limit, the key's estimate with its overcount bound, shadow
//!   mode and the answer `ShouldRateLimit` would give (counting nothing; see `descriptors.rs`);
//! - `GET /lists`, `POST /lists/allow|deny`, `DELETE /lists/allow|deny?cidr=`: the run-time
//!   allow/deny entries: at most 10,000, each for at most 7 days, applied at once, kept
//!   across reloads;
//! - `POST /reload`: re-read the config file, as SIGHUP does; the answer says what was wrong if
//!   it is refused.
//!
//! `/top`, `/estimate`, `/explain` and `/lists` answer in JSON with `?format=json` or
//! `Accept: application/json`, in text otherwise; refusals say what was wrong in the same form.
//!
//! hyper serves it; the admin sees little traffic, so clarity matters more than speed here.
//!
//! # Under attack
//!
//! The admin port must not become a way to take descriptors from the data path:
//!
//! - at most `max_connections` (64) admin connections at once. At the cap a newcomer evicts
//!   the oldest connection that has not yet sent its whole request head (counted in
//!   `tollgate_admin_evicted_total`); a connection whose request is being answered is never
//!   evicted, and only when every open one is being answered is the newcomer reset at accept
//!   (`tollgate_admin_refused_total`). A scraper's request arrives in one packet, so it is
//!   answered unless `max_connections` more connections arrive within its round trip;
//!   attackers holding connections open with nothing or a trickle only evict each other;
//! - a request's headers must arrive within `header_timeout` (5 s; hyper enforces it only
//!   with a timer, [`TokioTimer`]);
//! - a connection that moves no byte either way for `idle_timeout` (30 s) is closed;
//! - one request per connection (no keep-alive), so a connection cannot be kept for long by
//!   sending requests or a body slowly.
//!
//! A bearer token (`Authorization: Bearer TOKEN`, read at start from `token_file` or
//! `token_env`) is required for every endpoint that changes state (`POST /reload`,
//! `POST` and `DELETE` on `/lists/...`: without a configured token they are refused, SIGHUP
//! still reloads, and the list changes are refused even when reads are open), and for every
//! endpoint when the admin listens beyond loopback (the config is refused without a token then). Tokens are
//! compared in constant time.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use http_body_util::Full;
use hyper::body::{Body, Bytes};
use hyper::{HeaderMap, Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

use crate::config::{Admin, TokenSource};
use crate::io::{Counted, until_idle};
use crate::listeners::socket;
use crate::shared::Shared;

mod answer;
mod descriptors;
mod explain;
mod kernel;
mod lists;
mod reports;
mod status;
mod waiting;
mod xdp;

use answer::{Answer, Format, query, query_raw_all, text};
use waiting::Waiting;

/// The admin's bearer token, as read at start.
#[derive(Clone)]
pub struct Token(Arc<[u8]>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

impl Token {
    /// Reads the token from `source`: the file's text or the variable's value, surrounding
    /// whitespace trimmed.
    ///
    /// # Errors
    /// A message naming the file or variable when it cannot be read or holds no token.
    pub fn read(source: &TokenSource) -> Result<Token, String> {
        let token = source.read("admin", "token")?;
        Ok(Token(token.as_bytes().into()))
    }

    /// Whether `presented` is this token. The time taken depends on the length of
    /// `presented`, not on where it differs from the token.
    #[must_use]
    pub(crate) fn matches(&self, presented: &[u8]) -> bool {
        let expected: &[u8] = &self.0;
        let mut difference = expected.len() ^ presented.len();
        for (i, byte) in presented.iter().enumerate() {
            let other = expected.get(i).copied().unwrap_or(0);
            difference |= usize::from(byte ^ other);
            // Keeps the compiler from ending the loop at the first difference.
            difference = std::hint::black_box(difference);
        }
        difference == 0
    }
}

/// Who may ask what: the token, and whether the endpoint listens beyond loopback.
#[derive(Clone, Debug)]
pub struct Access {
    /// The bearer token; `None`: no endpoint that changes state is served.
    pub token: Option<Token>,
    /// Whether every endpoint needs the token (the admin listens beyond loopback).
    pub everything: bool,
}

impl Access {
    /// What `config` asks for, its token read.
    ///
    /// # Errors
    /// The token's file or variable cannot be read or is empty.
    pub(crate) fn new(config: &Admin) -> Result<Access, String> {
        Ok(Access {
            token: config.token.as_ref().map(Token::read).transpose()?,
            everything: !config.listen.ip().is_loopback(),
        })
    }

    /// `None` if a request of `method` with `headers` may be served; otherwise the answer that
    /// refuses it, in `format` (JSON `{"error": ...}` when the request asked for JSON).
    fn refuses(&self, method: &Method, headers: &HeaderMap, format: Format) -> Option<Answer> {
        let changes_state = method != Method::GET;
        if !changes_state && !self.everything {
            return None;
        }
        let Some(token) = &self.token else {
            return Some(format.refuse(
                StatusCode::FORBIDDEN,
                "this endpoint changes state and needs a token: set [admin] token_file or \
                 token_env and restart (SIGHUP reloads without one)",
            ));
        };
        let presented = headers
            .get(hyper::header::AUTHORIZATION)
            .and_then(|value| value.as_bytes().strip_prefix(b"Bearer "));
        if presented.is_some_and(|p| token.matches(p)) {
            return None;
        }
        let mut refused = format.refuse(
            StatusCode::UNAUTHORIZED,
            "send `Authorization: Bearer TOKEN`",
        );
        refused.headers_mut().insert(
            hyper::header::WWW_AUTHENTICATE,
            hyper::header::HeaderValue::from_static("Bearer"),
        );
        Some(refused)
    }
}

/// Serves admin requests on `listener` until `stop` says so, under `config`'s timeouts and
/// connection cap and `access`'s token.
pub(crate) async fn serve(
    shared: Arc<Shared>,
    listener: TcpListener,
    config: Admin,
    access: Access,
    mut stop: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(config.max_connections));
    let waiting = Arc::new(Waiting::default());
    let access = Arc::new(access);
    loop {
        let accepted = tokio::select! {
            _ = stop.changed() => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((stream, _)) = accepted else {
            // Out of files or similar: the data path matters more; try again shortly.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            continue;
        };
        let slot = match Arc::clone(&slots).try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                if !waiting.evict_oldest() {
                    // Every open connection is being answered: they end soon by themselves.
                    shared.metrics().admin.refused.inc();
                    socket::reset_on_close(&stream);
                    continue;
                }
                shared.metrics().admin.evicted.inc();
                // The evicted connection's task closes it at its next poll and frees its
                // slot; waiting for that keeps the descriptors within the cap. Bounded, in
                // case it were ever slow: the newcomer is then reset as at a full cap.
                let freed = tokio::select! {
                    _ = stop.changed() => return,
                    freed = tokio::time::timeout(
                        config.header_timeout,
                        Arc::clone(&slots).acquire_owned(),
                    ) => freed,
                };
                // `Err` inside: the semaphore was closed, which this function never does.
                let Ok(Ok(slot)) = freed else {
                    shared.metrics().admin.refused.inc();
                    socket::reset_on_close(&stream);
                    continue;
                };
                slot
            }
        };
        let ticket = waiting.enter();
        let shared = Arc::clone(&shared);
        let access = Arc::clone(&access);
        let (header_timeout, idle) = (config.header_timeout, config.idle_timeout);
        tokio::spawn(async move {
            // Dropped last, after the stream is closed and the ticket taken out.
            let _slot = slot;
            let ticket = ticket;
            shared.metrics().admin.connections.inc();
            let metrics = shared.metrics().admin.connections.clone();
            let state = ticket.connection();
            let service = hyper::service::service_fn(move |request| {
                // hyper calls this once the whole request head is in: from here the
                // connection is answered, never evicted. Evicted just before, it is answered
                // anyway if its task has not yet closed it; nothing is lost by that.
                state.answer();
                let shared = Arc::clone(&shared);
                let access = Arc::clone(&access);
                async move { Ok::<_, Infallible>(handle(&shared, &access, request).await) }
            });
            let mut stream = stream;
            let moved = AtomicU64::new(0);
            let counted = Counted::new(&mut stream, &moved);
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .keep_alive(false)
                .serve_connection(TokioIo::new(counted), service);
            tokio::select! {
                () = ticket.evicted() => {}
                _ = until_idle(connection, idle, &moved) => {}
            }
            metrics.dec();
        });
    }
}

/// The answer to one request whose head is in: refused by `access`, or served. [`serve`]
/// answers every request with it; the fuzz harness (`tests/fuzz/src/admin.rs`) calls it on
/// requests built from any bytes, without a socket.
#[doc(hidden)]
pub async fn handle<B>(
    shared: &Arc<Shared>,
    access: &Access,
    request: Request<B>,
) -> Response<Full<Bytes>>
where
    B: Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let format = Format::of(&request);
    match access.refuses(request.method(), request.headers(), format) {
        Some(refused) => refused,
        None => respond(shared, request).await,
    }
}

async fn respond<B>(shared: &Arc<Shared>, request: Request<B>) -> Answer
where
    B: Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let format = Format::of(&request);
    let path = request.uri().path().to_owned();
    if let Some(kind) = lists::kind_of(&path) {
        return match *request.method() {
            Method::POST => lists::add(shared, format, kind, request).await,
            Method::DELETE => lists::remove(shared, format, kind, &request),
            _ => format.refuse(
                StatusCode::METHOD_NOT_ALLOWED,
                &format!("{path} takes POST (add) or DELETE (remove)"),
            ),
        };
    }
    match (request.method(), path.as_str()) {
        (&Method::GET, "/metrics") => {
            let policy = shared.filter().policy();
            let now = shared.now();
            let lists = shared.filter().lists();
            lists.sweep(now);
            shared.metrics().set_lists(&lists.stats());
            xdp::refresh_metrics(shared);
            text(StatusCode::OK, shared.metrics().render(&policy, now))
        }
        (&Method::GET, "/top") => {
            let n = query(&request, "n")
                .and_then(|n| n.parse().ok())
                .unwrap_or(20);
            reports::top(shared, format, n)
        }
        (&Method::GET, "/estimate") => {
            reports::estimate(shared, format, query(&request, "source").as_deref())
        }
        (&Method::GET, "/explain") if query(&request, "domain").is_some() => {
            if query(&request, "source").is_some() {
                return format.refuse(
                    StatusCode::BAD_REQUEST,
                    "ask about a source or about a domain's descriptors, not both",
                );
            }
            descriptors::explain(
                shared,
                format,
                query(&request, "domain").as_deref().unwrap_or_default(),
                &query_raw_all(&request, "descriptor"),
                query(&request, "hits_addend").as_deref(),
            )
        }
        (&Method::GET, "/explain") => explain::explain(
            shared,
            format,
            query(&request, "source").as_deref(),
            query(&request, "transport").as_deref(),
        ),
        (&Method::GET, "/lists") => lists::list(shared, format),
        (&Method::POST, "/reload") => match shared.reloader().reload_off_runtime().await {
            Ok(()) => text(StatusCode::OK, "reloaded\n".into()),
            Err(err) => format.refuse(
                StatusCode::UNPROCESSABLE_ENTITY,
                &format!("reload refused; the old policy stays:\n{err}"),
            ),
        },
        (&Method::GET, "/") if status::wants_html(request.headers()) => status::page(),
        (&Method::GET, "/status.json") => status::json(shared),
        (&Method::GET, "/status.js") => status::script(),
        (&Method::GET, "/" | "/index.txt") => text(
            StatusCode::OK,
            "GET /metrics\nGET /top?n=20\nGET /estimate?source=ADDRESS\n\
             GET /explain?source=ADDRESS[&transport=tcp|udp]\n\
             GET /explain?domain=DOMAIN&descriptor=KEY:VALUE,KEY:VALUE[&hits_addend=N]\n\
             GET /lists\n\
             POST /lists/allow, POST /lists/deny  {\"cidr\": ..., \"ttl\": ..., \"reason\": ...}\n\
             DELETE /lists/allow?cidr=NETWORK, DELETE /lists/deny?cidr=NETWORK\n\
             POST /reload\n\
             GET /status.json\nGET / (Accept: text/html): the status page\n\
             (?format=json or Accept: application/json for JSON)\n"
                .into(),
        ),
        _ => format.refuse(StatusCode::NOT_FOUND, "no such endpoint; see GET /"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bearer(token: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            hyper::header::AUTHORIZATION,
            format!("Bearer {token}").parse().unwrap(),
        );
        headers
    }

    fn status(answer: Option<Answer>) -> u16 {
        answer.map_or(200, |a| a.status().as_u16())
    }

    #[test]
    fn state_changes_need_the_token_and_beyond_loopback_everything_does() {
        let token = Some(Token(b"s3cret".as_slice().into()));
        let none = HeaderMap::new();
        let loopback = Access {
            token: token.clone(),
            everything: false,
        };
        assert_eq!(
            status(loopback.refuses(&Method::GET, &none, Format::Text)),
            200
        );
        assert_eq!(
            status(loopback.refuses(&Method::POST, &none, Format::Text)),
            401
        );
        assert_eq!(
            status(loopback.refuses(&Method::POST, &bearer("s3crex"), Format::Text)),
            401
        );
        assert_eq!(
            status(loopback.refuses(&Method::POST, &bearer("s3cret "), Format::Text)),
            401
        );
        assert_eq!(
            status(loopback.refuses(&Method::POST, &bearer("s3cret"), Format::Text)),
            200
        );
        let beyond = Access {
            token,
            everything: true,
        };
        assert_eq!(
            status(beyond.refuses(&Method::GET, &none, Format::Text)),
            401
        );
        assert_eq!(
            status(beyond.refuses(&Method::GET, &bearer("s3cret"), Format::Text)),
            200
        );
        let tokenless = Access {
            token: None,
            everything: false,
        };
        assert_eq!(
            status(tokenless.refuses(&Method::GET, &none, Format::Text)),
            200
        );
        assert_eq!(
            status(tokenless.refuses(&Method::POST, &bearer("x"), Format::Text)),
            403
        );
    }

    /// The answer's content type and body.
    async fn read(answer: Option<Answer>) -> (String, String) {
        use http_body_util::BodyExt;
        let answer = answer.expect("refused");
        let kind = answer.headers()[hyper::header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .to_owned();
        let body = answer.into_body().collect().await.unwrap().to_bytes();
        (kind, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn refusals_answer_json_when_json_was_asked() {
        let none = HeaderMap::new();
        let loopback = Access {
            token: Some(Token(b"s3cret".as_slice().into())),
            everything: false,
        };
        let (kind, said) = read(loopback.refuses(&Method::POST, &none, Format::Json)).await;
        assert_eq!(kind, "application/json");
        let value: serde_json::Value = serde_json::from_str(&said).unwrap();
        assert_eq!(
            value["error"], "send `Authorization: Bearer TOKEN`",
            "{said}"
        );
        let tokenless = Access {
            token: None,
            everything: false,
        };
        let (kind, said) = read(tokenless.refuses(&Method::POST, &none, Format::Json)).await;
        assert_eq!(kind, "application/json");
        let value: serde_json::Value = serde_json::from_str(&said).unwrap();
        assert!(
            value["error"].as_str().unwrap().contains("needs a token"),
            "{said}"
        );
        let (kind, said) = read(loopback.refuses(&Method::POST, &none, Format::Text)).await;
        assert!(kind.starts_with("text/plain"), "{said}");
        assert_eq!(said, "send `Authorization: Bearer TOKEN`\n");
    }

    #[test]
    fn tokens_match_exactly() {
        let token = Token(b"abc".as_slice().into());
        assert!(token.matches(b"abc"));
        for other in [&b""[..], b"ab", b"abd", b"abcd", b"\0abc"] {
            assert!(!token.matches(other), "{other:?}");
        }
    }

    #[test]
    fn debug_output_names_the_token_without_showing_it() {
        let access = Access {
            token: Some(Token(b"s3cret".as_slice().into())),
            everything: false,
        };
        let shown = format!("{access:?}");
        assert!(
            shown.contains("token: Some(Token(..))") && !shown.contains("s3cret"),
            "{shown}"
        );
    }
}
