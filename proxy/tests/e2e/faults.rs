//! Faults: the open-file limit hit in accept. The proxy runs as its own process under a small
//! `ulimit -n`, so the limit is real and does not touch the test process.

use std::time::Duration;

use crate::support::process::Launch;
use crate::support::{self, Wire, echo_upstream, exchange};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_at_the_open_file_limit_backs_off_and_recovers() {
    let upstream = echo_upstream().await;
    let proxy = Launch::new(
        "emfile",
        &format!("upstreams = [\"{upstream}\"]"),
        "[[rule]]\nname = \"r\"\nlimits = [{ rate = \"100000/10s\" }]",
    )
    .shell("ulimit -n 48 && ")
    .start();
    // Idle connections, each holding two of the proxy's descriptors (client and upstream),
    // until accept fails with EMFILE; the rest wait in the kernel's accept queue.
    let mut idle = Vec::new();
    for _ in 0..40 {
        idle.push(
            support::connect_from("127.0.0.2", proxy.front)
                .await
                .unwrap(),
        );
    }
    // Stay at the limit for a while: a spinning accept loop would fail thousands of times.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Give the descriptors back; the backed-off accept loop picks up the queued connections.
    drop(idle);
    let deadline = tokio::time::Instant::now() + support::BOUND;
    loop {
        let stream = support::connect_from("127.0.0.3", proxy.front)
            .await
            .unwrap();
        if exchange(stream, b"hello\n").await == Wire::Echoed {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the proxy did not recover"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let errors = proxy.metric("tollgate_accept_errors_total{listener=\"front\"}");
    assert!(errors >= 1.0, "the limit was hit: {errors}");
    // Backoff doubles from 5 ms to 1 s: about 10 failures in 1.5 s, not thousands.
    assert!(errors <= 50.0, "accept backed off: {errors} failures");
}
