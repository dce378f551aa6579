//! Operating a running proxy: reloads keep counters and refuse bad files, the admin endpoint
//! answers, and a shutdown drains.

use std::path::PathBuf;
use std::time::Duration;

use crate::support::{self, Wire, admin, admin_as, attempt, echo_upstream, metric};
use tollgate::config::ProxyConfig;
use tollgate::server::Server;

/// The admin token of these tests, in a file of its own.
const TOKEN: &str = "operations-token";

/// A fresh directory for test `name`'s files, removed when dropped, holding the token file
/// (a test's own: tests run at once must not see another's half-written file).
fn scratch(name: &str) -> tempfile::TempDir {
    let dir = support::scratch(name);
    std::fs::write(dir.path().join("token"), format!("{TOKEN}\n")).unwrap();
    dir
}

fn config(dir: &tempfile::TempDir, upstream: std::net::SocketAddr, rate: &str) -> String {
    let admin = format!(
        "listen = \"127.0.0.1:0\"\ntoken_file = \"{}\"",
        dir.path().join("token").display()
    );
    let rule = format!("[[rule]]\nname = \"per-source\"\nlimits = [{{ rate = \"{rate}\" }}]");
    support::one_listener(&admin, upstream, "", &rule)
}

/// The config file in `dir`, holding `text`.
fn file(dir: &tempfile::TempDir, text: &str) -> PathBuf {
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, text).unwrap();
    path
}

async fn start_from(path: &PathBuf) -> Server {
    let text = std::fs::read_to_string(path).unwrap();
    Server::start(ProxyConfig::parse(&text).unwrap(), Some(path.clone()))
        .await
        .unwrap()
}

#[tokio::test]
async fn a_reload_changes_limits_and_keeps_counters_and_a_bad_one_changes_nothing() {
    let upstream = echo_upstream().await;
    let dir = scratch("reload");
    let path = file(&dir, &config(&dir, upstream, "5/60s"));
    let server = start_from(&path).await;
    let front = server.local_addr("front").unwrap();
    for _ in 0..4 {
        assert_eq!(attempt("127.0.0.2", front).await, Wire::Echoed);
    }
    // Raise the limit to 6: the 4 connections already counted stay counted, so 2 more pass.
    std::fs::write(&path, config(&dir, upstream, "6/60s")).unwrap();
    server
        .shared()
        .reloader()
        .reload()
        .expect("a good file reloads");
    assert_eq!(attempt("127.0.0.2", front).await, Wire::Echoed);
    assert_eq!(attempt("127.0.0.2", front).await, Wire::Echoed);
    assert_eq!(
        attempt("127.0.0.2", front).await,
        Wire::Reset,
        "counters survived the reload"
    );
    // A bad file (through the admin endpoint this time) is refused with its line; the limit of
    // 6 stays in force.
    std::fs::write(&path, config(&dir, upstream, "0/60s")).unwrap();
    let (status, body) = admin_as(&server, "POST", "/reload", Some(TOKEN)).await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("tollgate.toml:13:20: `0/60s`"), "{body}");
    assert_eq!(
        attempt("127.0.0.3", front).await,
        Wire::Echoed,
        "a zero rate did not apply"
    );
    assert_eq!(
        metric(&server, "tollgate_reloads_total{result=\"ok\"}"),
        1.0
    );
    assert_eq!(
        metric(&server, "tollgate_reloads_total{result=\"error\"}"),
        1.0
    );
}

#[tokio::test]
async fn the_penalty_sketches_report_themselves_in_metrics() {
    let upstream = echo_upstream().await;
    let dir = scratch("penalty-metrics");
    let text = config(&dir, upstream, "2/60s").replace(
        "limits = [{ rate = \"2/60s\" }]",
        "limits = [{ rate = \"2/60s\" }]\npenalty = \"5m\"",
    );
    assert!(text.contains("penalty = \"5m\""), "{text}");
    let server = start_from(&file(&dir, &text)).await;
    let front = server.local_addr("front").unwrap();
    let bound = "tollgate_penalty_sketch_overcount_bound{length=\"5m\"}";
    assert!(
        metric(
            &server,
            "tollgate_penalty_sketch_memory_bytes{length=\"5m\"}"
        ) > 0.0
    );
    assert_eq!(
        metric(&server, "tollgate_penalty_sketch_events{length=\"5m\"}"),
        0.0
    );
    assert!(
        metric(&server, bound) >= 1.0,
        "a bound is stated before any mark"
    );
    for _ in 0..4 {
        let _ = attempt("127.0.0.8", front).await;
    }
    // The third connection went over the limit and marked a penalty: one mark of 65,536.
    assert!(
        metric(&server, "tollgate_penalty_sketch_events{length=\"5m\"}") >= 65_536.0,
        "the penalty's mark is counted"
    );
}

/// A reload reads its file (and resolves upstream host names) off the runtime: one that blocks,
/// as on a hung mount or a DNS server that does not answer, leaves traffic served. The test's
/// runtime has one thread, so a reload on it would stall every connection.
#[tokio::test]
async fn a_reload_that_blocks_on_its_file_leaves_traffic_served() {
    let upstream = echo_upstream().await;
    let dir = scratch("blocked-reload");
    let text = config(&dir, upstream, "100/60s");
    let path = file(&dir, &text);
    let server = start_from(&path).await;
    let front = server.local_addr("front").unwrap();
    // The file becomes a FIFO: reading it blocks until a writer comes.
    std::fs::remove_file(&path).unwrap();
    let made = std::process::Command::new("mkfifo").arg(&path).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo {}", path.display());
    let (reading, read_started) = tokio::sync::oneshot::channel::<()>();
    let (served, was_served) = std::sync::mpsc::channel::<()>();
    let fifo = path.clone();
    let writer = std::thread::spawn(move || {
        // Opening for writing waits for the reload to open the FIFO for reading.
        let mut file = std::fs::File::options().write(true).open(&fifo).unwrap();
        let _ = reading.send(());
        // The file is given once traffic was served, or after 30 s if it never is (the
        // runtime is stalled then: this thread is what frees it, and the test fails).
        let served = was_served.recv_timeout(Duration::from_secs(30)).is_ok();
        std::io::Write::write_all(&mut file, text.as_bytes()).unwrap();
        served
    });
    let traffic = async {
        read_started.await.expect("the reload opened its file");
        assert_eq!(attempt("127.0.0.4", front).await, Wire::Echoed);
        let _ = served.send(());
    };
    let ((status, body), ()) =
        tokio::join!(admin_as(&server, "POST", "/reload", Some(TOKEN)), traffic);
    assert!(
        writer.join().unwrap(),
        "a connection was served while the reload waited for its file"
    );
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn the_admin_endpoint_reports_metrics_offenders_and_estimates() {
    let upstream = echo_upstream().await;
    let dir = scratch("admin");
    let path = file(&dir, &config(&dir, upstream, "2/60s"));
    let server = start_from(&path).await;
    let front = server.local_addr("front").unwrap();
    for _ in 0..5 {
        let _ = attempt("127.0.0.9", front).await;
    }
    let (status, metrics) = admin(&server, "GET", "/metrics").await;
    assert_eq!(status, 200);
    for needle in [
        "tollgate_decisions_total{listener=\"front\",verdict=\"allowed\"} 2",
        "tollgate_decisions_total{listener=\"front\",verdict=\"throttled\"} 3",
        "tollgate_throttled_total{listener=\"front\",rule=\"per-source\"} 3",
        "tollgate_sketch_memory_bytes{window=\"1m\"}",
        "tollgate_sketch_overcount_bound{window=\"1m\"}",
        "tollgate_connection_memory_bytes",
    ] {
        assert!(metrics.contains(needle), "{needle} missing from\n{metrics}");
    }
    let (_, top) = admin(&server, "GET", "/top").await;
    let first = top.lines().nth(1).unwrap_or_default();
    assert!(
        first.starts_with("127.0.0.9 ") && first.contains(" 3 "),
        "{top}"
    );
    let (_, estimate) = admin(&server, "GET", "/estimate?source=127.0.0.9").await;
    assert!(
        estimate.contains("per-source") && estimate.contains("127.0.0.9/32"),
        "{estimate}"
    );
    let row = estimate.lines().nth(1).unwrap();
    assert!(row.split_whitespace().nth(3) == Some("5"), "{estimate}");
    let (status, _) = admin(&server, "GET", "/estimate?source=nonsense").await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn a_shutdown_stops_accepting_and_drains_open_connections() {
    let upstream = echo_upstream().await;
    let dir = scratch("shutdown");
    let text =
        config(&dir, upstream, "100/60s").replace("[admin]", "[proxy]\ndrain = \"5s\"\n\n[admin]");
    let server = support::start(&text).await;
    let front = server.local_addr("front").unwrap();
    let open = support::connect_from("127.0.0.2", front).await.unwrap();
    support::eventually(|| server.open_connections() == 1).await;
    let stopping = tokio::spawn(server.shutdown());
    // Accepting stops first (the listener closes); the open connection still works.
    let deadline = tokio::time::Instant::now() + support::BOUND;
    while support::connect_from("127.0.0.3", front).await.is_ok() {
        assert!(tokio::time::Instant::now() < deadline, "still accepting");
        tokio::task::yield_now().await;
    }
    assert_eq!(support::exchange(open, b"still here\n").await, Wire::Echoed);
    // It ends (the exchange dropped it) and the drain finishes with nothing cut.
    let cut = stopping.await.unwrap();
    assert_eq!(cut, 0, "the open connection finished within the drain");
}

#[tokio::test]
async fn the_status_json_counts_each_verdict_and_lists_the_offenders_with_their_counts() {
    let upstream = echo_upstream().await;
    let rest = "[lists]\ndeny = [\"127.0.0.66/32\"]\n\n[[rule]]\nname = \"per-source\"\n\
                limits = [{ rate = \"2/60s\" }]";
    let server = support::start(&support::one_listener(
        "listen = \"127.0.0.1:0\"",
        upstream,
        "",
        rest,
    ))
    .await;
    let front = server.local_addr("front").unwrap();
    for _ in 0..5 {
        let _ = attempt("127.0.0.9", front).await;
    }
    let _ = attempt("127.0.0.66", front).await;
    support::eventually(|| server.open_connections() == 0).await;
    let (status, body) = admin(&server, "GET", "/status.json").await;
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    let counts = |v: &serde_json::Value| {
        (
            v["allowed"].clone(),
            v["throttled"].clone(),
            v["denied"].clone(),
        )
    };
    let expected = (2.into(), 3.into(), 1.into());
    assert_eq!(counts(&json["totals"]), expected, "{json}");
    let listener = &json["listeners"][0];
    assert_eq!(counts(listener), expected, "{json}");
    assert_eq!(
        (&listener["open"], &listener["held"], &listener["sessions"]),
        (&0.into(), &0.into(), &0.into()),
        "{json}"
    );
    assert_eq!(json["decide_failures"], 0, "{json}");
    let uptime = json["uptime_seconds"].as_f64().unwrap();
    assert!(uptime > 0.0 && uptime < 3600.0, "{json}");
    // Most rejected first, each with its count, error and latest reason.
    let offenders: Vec<_> = json["offenders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["source"].clone(),
                o["rejected"].clone(),
                o["error"].clone(),
                o["last"].clone(),
            )
        })
        .collect();
    assert_eq!(
        offenders,
        [
            ("127.0.0.9".into(), 3.into(), 0.into(), "per-source".into()),
            ("127.0.0.66".into(), 1.into(), 0.into(), "deny list".into()),
        ],
        "{json}"
    );
    let sketch = &json["sketches"][0];
    assert_eq!(sketch["window"], "1m", "{json}");
    // The five connections the rule counted, all in this window.
    assert_eq!(
        (&sketch["events_current"], &sketch["events_previous"]),
        (&5.into(), &0.into()),
        "{json}"
    );
    assert!(sketch["memory_bytes"].as_u64().unwrap() > 0, "{json}");
    let confidence = sketch["confidence"].as_f64().unwrap();
    assert!(confidence > 0.5 && confidence <= 1.0, "{json}");
    assert_eq!(json["penalties"], serde_json::json!([]), "{json}");
}
