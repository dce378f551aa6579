//! Signals to the real binary: SIGHUP reloads (a bad file is refused and the old policy
//! stays), SIGTERM drains and exits cleanly.

mod common;

use common::process::Launch;
use common::{Wire, attempt, echo_upstream};

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
    common::eventually(|| proxy.metric("tollgate_reloads_total{result=\"ok\"}") == 1.0).await;
    assert_eq!(attempt("127.0.0.2", proxy.front).await, Wire::Echoed);
    assert_eq!(attempt("127.0.0.2", proxy.front).await, Wire::Reset);
    // A bad file: refused, the limit of 4 stays.
    std::fs::write(&proxy.path, "this is not toml").unwrap();
    proxy.signal("HUP");
    common::eventually(|| proxy.metric("tollgate_reloads_total{result=\"error\"}") == 1.0).await;
    assert_eq!(attempt("127.0.0.3", proxy.front).await, Wire::Echoed);
    proxy.signal("TERM");
    assert!(proxy.wait_exit().success());
}
