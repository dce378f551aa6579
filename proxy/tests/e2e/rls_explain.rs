//! The admin's `/explain` for a descriptor of the rate-limit service (`[rls]`): the rule, its
//! limit, the key's estimate and bound, shadow mode and the answer `ShouldRateLimit` would
//! give, counting nothing; bad questions refused by name; the admin's token rules.

use std::sync::Arc;

use serde_json::Value;
use tollgate::admin::Access;
use tollgate::config::{ProxyConfig, TokenSource};
use tollgate::rls::proto::rate_limit_descriptor::Entry;
use tollgate::rls::proto::{Code, RateLimitDescriptor, RateLimitRequest, RateLimitServiceClient};
use tollgate::server::Server;
use tonic::transport::Channel;

use crate::support::{self, admin, admin_json};

/// Three per minute per API key (named), one per minute per user in shadow mode.
const YAML: &str = "\
domain: api
descriptors:
  - key: api_key
    rate_limit:
      name: per_key
      unit: minute
      requests_per_unit: 3
  - key: user
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
";

/// A proxy serving `[rls]` from `api.yaml` and its admin on loopback, and a gRPC client.
async fn serving() -> (Server, tempfile::TempDir, RateLimitServiceClient<Channel>) {
    let dir = support::scratch("rls-explain");
    std::fs::write(dir.path().join("api.yaml"), YAML).expect("written");
    let path = dir.path().join("tollgate.toml");
    let text = "[admin]\nlisten = \"127.0.0.1:0\"\n[rls]\nlisten = \"127.0.0.1:0\"\n\
                configs = [\"api.yaml\"]\nmemory = \"1MiB\"\n";
    std::fs::write(&path, text).expect("written");
    let config = ProxyConfig::parse(text).unwrap_or_else(|e| panic!("{e}"));
    let server = Server::start(config, Some(path)).await.expect("starts");
    let address = server.rls_addr().expect("[rls] runs");
    let client = tokio::time::timeout(
        support::BOUND,
        RateLimitServiceClient::connect(format!("http://{address}")),
    )
    .await
    .expect("connects in time")
    .expect("connects");
    (server, dir, client)
}

/// One gRPC request of one descriptor; its overall code and first `limit_remaining`.
async fn ask(
    client: &mut RateLimitServiceClient<Channel>,
    entries: &[(&str, &str)],
) -> (Code, u32) {
    let descriptor = RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(key, value)| Entry {
                key: (*key).to_owned(),
                value: (*value).to_owned(),
            })
            .collect(),
        limit: None,
    };
    let request = RateLimitRequest {
        domain: "api".into(),
        descriptors: vec![descriptor],
        hits_addend: 0,
    };
    let answer = tokio::time::timeout(support::BOUND, client.should_rate_limit(request))
        .await
        .expect("answers in time")
        .expect("an answer")
        .into_inner();
    (answer.overall_code(), answer.statuses[0].limit_remaining)
}

/// `/explain` answered 200 with JSON.
async fn explain(server: &Server, query: &str) -> Value {
    let path = format!("/explain?{query}");
    let (status, body) = admin_json(server, "GET", &path, None, "").await;
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
}

#[tokio::test]
async fn explain_says_the_rule_estimate_and_answer_of_a_descriptor_counting_nothing() {
    let (server, _dir, mut client) = serving().await;
    let key = "domain=api&descriptor=api_key:k1";
    let fresh = explain(&server, key).await;
    assert_eq!(fresh["code"], "ok", "{fresh}");
    let d = &fresh["descriptors"][0];
    assert_eq!(d["outcome"], "limited", "{d}");
    assert_eq!(d["rule"]["path"], "api.api_key");
    assert_eq!(d["rule"]["name"], "per_key");
    assert_eq!(d["rule"]["limit"]["requests_per_unit"], 3);
    assert_eq!(d["rule"]["limit"]["unit"], "minute");
    assert_eq!(d["rule"]["limit"]["window_ms"], 60_000);
    assert_eq!(d["rule"]["shadow_mode"], false);
    assert_eq!(
        (d["estimate"].as_u64(), d["over"].as_bool()),
        (Some(0), Some(false))
    );
    assert_eq!(d["limit_remaining"], 2, "what one more would leave");
    assert!(d["overcount_bound"].is_u64(), "{d}");
    // Explaining counts nothing: the service's first answer leaves 2 of 3.
    for _ in 0..10 {
        explain(&server, key).await;
    }
    assert_eq!(ask(&mut client, &[("api_key", "k1")]).await, (Code::Ok, 2));
    for _ in 0..2 {
        ask(&mut client, &[("api_key", "k1")]).await;
    }
    let full = explain(&server, key).await;
    let d = &full["descriptors"][0];
    assert_eq!(full["code"], "over_limit", "{full}");
    assert_eq!(
        (d["estimate"].as_u64(), d["over"].as_bool()),
        (Some(3), Some(true))
    );
    assert!(d["duration_until_reset_ms"].as_u64() > Some(0), "{d}");
    // What it said is what the service then answers.
    assert_eq!(
        ask(&mut client, &[("api_key", "k1")]).await.0,
        Code::OverLimit
    );

    // Shadow mode: over, answered OK.
    ask(&mut client, &[("user", "ann")]).await;
    let shadow = explain(&server, "domain=api&descriptor=user:ann&format=json").await;
    let d = &shadow["descriptors"][0];
    assert_eq!(shadow["code"], "ok", "{shadow}");
    assert_eq!(d["rule"]["shadow_mode"], true);
    assert_eq!(
        (d["over"].as_bool(), d["shadowed"].as_bool()),
        (Some(true), Some(true))
    );

    // No rule, and two descriptors in one request.
    let both = explain(
        &server,
        "domain=api&descriptor=path:/v1&descriptor=api_key:k2",
    )
    .await;
    let outcomes: Vec<&str> = both["descriptors"]
        .as_array()
        .expect("descriptors")
        .iter()
        .map(|d| d["outcome"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(outcomes, ["no_rule", "limited"], "{both}");

    // The text form, for people.
    let (status, body) = admin(&server, "GET", "/explain?domain=api&descriptor=api_key:k1").await;
    assert_eq!(status, 200, "{body}");
    for line in [
        "verdict  OVER_LIMIT",
        "descriptor 0  api_key:k1",
        "rule     api.api_key (name per_key)",
        "limit    3 per minute (a sliding window of 60s)",
        "estimate 4 (overcount at most ",
        "-> over: OVER_LIMIT, room in ",
    ] {
        assert!(body.contains(line), "{line:?} not in:\n{body}");
    }
}

#[tokio::test]
async fn bad_descriptor_questions_are_refused_naming_what_is_wrong() {
    let (server, _dir, mut client) = serving().await;
    let long = "v".repeat(4_097);
    for (query, says) in [
        (
            "domain=nowhere&descriptor=api_key:k1",
            "domain `nowhere` is not configured",
        ),
        (
            "domain=api&descriptor=api_key",
            "entry 0 `api_key` has no `:`",
        ),
        (
            "domain=api&descriptor=a:1,:v",
            "entry 1 `:v` has an empty key",
        ),
        ("domain=api", "say which descriptor"),
        ("domain=&descriptor=a:1", "empty_domain"),
        (
            &format!("domain=api&descriptor=api_key:{long}"),
            "value_too_long: descriptor 0 entry 0: value of 4097 bytes, more than 4096",
        ),
        ("domain=api&descriptor=a:1&hits_addend=x", "hits_addend `x`"),
        ("domain=api&descriptor=a:1&source=192.0.2.1", "not both"),
    ] {
        let path = format!("/explain?{query}");
        let (status, body) = admin(&server, "GET", &path).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert!(body.contains(says), "{query}: {says:?} not in {body}");
        let (status, body) = admin_json(&server, "GET", &path, None, "").await;
        assert_eq!(status, 400, "{query}: {body}");
        let error: Value = serde_json::from_str(&body).expect("JSON");
        assert!(
            error["error"].as_str().is_some_and(|e| e.contains(says)),
            "{body}"
        );
    }
    // Nothing was counted by any of them.
    assert_eq!(ask(&mut client, &[("api_key", "k1")]).await, (Code::Ok, 2));
}

/// A token file holding `t0ken`, in a directory removed when dropped.
fn token_file() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = support::scratch("rls-explain-token");
    let file = dir.path().join("token");
    std::fs::write(&file, "t0ken\n").expect("written");
    (dir, file)
}

#[tokio::test]
async fn explaining_a_descriptor_follows_the_admin_token_rules() {
    let (server, _dir, _client) = serving().await;
    let shared = Arc::clone(server.shared());
    let ask = |token: Option<&str>| {
        let mut request = hyper::Request::get("/explain?domain=api&descriptor=api_key:k1");
        if let Some(token) = token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        request
            .body(http_body_util::Empty::<hyper::body::Bytes>::new())
            .expect("a request")
    };
    let (_scratch, file) = token_file();
    let token = tollgate::admin::Token::read(&TokenSource::File(file)).expect("a token");
    // An admin beyond loopback needs the token for every read, this one too.
    let beyond = Access {
        token: Some(token),
        everything: true,
    };
    let refused = tollgate::admin::handle(&shared, &beyond, ask(None)).await;
    assert_eq!(refused.status(), 401);
    let served = tollgate::admin::handle(&shared, &beyond, ask(Some("t0ken"))).await;
    assert_eq!(served.status(), 200);
    let loopback = Access {
        token: None,
        everything: false,
    };
    let open = tollgate::admin::handle(&shared, &loopback, ask(None)).await;
    assert_eq!(open.status(), 200, "a read on loopback needs no token");
}
