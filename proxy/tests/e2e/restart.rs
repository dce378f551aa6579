//! Warm restart through the real binary: the state file written at SIGTERM is read at the
//! next start, so a flood throttled before a restart is still throttled after it (a penalty
//! too, and across a change of the sketches' shape), while a damaged file is refused with a
//! message and the proxy starts cold.

use std::path::{Path, PathBuf};

use crate::support::process::{Launch, Proxy};
use crate::support::{self, Wire, attempt, echo_upstream, eventually, metric};

/// A fresh directory for test `name`'s state file (it outlives each proxy the test starts),
/// and the state file there, not written yet.
fn state_path(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = support::scratch(name);
    let path = dir.path().join("state.bin");
    (dir, path)
}

/// `[proxy]` with the state file, then the policy: 3 connections per 10 minutes (a long
/// period, so a slow machine cannot see the flood slide out during the test), `extra` after.
fn config(state: &Path, sketch: &str, extra: &str) -> String {
    format!(
        "[proxy]\nstate_file = \"{}\"\n\n[sketch]\n{sketch}\n\n[[rule]]\nname = \"per-source\"\n\
         limits = [{{ rate = \"3/10m\" }}]\n{extra}",
        state.display()
    )
}

/// Checks that `proxy` restored windows from its state file, showing its log if not.
fn restored(proxy: &Proxy) {
    let windows = proxy.metric("tollgate_state_restored_windows ");
    assert!(
        windows >= 1.0,
        "{windows} windows restored:\n{}",
        proxy.log()
    );
}

/// Sends `n` connections from `from`; what the last one saw.
async fn flood(from: &str, proxy: &Proxy, n: usize) -> Wire {
    let mut last = Wire::Echoed;
    for _ in 0..n {
        last = attempt(from, proxy.front).await;
    }
    last
}

/// Starts `tollgate run` for test `name` with its stderr kept (see [`Proxy::log`]), so a
/// failure can say what the proxy logged about its state file.
fn start(name: &str, listener: &str, rest: &str) -> Proxy {
    Launch::new(name, listener, rest).quiet().start()
}

/// Stops `proxy` with SIGTERM and checks that it exited cleanly, having saved `state`.
fn terminate(mut proxy: Proxy, state: &Path) {
    proxy.signal("TERM");
    let status = proxy.wait_exit();
    let log = proxy.log();
    assert!(status.success(), "{status}:\n{log}");
    assert!(
        state.exists(),
        "SIGTERM wrote no {}:\n{log}",
        state.display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_stays_throttled_across_restarts_and_a_shape_change() {
    let name = "restart-flood";
    let upstream = format!("upstreams = [\"{}\"]", echo_upstream().await);
    let (_dir, state) = state_path(name);
    let same = config(&state, "memory = \"1MiB\"", "");
    let proxy = start(name, &upstream, &same);
    assert_eq!(flood("127.0.0.2", &proxy, 10).await, Wire::Reset);
    assert_eq!(proxy.metric("tollgate_state_restored_windows "), 0.0);
    terminate(proxy, &state);

    // The same config: the flood's window is restored as it was.
    let proxy = start(name, &upstream, &same);
    restored(&proxy);
    assert_eq!(attempt("127.0.0.2", proxy.front).await, Wire::Reset);
    assert_eq!(attempt("127.0.0.3", proxy.front).await, Wire::Echoed);
    terminate(proxy, &state);

    // Another memory and a rule added: every sketch's share changed, the old ones are read
    // alongside the new ones (as a reload does), the flood is still throttled.
    let changed = config(
        &state,
        "memory = \"2MiB\"",
        "\n[[rule]]\nname = \"networks\"\nlimits = [{ rate = \"1000/1m\", ipv4_prefix = 24 }]\n",
    );
    let proxy = start(name, &upstream, &changed);
    restored(&proxy);
    assert_eq!(attempt("127.0.0.2", proxy.front).await, Wire::Reset);
    assert_eq!(attempt("127.0.0.4", proxy.front).await, Wire::Echoed);
    terminate(proxy, &state);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_penalty_is_kept_across_a_restart() {
    let name = "restart-penalty";
    let upstream = format!("upstreams = [\"{}\"]", echo_upstream().await);
    let (_dir, state) = state_path(name);
    let penalised = config(&state, "memory = \"1MiB\"", "penalty = \"1h\"\n");
    let penalty = "tollgate_refused_total{listener=\"front\",reason=\"penalty\"}";
    let proxy = start(name, &upstream, &penalised);
    flood("127.0.0.2", &proxy, 6).await;
    assert!(proxy.metric(penalty) >= 1.0, "the source serves a penalty");
    terminate(proxy, &state);

    let proxy = start(name, &upstream, &penalised);
    restored(&proxy);
    assert_eq!(proxy.metric(penalty), 0.0);
    let wire = attempt("127.0.0.2", proxy.front).await;
    assert_eq!(wire, Wire::Reset, "{}", proxy.log());
    assert_eq!(proxy.metric(penalty), 1.0, "refused for its penalty");
    assert_eq!(attempt("127.0.0.3", proxy.front).await, Wire::Echoed);
    terminate(proxy, &state);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_state_file_is_refused_and_the_start_is_cold() {
    let name = "restart-damaged";
    let upstream = format!("upstreams = [\"{}\"]", echo_upstream().await);
    let (_dir, state) = state_path(name);
    let text = config(&state, "memory = \"1MiB\"", "");
    let proxy = start(name, &upstream, &text);
    assert_eq!(flood("127.0.0.2", &proxy, 10).await, Wire::Reset);
    terminate(proxy, &state);
    let good = std::fs::read(&state).unwrap();
    let mut flipped = good.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x10;
    let mut version = good.clone();
    version[8] = 9;
    let damages: [(&str, Vec<u8>, &str); 4] = [
        ("flipped byte", flipped, "checksum mismatch"),
        (
            "truncated",
            good[..good.len() - 100].to_vec(),
            "a cut or padded file",
        ),
        (
            "other version",
            version,
            "format version 9; this build reads versions 1 to 2",
        ),
        (
            "other magic",
            b"[proxy]\nthis is not a state file at all, but long enough".to_vec(),
            "not a Tollgate state file",
        ),
    ];
    for (what, bytes, message) in damages {
        std::fs::write(&state, &bytes).unwrap();
        let proxy = start(name, &upstream, &text);
        // Cold: the flooded source has a fresh budget.
        assert_eq!(
            attempt("127.0.0.2", proxy.front).await,
            Wire::Echoed,
            "{what}"
        );
        let log = proxy.log();
        let expected = format!("state file {}: ", state.display());
        assert!(log.contains(&expected), "{what}: {log}");
        assert!(log.contains(message), "{what}: {log}");
        assert!(log.contains("refused, starting cold"), "{what}: {log}");
        // Killed, not stopped: the damaged file is not replaced by a save.
        drop(proxy);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_state_is_saved_every_interval_and_at_shutdown() {
    let (_dir, state) = state_path("restart-interval");
    let upstream = echo_upstream().await;
    let server = support::start(&format!(
        "[proxy]\nstate_file = \"{}\"\nstate_interval = \"50ms\"\n\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n\n\
         [[listener]]\nname = \"front\"\nlisten = \"127.0.0.1:0\"\nupstreams = [\"{upstream}\"]\n\n\
         [[rule]]\nname = \"r\"\nlimits = [{{ rate = \"3/10m\" }}]\n",
        state.display()
    ))
    .await;
    let ok = "tollgate_state_saves_total{result=\"ok\"}";
    eventually(|| metric(&server, ok) >= 2.0).await;
    let bytes = std::fs::read(&state).unwrap();
    let saved = tollgate::state::decode(&bytes).unwrap();
    assert_eq!(saved.sketches.len(), 1);
    assert!(metric(&server, "tollgate_state_file_bytes ") > 0.0);
    // Shutdown saves once more, whatever the interval.
    let shared = std::sync::Arc::clone(server.shared());
    let saves = |shared: &tollgate::shared::Shared| {
        let text = shared
            .metrics()
            .render(&shared.filter().policy(), shared.now());
        let line = text.lines().find(|l| l.starts_with(ok)).unwrap().to_owned();
        line.rsplit(' ').next().unwrap().parse::<f64>().unwrap()
    };
    // The interval task may save once more before it stops: compare with an upper bound.
    server.shutdown().await;
    let after = saves(&shared);
    std::fs::remove_file(&state).unwrap();
    let again = support::start(&format!(
        "[proxy]\nstate_file = \"{}\"\nstate_interval = \"1h\"\n\n[admin]\nenabled = false\n\n\
         [[rule]]\nname = \"r\"\nlimits = [{{ rate = \"3/10m\" }}]\n",
        state.display()
    ))
    .await;
    assert!(!state.exists(), "no save before the first hour");
    let shared = std::sync::Arc::clone(again.shared());
    again.shutdown().await;
    assert!(state.exists(), "shutdown saved");
    assert_eq!(saves(&shared), 1.0);
    assert!(after >= 3.0, "{after}");
}

#[tokio::test]
async fn run_time_list_entries_are_kept_across_a_restart() {
    use std::time::Duration;
    use tollgate_filter::{Cidr, ListKind};
    let (_dir, state) = state_path("restart-lists");
    let text = format!(
        "[proxy]\nstate_file = \"{}\"\nstate_interval = \"1h\"\n\n[admin]\nenabled = false\n\n\
         [[rule]]\nname = \"r\"\nlimits = [{{ rate = \"3/10m\" }}]\n",
        state.display()
    );
    let server = support::start(&text).await;
    let shared = server.shared();
    let hour = Duration::from_secs(3600);
    let deny = Cidr::parse("192.0.2.0/24").unwrap();
    let allow = Cidr::parse("2001:db8::/48").unwrap();
    let lists = shared.filter().lists();
    lists
        .add(deny, ListKind::Deny, hour, "flood".into(), shared.now())
        .unwrap();
    lists
        .add(
            allow,
            ListKind::Allow,
            hour * 2,
            "partner".into(),
            shared.now(),
        )
        .unwrap();
    server.shutdown().await;

    let again = support::start(&text).await;
    let shared = again.shared();
    let mut entries: Vec<_> = shared
        .filter()
        .lists()
        .entries(shared.now())
        .into_iter()
        .map(|e| {
            let left = e.expires.saturating_since(shared.now());
            (e.cidr, e.kind, e.reason, left)
        })
        .collect();
    entries.sort_by_key(|(_, _, reason, _)| reason.clone());
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert_eq!(
        (entries[0].0, entries[0].1, entries[0].2.as_str()),
        (deny, ListKind::Deny, "flood")
    );
    assert_eq!(
        (entries[1].0, entries[1].1, entries[1].2.as_str()),
        (allow, ListKind::Allow, "partner")
    );
    // Each keeps what was left of its time to live (less the time the restart took).
    assert!(entries[0].3 <= hour && entries[0].3 > hour / 2);
    assert!(entries[1].3 <= hour * 2 && entries[1].3 > hour);
    again.shutdown().await;
}

/// After a warm restart `/status.json`'s `uptime_seconds` is the time since this start (the
/// time base of its counters, which start at zero), not the restored sketch clock: the first
/// proxy runs 2 s and saves its clock; the second, asked at once, says no more than the time
/// since the test started it. (Before: the restored clock, 2 s and more, every time.)
#[tokio::test]
async fn uptime_after_a_warm_restart_counts_from_this_start() {
    use std::time::{Duration, Instant};
    use tollgate_sketch::Tick;
    let (_dir, state) = state_path("restart-uptime");
    let text = format!(
        "[proxy]\nstate_file = \"{}\"\nstate_interval = \"1h\"\n\n[admin]\nlisten = \"127.0.0.1:0\"\n\n\
         [[rule]]\nname = \"r\"\nlimits = [{{ rate = \"3/10m\" }}]\n",
        state.display()
    );
    let server = support::start(&text).await;
    let shared = std::sync::Arc::clone(server.shared());
    let lived = Tick::from_duration(Duration::from_secs(2));
    eventually(|| shared.now() >= lived).await;
    server.shutdown().await;

    let before = Instant::now();
    let again = support::start(&text).await;
    assert!(again.shared().now() >= lived, "the clock was not restored");
    let (status, body) = support::admin(&again, "GET", "/status.json").await;
    let since = before.elapsed().as_secs_f64();
    assert_eq!(status, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    let uptime = json["uptime_seconds"].as_f64().unwrap();
    assert!(
        uptime <= since,
        "uptime {uptime} s for a proxy started {since} s ago"
    );
    again.shutdown().await;
}
