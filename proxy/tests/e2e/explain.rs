//! The admin's `/explain` and run-time lists: what decides for a source, counting nothing;
//! entries added, seen, expired and kept across a reload; bad requests refused by name.

use std::net::IpAddr;
use std::sync::Arc;

use crate::support::{self, Wire, admin_json, attempt, echo_upstream, eventually};
use serde_json::Value;
use tollgate::config::ProxyConfig;
use tollgate::server::Server;
use tollgate::shared::Shared;
use tollgate::state::lists::unix_ms_now;
use tollgate_filter::{Source, Transport};

const TOKEN: &str = "explain-token";

/// A fresh directory per call, holding the token file and the config file; removed when
/// dropped.
fn dir() -> tempfile::TempDir {
    let dir = support::scratch("explain");
    std::fs::write(dir.path().join("token"), format!("{TOKEN}\n")).unwrap();
    dir
}

fn config(dir: &std::path::Path, upstream: &str, rate: &str) -> String {
    let admin = format!(
        "listen = \"127.0.0.1:0\"\ntoken_file = \"{}\"",
        dir.join("token").display()
    );
    let rest = format!(
        r#"[lists]
deny = ["198.51.100.0/24"]

[[rule]]
name = "per-network"
limits = [{{ rate = "{rate}", ipv4_prefix = 24, ipv6_prefix = 64 }}]

[[rule]]
name = "banned"
sources = ["203.0.113.0/24"]
penalty = "10m"
limits = [{{ rate = "1/10s" }}]"#
    );
    support::one_listener(&admin, upstream, "", &rest)
}

/// Starts a proxy from a config file in `dir` (so that it can reload).
async fn start(dir: &tempfile::TempDir, rate: &str) -> Server {
    let dir = dir.path();
    let upstream = echo_upstream().await.to_string();
    let path = dir.join("tollgate.toml");
    std::fs::write(&path, config(dir, &upstream, rate)).unwrap();
    let config = ProxyConfig::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
    Server::start(config, Some(path)).await.expect("starts")
}

/// A GET answered 200 with JSON.
async fn get(server: &Server, path: &str) -> Value {
    let (status, body) = admin_json(server, "GET", path, None, "").await;
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
}

fn decide(shared: &Arc<Shared>, source: &str) {
    let source = Source::new(source.parse::<IpAddr>().unwrap());
    let event = tollgate_filter::Event {
        source,
        transport: Transport::Tcp,
        bytes: 100,
    };
    let _ = shared.filter().decide(&event, shared.now());
}

#[tokio::test]
async fn explain_names_what_decides_for_allowed_throttled_penalised_and_listed_sources() {
    let dir = dir();
    let server = start(&dir, "3/60s").await;
    let shared = Arc::clone(server.shared());

    // Allowed, IPv4: two events in its /24.
    decide(&shared, "192.0.2.7");
    decide(&shared, "192.0.2.8");
    let why = get(&server, "/explain?source=192.0.2.9").await;
    assert_eq!(why["verdict"]["verdict"], "allow", "{why}");
    assert_eq!(why["list"], Value::Null);
    assert_eq!(why["rules"].as_array().unwrap().len(), 1, "{why}");
    let limit = &why["rules"][0]["limits"][0];
    assert_eq!(limit["counted_as"], "192.0.2.0/24", "{why}");
    assert_eq!(limit["prefix"], 24);
    assert_eq!(limit["rate"], "3/1m");
    let estimate = limit["estimate"].as_u64().unwrap();
    let bound = limit["overcount_bound"].as_u64().unwrap();
    assert!((2..=2 + bound).contains(&estimate), "{why}");
    assert_eq!(limit["over"], false);
    assert_eq!(limit["cluster"], Value::Null);

    // Throttled, IPv6: four addresses of one /64.
    for host in [
        "2001:db8:1:2::1",
        "2001:db8:1:2::2",
        "2001:db8:1:2::3",
        "2001:db8:1:2::4",
    ] {
        decide(&shared, host);
    }
    let why = get(&server, "/explain?source=2001:db8:1:2:ffff::9").await;
    assert_eq!(why["verdict"]["verdict"], "throttle", "{why}");
    assert_eq!(why["verdict"]["rule"], "per-network");
    let limit = &why["rules"][0]["limits"][0];
    assert_eq!(limit["counted_as"], "2001:db8:1:2::/64", "{why}");
    assert_eq!(limit["over"], true);
    assert!(limit["retry_after_ms"].as_u64().unwrap() > 0, "{why}");

    // Penalised: over the `banned` rule's limit once.
    decide(&shared, "203.0.113.5");
    decide(&shared, "203.0.113.5");
    let why = get(&server, "/explain?source=203.0.113.5").await;
    assert_eq!(why["verdict"]["verdict"], "deny", "{why}");
    assert_eq!(why["verdict"]["reason"], "penalty");
    assert_eq!(why["verdict"]["rule"], "banned");
    let banned = why["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rule"] == "banned")
        .expect("the rule applies");
    assert_eq!(banned["penalty"]["serving"], true, "{why}");
    assert_eq!(banned["penalty"]["length_ms"], 600_000);
    let left = banned["penalty"]["left_ms"].as_u64().unwrap();
    assert!(left > 590_000 && left <= 600_100, "{why}");

    // Listed in the file.
    let why = get(&server, "/explain?source=198.51.100.1").await;
    assert_eq!(why["verdict"]["verdict"], "deny", "{why}");
    assert_eq!(why["verdict"]["reason"], "listed");
    assert_eq!(why["list"]["list"], "deny");
    assert_eq!(why["list"]["cidr"], "198.51.100.0/24");
    assert_eq!(why["list"]["origin"], "file");

    // The text form says the same for people.
    let (status, body) = support::admin(&server, "GET", "/explain?source=198.51.100.1").await;
    assert_eq!(status, 200);
    assert!(
        body.contains("verdict  deny: listed (198.51.100.0/24)")
            && body.contains("list     deny 198.51.100.0/24 (config file)"),
        "{body}"
    );
    let (status, body) = support::admin(&server, "GET", "/explain?source=2001:db8:1:2::1").await;
    assert_eq!(status, 200);
    assert!(body.contains("counted as 2001:db8:1:2::/64"), "{body}");
    assert!(body.contains("over, back under in"), "{body}");
}

#[tokio::test]
async fn a_flood_past_eight_times_its_limit_is_said_to_be_at_least_and_back_at_most() {
    let dir = dir();
    let server = start(&dir, "3/60s").await;
    let shared = Arc::clone(server.shared());
    // 20 times the limit: counted exactly only up to 8 times it, plus one (25; the front may
    // add one).
    for _ in 0..60 {
        decide(&shared, "192.0.2.7");
    }
    let why = get(&server, "/explain?source=192.0.2.7").await;
    let limit = &why["rules"][0]["limits"][0];
    assert_eq!(limit["capped"], true, "{why}");
    assert_eq!(
        limit["bound"], "estimate at least, retry_after at most",
        "{why}"
    );
    assert_eq!(why["verdict"]["capped"], true, "{why}");
    // The sketch's promise, not the count's decay: past the rest of this minute's window.
    let retry = limit["retry_after_ms"].as_u64().unwrap();
    assert!(retry > 60_000 && retry <= 120_000, "{why}");
    let (status, body) = support::admin(&server, "GET", "/explain?source=192.0.2.7").await;
    assert_eq!(status, 200);
    assert!(
        body.contains("estimate at least ") && body.contains("back under in at most"),
        "{body}"
    );
    let estimate = get(&server, "/estimate?source=192.0.2.7").await;
    assert_eq!(estimate["limits"][0]["capped"], true, "{estimate}");
    let (_, body) = support::admin(&server, "GET", "/estimate?source=192.0.2.7").await;
    assert!(body.contains(">= 2"), "{body}");
    // A source under the cap reads as exact.
    for _ in 0..5 {
        decide(&shared, "192.0.3.200");
    }
    let why = get(&server, "/explain?source=192.0.3.200").await;
    assert_eq!(why["rules"][0]["limits"][0]["capped"], false, "{why}");
    assert_eq!(why["rules"][0]["limits"][0]["bound"], "exact", "{why}");

    // /top orders by rejections (uncapped), and says which sources are past the cap.
    for (source, rejected) in [("192.0.2.7", 57), ("192.0.3.200", 2)] {
        for _ in 0..rejected {
            shared
                .gate()
                .offenders()
                .record(source.parse().unwrap(), "per-network");
        }
    }
    let top = get(&server, "/top?format=json").await;
    assert_eq!(top["order"], "rejected", "{top}");
    let rows = top["top"].as_array().unwrap();
    assert_eq!(
        (rows[0]["source"].as_str(), rows[0]["capped"].as_bool()),
        (Some("192.0.2.7"), Some(true)),
        "{top}"
    );
    assert!(rows[0]["over"].as_f64().unwrap() > 8.0, "{top}");
    assert_eq!(rows[1]["capped"], false, "{top}");
    let (_, body) = support::admin(&server, "GET", "/top").await;
    let first = body.lines().nth(1).unwrap_or_default();
    assert!(
        first.starts_with("192.0.2.7 ") && first.contains(" >=8."),
        "{body}"
    );
    assert!(body.contains("ordered by rejections"), "{body}");
}

#[tokio::test]
async fn explaining_a_hundred_times_counts_nothing() {
    let dir = dir();
    let server = start(&dir, "100/60s").await;
    for _ in 0..5 {
        decide(server.shared(), "192.0.2.50");
    }
    let before = get(&server, "/estimate?source=192.0.2.50&format=json").await;
    assert_eq!(
        before["limits"][0]["counted_as"], "192.0.2.0/24",
        "{before}"
    );
    for _ in 0..100 {
        let _ = get(&server, "/explain?source=192.0.2.50").await;
    }
    let after = get(&server, "/estimate?source=192.0.2.50&format=json").await;
    assert_eq!(before, after);
    let top = get(&server, "/top?format=json").await;
    assert!(top["top"].is_array(), "{top}");
}

#[tokio::test]
async fn a_run_time_entry_applies_at_once_shows_everywhere_survives_a_reload_and_expires() {
    let dir = dir();
    let server = start(&dir, "100/60s").await;
    let front = server.local_addr("front").unwrap();
    assert_eq!(attempt("127.0.0.7", front).await, Wire::Echoed);

    // The add and the read of its time left happen between these two readings, however slow
    // the machine.
    let before = unix_ms_now();
    let (status, body) = admin_json(
        &server,
        "POST",
        "/lists/deny",
        Some(TOKEN),
        r#"{"cidr": "127.0.0.7", "ttl": "1h", "reason": "ticket 42"}"#,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_ne!(
        attempt("127.0.0.7", front).await,
        Wire::Echoed,
        "denied at once"
    );
    assert_eq!(attempt("127.0.0.8", front).await, Wire::Echoed);

    let why = get(&server, "/explain?source=127.0.0.7").await;
    let after = unix_ms_now();
    // Plus a millisecond for the server's own rounding.
    let span = after - before + 1;
    assert_eq!(why["verdict"]["reason"], "listed", "{why}");
    assert_eq!(why["list"]["origin"], "runtime");
    assert_eq!(why["list"]["cidr"], "127.0.0.7/32");
    assert_eq!(why["list"]["reason"], "ticket 42");
    // An hour less at most the time since the add; ending an hour after the add.
    let left = why["list"]["expires_in_ms"].as_u64().unwrap();
    assert!((3_600_000 - span..=3_600_000).contains(&left), "{why}");
    let end = why["list"]["expires_unix_ms"].as_u64().unwrap();
    assert!(
        (before + 3_600_000 - span..=after + 3_600_000).contains(&end),
        "{why}"
    );

    let lists = get(&server, "/lists").await;
    assert_eq!(lists["entries"].as_array().unwrap().len(), 1, "{lists}");
    assert_eq!(lists["capacity"], 10_000);
    let (_, metrics) = admin_json(&server, "GET", "/metrics", None, "").await;
    assert!(
        metrics.contains("tollgate_list_entries{list=\"deny\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("tollgate_list_added_total 1"), "{metrics}");

    // A reload (the file unchanged) keeps it.
    let (status, body) = admin_json(&server, "POST", "/reload", Some(TOKEN), "").await;
    assert_eq!(status, 200, "{body}");
    assert_ne!(attempt("127.0.0.7", front).await, Wire::Echoed);
    assert_eq!(
        get(&server, "/explain?source=127.0.0.7").await["list"]["origin"],
        "runtime"
    );

    // Removed on request: the source passes again.
    let (status, body) = admin_json(
        &server,
        "DELETE",
        "/lists/deny?cidr=127.0.0.7%2F32",
        Some(TOKEN),
        "",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(attempt("127.0.0.7", front).await, Wire::Echoed);

    // An entry of one millisecond runs out by itself and is counted as expired.
    let (status, body) = admin_json(
        &server,
        "POST",
        "/lists/allow",
        Some(TOKEN),
        r#"{"cidr": "2001:db8::/32", "ttl": "1ms"}"#,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let shared = Arc::clone(server.shared());
    eventually(|| shared.filter().lists().entries(shared.now()).is_empty()).await;
    let lists = get(&server, "/lists").await;
    assert_eq!(lists["entries"], serde_json::json!([]), "{lists}");
    let (_, metrics) = admin_json(&server, "GET", "/metrics", None, "").await;
    assert!(
        metrics.contains("tollgate_list_expired_total 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("tollgate_list_removed_total 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("tollgate_list_entries{list=\"allow\"} 0"),
        "{metrics}"
    );
}

#[tokio::test]
async fn bad_list_requests_are_refused_naming_what_is_wrong() {
    let dir = dir();
    let server = start(&dir, "100/60s").await;
    let post = |path: &'static str, token: Option<&'static str>, body: String| {
        let server = &server;
        async move { admin_json(server, "POST", path, token, &body).await }
    };
    let refused = |answer: (u16, String), status: u16, words: &str| {
        assert_eq!(answer.0, status, "{}", answer.1);
        let error: Value = serde_json::from_str(&answer.1).unwrap();
        let message = error["error"].as_str().unwrap();
        assert!(message.contains(words), "{message}");
    };
    let ok = r#"{"cidr": "192.0.2.0/24", "ttl": 60}"#.to_owned();
    // No token, a wrong one: 401, in JSON as asked; the entry is not added.
    refused(
        post("/lists/deny", None, ok.clone()).await,
        401,
        "Authorization: Bearer",
    );
    refused(
        post("/lists/deny", Some("wrong"), ok.clone()).await,
        401,
        "Authorization: Bearer",
    );
    refused(
        admin_json(&server, "DELETE", "/lists/deny?cidr=192.0.2.0/24", None, "").await,
        401,
        "Authorization: Bearer",
    );
    // ?format=json says it too; without either, text.
    refused(
        support::admin(&server, "POST", "/reload?format=json").await,
        401,
        "Authorization: Bearer",
    );
    let (status, body) = support::admin(&server, "POST", "/reload").await;
    assert_eq!(
        (status, body.as_str()),
        (401, "send `Authorization: Bearer TOKEN`\n")
    );
    assert_eq!(
        get(&server, "/lists").await["entries"],
        serde_json::json!([])
    );
    // Bad entries: 400, each naming what is wrong.
    for (path, body, words) in [
        (
            "/lists/deny",
            r#"{"cidr": "192.0.2.300/24", "ttl": 60}"#,
            "`192.0.2.300` is not an IP address",
        ),
        (
            "/lists/deny",
            r#"{"cidr": "192.0.2.0/33", "ttl": 60}"#,
            "192.0.2.0/33",
        ),
        (
            "/lists/allow",
            r#"{"cidr": "192.0.2.0/24", "ttl": "8d"}"#,
            "ttl",
        ),
        (
            "/lists/allow",
            r#"{"cidr": "192.0.2.0/24", "ttl": 604801}"#,
            "at most 604800s",
        ),
        (
            "/lists/allow",
            r#"{"cidr": "192.0.2.0/24", "ttl": 0}"#,
            "more than 0",
        ),
        (
            "/lists/allow",
            r#"{"cidr": "192.0.2.0/24", "tll": 60}"#,
            "unknown field `tll`",
        ),
    ] {
        refused(post(path, Some(TOKEN), body.to_owned()).await, 400, words);
    }
    refused(
        post(
            "/lists/allow",
            Some(TOKEN),
            format!(
                r#"{{"cidr": "192.0.2.0/24", "ttl": 60, "reason": "{}"}}"#,
                "x".repeat(300)
            ),
        )
        .await,
        400,
        "at most 256",
    );
    refused(
        post("/lists/allow", Some(TOKEN), "x".repeat(5000)).await,
        413,
        "at most 4096 bytes",
    );
    refused(
        admin_json(
            &server,
            "DELETE",
            "/lists/allow?cidr=192.0.2.0/24",
            Some(TOKEN),
            "",
        )
        .await,
        404,
        "no run-time allow entry for 192.0.2.0/24",
    );
    refused(
        admin_json(&server, "GET", "/explain?source=nonsense", None, "").await,
        400,
        "`nonsense` is not an IP address",
    );
    refused(
        admin_json(&server, "GET", "/explain", None, "").await,
        400,
        "say which source",
    );
    assert_eq!(
        get(&server, "/lists").await["entries"],
        serde_json::json!([])
    );
}

#[tokio::test]
async fn without_a_token_list_changes_are_refused_while_reads_stay_open() {
    let upstream = echo_upstream().await;
    let server = support::start(&support::one_listener(
        "listen = \"127.0.0.1:0\"",
        upstream,
        "",
        "[[rule]]\nname = \"r\"\nlimits = [{ rate = \"10/1s\" }]",
    ))
    .await;
    let (status, body) = admin_json(
        &server,
        "POST",
        "/lists/deny",
        Some("anything"),
        r#"{"cidr": "127.0.0.1", "ttl": 60}"#,
    )
    .await;
    assert_eq!(status, 403, "{body}");
    let error: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert!(
        error["error"].as_str().unwrap().contains("needs a token"),
        "{body}"
    );
    let lists = get(&server, "/lists").await;
    assert_eq!(lists["entries"], serde_json::json!([]));
}

#[tokio::test]
async fn the_lists_in_text_show_each_entry_and_format_text_wins_over_accept() {
    let dir = dir();
    let server = start(&dir, "100/60s").await;
    let (status, body) = admin_json(
        &server,
        "POST",
        "/lists/deny",
        Some(TOKEN),
        r#"{"cidr": "192.0.2.0/24", "ttl": "1h", "reason": "ticket 7"}"#,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    // Without a cluster no entry names a node.
    let added: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(added.get("node"), None, "{added}");
    let listed = get(&server, "/lists").await;
    assert_eq!(listed["entries"][0].get("node"), None, "{listed}");
    // Asked for JSON by its Accept header, for text by ?format=text: text.
    let (status, text) = admin_json(&server, "GET", "/lists?format=text", None, "").await;
    assert_eq!(status, 200, "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "1 run-time entries (at most 10000, each for at most 604800s)"
    );
    assert!(lines[1].starts_with("deny  192.0.2.0/24 "), "{text}");
    assert!(lines[1].contains(" expires in "), "{text}");
    assert!(lines[1].ends_with("s  \"ticket 7\""), "{text}");
}

#[tokio::test]
async fn a_list_entry_in_json_names_its_network_list_reason_and_time_left() {
    let dir = dir();
    let server = start(&dir, "100/60s").await;
    let unix_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    };
    // The add and the reads happen between these two readings, however slow the machine.
    let before = unix_ms();
    let (status, body) = admin_json(
        &server,
        "POST",
        "/lists/allow",
        Some(TOKEN),
        r#"{"cidr": "192.0.2.0/24", "ttl": 600, "reason": "ticket 9"}"#,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let added: Value = serde_json::from_str(&body).unwrap();
    let listed = get(&server, "/lists").await;
    let after = unix_ms();
    // Plus a millisecond for the server's own rounding.
    let span = after - before + 1;
    assert_eq!(listed["max_ttl_s"], 604_800, "{listed}");
    for entry in [&added, &listed["entries"][0]] {
        assert_eq!(entry["cidr"], "192.0.2.0/24", "{entry}");
        assert_eq!(entry["list"], "allow", "{entry}");
        assert_eq!(entry["reason"], "ticket 9", "{entry}");
        let left = entry["expires_in_ms"].as_u64().unwrap();
        assert!((600_000 - span..=600_000).contains(&left), "{entry}");
        // The end as a wall-clock time: the add's time plus the TTL.
        let end = entry["expires_unix_ms"].as_u64().unwrap();
        assert!(
            (before + 600_000 - span..=after + 600_000).contains(&end),
            "{entry}"
        );
    }
    // Replaced (the same network, the same list): 200, with the new reason.
    let (status, body) = admin_json(
        &server,
        "POST",
        "/lists/allow",
        Some(TOKEN),
        r#"{"cidr": "192.0.2.0/24", "ttl": 60, "reason": "ticket 10"}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let replaced: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(replaced["reason"], "ticket 10", "{replaced}");
    // Removed: the entry it held.
    let (status, body) = admin_json(
        &server,
        "DELETE",
        "/lists/allow?cidr=192.0.2.0/24",
        Some(TOKEN),
        "",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let removed: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(removed["cidr"], "192.0.2.0/24", "{removed}");
    assert_eq!(removed["reason"], "ticket 10", "{removed}");
}

/// At its limit a source's next event is throttled (the decision counts the event itself), so
/// `/explain` says `throttle` there, not `allow`: the verdict an event from it would get now.
/// The event that follows gets just that. (Before: `allow` at an estimate of 3 on 3/1m, and
/// the next event throttled.)
#[tokio::test]
async fn at_the_limit_explain_says_the_verdict_the_next_event_gets() {
    let dir = dir();
    let server = start(&dir, "3/60s").await;
    let shared = Arc::clone(server.shared());
    for host in ["192.0.2.1", "192.0.2.2", "192.0.2.3"] {
        decide(&shared, host);
    }
    let why = get(&server, "/explain?source=192.0.2.9").await;
    let limit = &why["rules"][0]["limits"][0];
    assert_eq!(limit["estimate"], 3, "{why}");
    assert_eq!(why["verdict"]["verdict"], "throttle", "{why}");
    assert_eq!(why["verdict"]["estimate"], 4, "{why}");
    assert_eq!(limit["over"], true, "{why}");
    let source = Source::new("192.0.2.9".parse::<IpAddr>().unwrap());
    let event = tollgate_filter::Event {
        source,
        transport: Transport::Tcp,
        bytes: 100,
    };
    let next = shared.filter().decide(&event, shared.now());
    assert!(
        matches!(next.verdict, tollgate_filter::Verdict::Throttle(_)),
        "{next:?}"
    );
}

/// A `reply` rule's `Retry-After`, as a client reads it, is never shorter than the time the
/// source's sliding count takes to leave room for one more connection. 8 connections on
/// `5/10s`: the 9th fits once the estimate is 4; wherever the window boundary falls among
/// the 8, that takes at least half a period (all in one window: the rest of it and half the
/// next one). Before, the time was `period x (1 - limit / estimate)` = 3.75 s, told as
/// `Retry-After: 4`, and a client back after 4 s was refused (and counted) again.
#[tokio::test]
async fn a_reply_s_retry_after_is_never_shorter_than_the_sliding_count_s_fade() {
    let upstream = echo_upstream().await;
    let server = support::start(&support::one_listener(
        support::NO_ADMIN,
        upstream,
        "",
        "[[rule]]\nname = \"r\"\naction = \"reply\"\nlimits = [{ rate = \"5/10s\" }]",
    ))
    .await;
    let front = server.local_addr("front").unwrap();
    let mut told = Vec::new();
    for _ in 0..8 {
        if let Wire::Closed(bytes) = attempt("127.0.0.2", front).await {
            let text = String::from_utf8(bytes).unwrap();
            let seconds = text
                .lines()
                .find_map(|l| l.strip_prefix("Retry-After: "))
                .unwrap_or_else(|| panic!("{text}"));
            told.push(seconds.trim().parse::<u64>().unwrap());
        }
    }
    assert_eq!(told.len(), 3, "{told:?}");
    let last = *told.last().unwrap();
    // At least half a period; at most the rest of the window and the whole next one.
    assert!((5..=20).contains(&last), "Retry-After {told:?}");
}

/// The whole milliseconds written right after `prefix` in `text`, if `ms` follows them.
fn millis_after(text: &str, prefix: &str) -> Option<u64> {
    let rest = &text[text.find(prefix)? + prefix.len()..];
    let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    rest[digits..]
        .starts_with("ms")
        .then(|| rest[..digits].parse().ok())?
}

/// `/explain` in text writes every time it works out in one format, whole milliseconds
/// (`retry after 58500ms`, `back under in 58500ms`), and the manual's example (proxy/docs/admin-api.md) is
/// written as the binary writes it. (Before: `24s` in the README, `22500ms` from the binary, and whole
/// seconds whenever the time happened to be a whole number of them.)
#[tokio::test]
async fn explain_writes_its_times_in_milliseconds_as_the_readme_shows() {
    let dir = dir();
    let server = start(&dir, "3/60s").await;
    let shared = Arc::clone(server.shared());
    for host in ["2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2::3"] {
        decide(&shared, host);
    }
    let (status, body) = support::admin(&server, "GET", "/explain?source=2001:db8:1:2::9").await;
    assert_eq!(status, 200);
    let retry = millis_after(&body, "retry after ").unwrap_or_else(|| panic!("{body}"));
    let room = millis_after(&body, "room in ").unwrap_or_else(|| panic!("{body}"));
    // The verdict and the limit say the same time (a fourth event fits at an estimate of 2).
    assert_eq!(retry, room, "{body}");
    assert!(
        body.contains("at the limit (the next event is over)"),
        "{body}"
    );
    decide(&shared, "2001:db8:1:2::4");
    let (_, body) = support::admin(&server, "GET", "/explain?source=2001:db8:1:2::9").await;
    let retry = millis_after(&body, "retry after ").unwrap_or_else(|| panic!("{body}"));
    let back = millis_after(&body, "over, back under in ").unwrap_or_else(|| panic!("{body}"));
    assert_eq!(retry, back, "{body}");

    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/admin-api.md"))
        .expect("the manual's admin API page");
    let start = readme
        .find("$ curl -s 'http://127.0.0.1:9090/explain?source=")
        .expect("the manual's /explain example");
    let example = &readme[start..start + readme[start..].find("```").unwrap()];
    let retry = millis_after(example, "retry after ").unwrap_or_else(|| panic!("{example}"));
    let back = millis_after(example, "over, back under in ").unwrap_or_else(|| panic!("{example}"));
    assert_eq!(retry, back, "{example}");
}
