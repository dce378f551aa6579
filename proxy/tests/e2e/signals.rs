//! Signals to the real binary: SIGHUP reloads (a bad file is refused and the old policy
//! stays), SIGTERM drains and exits cleanly.

use crate::support::process::Launch;
use crate::support::{self, Wire, attempt, echo_upstream};
use tollgate::config::ProxyConfig;
use tollgate::server::{Server, Signals};

fn rule(rate: &str) -> String {
    format!("[[rule]]\nname = \"r\"\nlimits = [{{ rate = \"{rate}\" }}]")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_and_sigterm_stops() {
    let upstream = echo_upstream().await;
    let mut proxy = Launch::new(
        "signals",
        &format!("upstreams = [\"{upstream}\"]"),
        &rule("2/60s"),
    )
    .start();
    assert_eq!(attempt("127.0.0.2", proxy.front).await, Wire::Echoed);
    assert_eq!(attempt("127.0.0.2", proxy.front).await, Wire::Echoed);
    assert_eq!(attempt("127.0.0.2", proxy.front).await, Wire::Reset);
    // A good file: the limit rises to 4, the 3 already counted stay counted.
    let text = std::fs::read_to_string(&proxy.path).unwrap();
    std::fs::write(&proxy.path, text.replace("2/60s", "4/60s")).unwrap();
    proxy.signal("HUP");
    support::eventually(|| proxy.metric("tollgate_reloads_total{result=\"ok\"}") == 1.0).await;
    assert_eq!(attempt("127.0.0.2", proxy.front).await, Wire::Echoed);
    assert_eq!(attempt("127.0.0.2", proxy.front).await, Wire::Reset);
    // A bad file: refused, the limit of 4 stays.
    std::fs::write(&proxy.path, "this is not toml").unwrap();
    proxy.signal("HUP");
    support::eventually(|| proxy.metric("tollgate_reloads_total{result=\"error\"}") == 1.0).await;
    assert_eq!(attempt("127.0.0.3", proxy.front).await, Wire::Echoed);
    proxy.signal("TERM");
    assert!(proxy.wait_exit().success());
}

/// SIGTERM to this process until `run` ends (its handlers may not be installed yet: a signal
/// before them is not queued for them); what it answered.
async fn terminated<T>(run: tokio::task::JoinHandle<T>) -> T {
    support::eventually(|| {
        let sent = std::process::Command::new("kill")
            .args(["-s", "TERM", &std::process::id().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success());
        run.is_finished()
    })
    .await;
    run.await.expect("ran to its end")
}

/// In process, a proxy reloading from its file, with a drain of 100 ms; a relay to the echo
/// upstream held open through it if `hold`.
async fn serving(hold: bool) -> (Server, tempfile::TempDir, Option<tokio::net::TcpStream>) {
    let dir = support::scratch("signals-in-process");
    let path = dir.path().join("tollgate.toml");
    let text = support::one_listener(
        "enabled = false",
        echo_upstream().await,
        "",
        &format!("[proxy]\ndrain = \"100ms\"\n\n{}", rule("100/60s")),
    );
    std::fs::write(&path, &text).unwrap();
    let config = ProxyConfig::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let server = Server::start(config, Some(path)).await.expect("starts");
    let held = if hold {
        let front = server.local_addr("front").unwrap();
        let held = support::connect_from("127.0.0.2", front).await.unwrap();
        support::eventually(|| server.open_connections() == 1).await;
        Some(held)
    } else {
        None
    };
    (server, dir, held)
}

/// What `tollgate run` does, in process: SIGHUP reloads, SIGTERM stops, and the answer is
/// how many connections the drain cut (a relay held open past it: 1; none open: 0), with
/// the handlers installed before the proxy serves or by `run_until_signalled`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_sighup_reloads_and_sigterm_answers_how_many_the_drain_cut() {
    let signals = Signals::install().expect("handlers");
    let (server, dir, _held) = serving(true).await;
    let shared = std::sync::Arc::clone(server.shared());
    let run = tokio::spawn(server.run_until(signals));
    let path = dir.path().join("tollgate.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        format!("{text}\n{}", rule("5/60s").replace("\"r\"", "\"s\"")),
    )
    .unwrap();
    let hangup = std::process::Command::new("kill")
        .args(["-s", "HUP", &std::process::id().to_string()])
        .status()
        .expect("kill runs");
    assert!(hangup.success());
    support::eventually(|| shared.filter().policy().rule(1).is_some()).await;
    assert_eq!(terminated(run).await, 1, "the held relay was cut");

    let (server, _dir, _) = serving(false).await;
    let run = tokio::spawn(server.run_until_signalled());
    assert_eq!(terminated(run).await.expect("handlers"), 0);
    let (server, _dir, _held) = serving(true).await;
    let run = tokio::spawn(server.run_until_signalled());
    assert_eq!(terminated(run).await.expect("handlers"), 1);
}
