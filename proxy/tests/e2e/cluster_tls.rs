//! TLS to Redis for the cluster: nodes join a `redis-server` that speaks only TLS
//! (`--port 0 --tls-port P`), with certificates this test makes (`rcgen`); a node that
//! trusts another CA, expects another name or lacks the client certificate the server asks
//! for stays alone and says why. Three separate `tollgate run` processes sharing over TLS with a
//! password hold one source spread over them to its limit.
//!
//! The tests that need `redis-server` (built with TLS, as Debian's is) are `#[ignore]`d with
//! that reason, so a plain `cargo test` reports them as ignored, never as passed. Run them
//! with `cargo test -p tollgate --test e2e -- --include-ignored cluster_tls::`; once asked for, a
//! missing `redis-server` fails them.

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::cluster::{alone, cluster_of, errors, two_rounds};
use crate::support::process::{Launch, Proxy};
use crate::support::redis::{Pki, Redis, secret_file};
use crate::support::{self, BOUND, Wire, attempt, echo_upstream, eventually, start};
use tollgate::config::{ClientCertificate, ProxyConfig, RedisTls};
use tollgate::server::Server;

/// The nodes of the tests that share counts.
const NODES: usize = 3;
/// The suspect threshold, as a fraction of the limit.
const THRESHOLD: f64 = 0.25;

/// A whole config: one listener to `upstream`, and a `[cluster]` on `redis` as node `node`
/// with `extra` lines (TLS, login), limiting `limit` connections per minute per source.
fn config(upstream: SocketAddr, redis: SocketAddr, node: &str, extra: &str, limit: u64) -> String {
    let rest = format!(
        "{}\n[[rule]]\nname = \"per-source\"\nlimits = [{{ rate = \"{limit}/60s\" }}]",
        cluster(redis, node, extra)
    );
    support::one_listener(support::NO_ADMIN, upstream, "", &rest)
}

/// The `[cluster]` section of [`config`].
fn cluster(redis: SocketAddr, node: &str, extra: &str) -> String {
    format!(
        "[cluster]\nredis = [\"{redis}\"]\nnode = \"{node}\"\nname = \"tls-test\"\n\
         sync = \"50ms\"\ntimeout = \"300ms\"\nthreshold = {THRESHOLD}\n{extra}\n"
    )
}

/// The TLS lines trusting `pki`'s CA (or the file `ca` names in it).
fn tls_lines(pki: &Pki, ca: &str) -> String {
    format!("tls = true\nca_file = \"{}\"\n", pki.path(ca).display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server (built with TLS) on the PATH; run with --include-ignored"]
async fn over_tls_with_a_password_nodes_join_and_share_and_a_plain_node_stays_alone() {
    let pki = Pki::new("tls-join");
    let redis = Redis::tls(&pki).password("tls-s3cret").start().await;
    let password = secret_file(pki.dir(), "password", "tls-s3cret\n");
    let login = format!("password_file = \"{}\"\n", password.display());
    let upstream = echo_upstream().await;
    // A small limit, so that one source spread over the nodes crosses it in a few rounds.
    let limit = 8;
    let mut nodes = Vec::new();
    for node in 0..NODES {
        let extra = format!("{}{login}", tls_lines(&pki, "ca.pem"));
        let text = config(
            upstream,
            redis.address(),
            &format!("n{node}"),
            &extra,
            limit,
        );
        nodes.push(start(&text).await);
    }
    let plain = start(&config(upstream, redis.address(), "plain", &login, limit)).await;
    eventually(|| nodes.iter().all(|s| !alone(s))).await;
    // One source, two connections to each node in turn, then two sync rounds: what the
    // others counted comes back over TLS and holds it near one limit, where three nodes
    // alone would admit three.
    let mut admitted = 0;
    for _ in 0..6 {
        for server in &nodes {
            for _ in 0..2 {
                let wire = attempt("127.0.0.2", server.local_addr("front").unwrap()).await;
                assert!(
                    matches!(wire, Wire::Echoed | Wire::Reset | Wire::Closed(_)),
                    "{wire:?}"
                );
                admitted += u64::from(wire == Wire::Echoed);
            }
        }
        two_rounds(&nodes).await;
    }
    let bound = limit as f64 * (1.0 + NODES as f64 * THRESHOLD) + 2.0 * NODES as f64;
    println!("admitted over TLS: {admitted} (limit {limit}, bound {bound}, alone 24)");
    assert!(admitted as f64 <= bound, "admitted {admitted} > {bound}");
    assert!(
        admitted >= limit,
        "admitted {admitted}: fewer than the limit"
    );
    for server in &nodes {
        assert_eq!(errors(server), 0, "{}", redis.log());
        assert!(cluster_of(server).metrics().sent_bytes.get() > 0);
    }
    // The port speaks only TLS: a node without it never joins.
    eventually(|| errors(&plain) >= 2).await;
    assert!(alone(&plain), "a plain-TCP node joined a TLS-only Redis");
}

/// A `tollgate run` process in the cluster on `redis` with `extra` lines; its log is kept.
fn process(name: &str, upstream: SocketAddr, redis: SocketAddr, extra: &str) -> Proxy {
    let rest = format!(
        "{}[[rule]]\nname = \"per-source\"\nlimits = [{{ rate = \"10/60s\" }}]\n",
        cluster(redis, name, extra)
    );
    Launch::new(name, &format!("upstreams = [\"{upstream}\"]"), &rest)
        .quiet()
        .start()
}

/// Waits (polling, bounded) until `proxy` has logged `text` and counted a Redis error.
async fn logs(proxy: &Proxy, text: &str) {
    let deadline = tokio::time::Instant::now() + 3 * BOUND;
    while !(proxy.log().contains(text)
        && proxy.metric("tollgate_cluster_redis_errors_total") >= 1.0)
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no `{text}` in its log:\n{}",
            proxy.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server (built with TLS) on the PATH; run with --include-ignored"]
async fn a_node_trusting_another_ca_or_expecting_another_name_stays_alone_and_logs_why() {
    let pki = Pki::new("tls-refused");
    let redis = Redis::tls(&pki).start().await;
    let upstream = echo_upstream().await;
    let trusting = start(&config(
        upstream,
        redis.address(),
        "trusting",
        &tls_lines(&pki, "ca.pem"),
        10,
    ))
    .await;
    let other_ca = process(
        "tls-other-ca",
        upstream,
        redis.address(),
        &tls_lines(&pki, "other-ca.pem"),
    );
    // The certificate is for 127.0.0.1 and localhost, not this name.
    let other_name = process(
        "tls-other-name",
        upstream,
        redis.address(),
        &format!(
            "{}tls_server_name = \"redis.invalid\"\n",
            tls_lines(&pki, "ca.pem")
        ),
    );
    eventually(|| !alone(&trusting)).await;
    logs(&other_ca, "invalid peer certificate: UnknownIssuer").await;
    logs(&other_name, "redis.invalid").await;
    assert!(
        other_name.log().contains("NotValidForName")
            || other_name.log().contains("not valid for name"),
        "{}",
        other_name.log()
    );
    for proxy in [&other_ca, &other_name] {
        assert_eq!(
            proxy.metric("tollgate_cluster_alone "),
            1.0,
            "{}",
            proxy.log()
        );
        assert!(proxy.log().contains("limiting alone"), "{}", proxy.log());
    }
    assert_eq!(errors(&trusting), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server (built with TLS) on the PATH; run with --include-ignored"]
async fn a_client_certificate_the_server_requires_is_sent_when_given() {
    let pki = Pki::new("tls-client");
    let redis = Redis::tls(&pki).client_certificates().start().await;
    let upstream = echo_upstream().await;
    let client = format!(
        "{}client_cert = \"{}\"\nclient_key = \"{}\"\n",
        tls_lines(&pki, "ca.pem"),
        pki.path("client.pem").display(),
        pki.path("client.key").display()
    );
    let with = start(&config(upstream, redis.address(), "with", &client, 10)).await;
    let without = start(&config(
        upstream,
        redis.address(),
        "without",
        &tls_lines(&pki, "ca.pem"),
        10,
    ))
    .await;
    eventually(|| !alone(&with)).await;
    two_rounds(std::slice::from_ref(&with)).await;
    assert_eq!(errors(&with), 0, "{}", redis.log());
    eventually(|| errors(&without) >= 2).await;
    assert!(alone(&without), "joined without the client certificate");
}

#[test]
fn the_tls_fields_are_checked_located_and_printed_back() {
    let base = "[[rule]]\nname = \"r\"\nlimits = [{ rate = \"10/1s\" }]\n";
    let section = "[cluster]\nredis = [\"127.0.0.1:6380\"]\nname = \"edge\"\n";
    let full = format!(
        "{section}tls = true\nca_file = \"/etc/tollgate/ca.pem\"\n\
         client_cert = \"/etc/tollgate/node.pem\"\nclient_key = \"/etc/tollgate/node.key\"\n\
         tls_server_name = \"redis.internal\"\n{base}"
    );
    let config = ProxyConfig::parse(&full).unwrap();
    let cluster = config.cluster.clone().expect("a cluster");
    assert_eq!(
        cluster.tls,
        Some(RedisTls {
            ca_file: Some("/etc/tollgate/ca.pem".into()),
            client: Some(ClientCertificate {
                cert: "/etc/tollgate/node.pem".into(),
                key: "/etc/tollgate/node.key".into(),
            }),
            server_name: Some("redis.internal".to_owned()),
        })
    );
    let address: SocketAddr = "127.0.0.1:6380".parse().unwrap();
    assert_eq!(cluster.server_name(address), "redis.internal");
    let printed = config.to_string();
    assert!(printed.contains("tls = true\n"), "{printed}");
    assert_eq!(ProxyConfig::parse(&printed).unwrap(), config);
    // Defaults: the system's roots, no client certificate, each address's own host: an IP
    // address is verified as an IP address SAN, a name as a DNS name.
    let plain = ProxyConfig::parse(&format!("{section}tls = true\n{base}")).unwrap();
    let cluster = plain.cluster.clone().expect("a cluster");
    let tls = cluster.tls.clone().expect("tls");
    assert_eq!(
        (tls.ca_file, tls.client, tls.server_name),
        (None, None, None)
    );
    assert_eq!(cluster.server_name(address), "127.0.0.1");
    assert_eq!(ProxyConfig::parse(&plain.to_string()).unwrap(), plain);
    let named = ProxyConfig::parse(&format!(
        "[cluster]\nredis = [\"localhost:6380\"]\nname = \"edge\"\ntls = true\n{base}"
    ))
    .unwrap();
    let cluster = named.cluster.clone().expect("a cluster");
    assert_eq!(cluster.server_name(cluster.redis[0]), "localhost");
    assert!(named.to_string().contains("redis = [\"localhost:6380\"]"));
    // Without TLS nothing is TLS, and TLS fields without it are refused, not ignored.
    let off = ProxyConfig::parse(&format!("{section}{base}")).unwrap();
    assert_eq!(off.cluster.as_ref().and_then(|c| c.tls.clone()), None);
    let errors = ProxyConfig::parse(&format!(
        "{section}ca_file = \"/a.pem\"\ntls_server_name = \"x\"\n{base}"
    ))
    .unwrap_err();
    let lines: Vec<usize> = errors.0.iter().map(|e| e.line).collect();
    assert_eq!(lines, [4, 5], "{errors}");
    assert!(
        errors.to_string().contains("needs `tls = true`"),
        "{errors}"
    );
    // A certificate needs its key and a key its certificate; a server name must be one.
    let half = ProxyConfig::parse(&format!(
        "{section}tls = true\nclient_cert = \"/c.pem\"\nca_file = \"\"\n\
         tls_server_name = \"not a name\"\n{base}"
    ))
    .unwrap_err();
    let lines: Vec<usize> = half.0.iter().map(|e| e.line).collect();
    assert_eq!(lines, [5, 6, 7], "{half}");
    let text = half.to_string();
    assert!(text.contains("client_cert needs client_key"), "{text}");
    assert!(text.contains("ca_file is empty"), "{text}");
    assert!(
        text.contains("neither a DNS name nor an IP address"),
        "{text}"
    );
    let keyless = ProxyConfig::parse(&format!(
        "{section}tls = true\nclient_key = \"/k.pem\"\n{base}"
    ))
    .unwrap_err();
    assert!(
        keyless.to_string().contains("client_key needs client_cert"),
        "{keyless}"
    );
}

#[tokio::test]
async fn a_missing_or_mismatched_tls_file_stops_the_start_naming_it() {
    let pki = Pki::new("tls-files");
    let upstream = echo_upstream().await;
    let redis: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let start_with = |extra: String| {
        let text = config(upstream, redis, "files", &extra, 10);
        async move {
            let config = ProxyConfig::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
            match Server::start(config, None).await {
                Ok(_) => panic!("started with {extra}"),
                Err(error) => error.to_string(),
            }
        }
    };
    let error = start_with("tls = true\nca_file = \"/nonexistent/tollgate-ca.pem\"".into()).await;
    assert!(
        error.contains("ca_file /nonexistent/tollgate-ca.pem"),
        "{error}"
    );
    // The server's key is not the client certificate's.
    let error = start_with(format!(
        "{}client_cert = \"{}\"\nclient_key = \"{}\"",
        tls_lines(&pki, "ca.pem"),
        pki.path("client.pem").display(),
        pki.path("server.key").display()
    ))
    .await;
    assert!(error.contains("client_cert"), "{error}");
    assert!(error.contains("client.pem"), "{error}");
    let error = start_with(format!(
        "{}client_cert = \"{}\"\nclient_key = \"{}\"",
        tls_lines(&pki, "ca.pem"),
        pki.path("client.pem").display(),
        pki.path("client.pem").display()
    ))
    .await;
    assert!(error.contains("client_key"), "{error}");
    assert!(error.contains("no private key"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server (built with TLS, and its --sentinel mode) on the PATH; run with --include-ignored"]
async fn through_a_tls_only_sentinel_a_node_finds_the_tls_master() {
    let pki = Pki::new("tls-sentinel");
    let master = Redis::tls(&pki).start().await;
    let sentinel = Redis::tls(&pki).sentinel(&master, 1, "").await;
    let upstream = echo_upstream().await;
    // No `redis` list to fall back to: the master's address can only come from the
    // sentinel, whose port speaks only TLS.
    let text = config(
        upstream,
        master.address(),
        "found",
        &tls_lines(&pki, "ca.pem"),
        10,
    )
    .replace(
        &format!("redis = [\"{}\"]\n", master.address()),
        &format!("sentinels = [\"{}\"]\nmaster = \"m\"\n", sentinel.address()),
    );
    assert!(!text.contains("redis = "), "{text}");
    let node = start(&text).await;
    // A node trusting another CA cannot ask the sentinel, and its log says why.
    let sentinels = format!("sentinels = [\"{}\"]\nmaster = \"m\"\n", sentinel.address());
    let distrusting = Launch::new(
        "tls-sentinel-other-ca",
        &format!("upstreams = [\"{upstream}\"]"),
        &format!(
            "[cluster]\n{sentinels}node = \"distrusting\"\nname = \"tls-test\"\n\
             timeout = \"300ms\"\n{}\n\
             [[rule]]\nname = \"per-source\"\nlimits = [{{ rate = \"10/60s\" }}]\n",
            tls_lines(&pki, "other-ca.pem")
        ),
    )
    .quiet()
    .start();
    eventually(|| !alone(&node)).await;
    two_rounds(std::slice::from_ref(&node)).await;
    assert_eq!(errors(&node), 0, "{}", sentinel.log());
    logs(&distrusting, "UnknownIssuer").await;
    assert!(
        distrusting
            .log()
            .contains(&format!("sentinel {}", sentinel.address())),
        "{}",
        distrusting.log()
    );
    assert_eq!(distrusting.metric("tollgate_cluster_alone "), 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server (built with TLS) on the PATH; run with --include-ignored"]
async fn the_ca_file_is_read_again_at_each_connection() {
    let pki = Pki::new("tls-renewed");
    let redis = Redis::tls(&pki).start().await;
    let upstream = echo_upstream().await;
    // The node's CA file holds another CA at start: a valid file, so the node starts, and
    // stays alone.
    let ca = pki.path("node-ca.pem");
    std::fs::copy(pki.path("other-ca.pem"), &ca).unwrap();
    let extra = format!("tls = true\nca_file = \"{}\"\n", ca.display());
    let node = start(&config(upstream, redis.address(), "renewed", &extra, 10)).await;
    eventually(|| errors(&node) >= 1).await;
    assert!(alone(&node));
    // The right CA is put in its place: the next connection reads it and joins, no restart.
    std::fs::copy(pki.path("ca.pem"), &ca).unwrap();
    eventually(|| !alone(&node)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server (built with TLS) on the PATH; run with --include-ignored"]
async fn three_processes_over_tls_hold_a_spread_source_near_its_limit() {
    let pki = Pki::new("tls-processes");
    let redis = Redis::tls(&pki).password("tls-s3cret").start().await;
    let password = secret_file(pki.dir(), "password", "tls-s3cret\n");
    let upstream = echo_upstream().await;
    let limit = 30;
    let nodes: Vec<Proxy> = (0..NODES)
        .map(|node| {
            let login = format!(
                "{}password_file = \"{}\"\n",
                tls_lines(&pki, "ca.pem"),
                password.display()
            );
            let rest = format!(
                "{}[[rule]]\nname = \"per-source\"\nlimits = [{{ rate = \"{limit}/10s\" }}]\n",
                cluster(redis.address(), &format!("p{node}"), &login)
                    .replace("sync = \"50ms\"", "sync = \"100ms\"")
            );
            Launch::new(
                &format!("tls-process-{node}"),
                &format!("upstreams = [\"{upstream}\"]"),
                &rest,
            )
            .quiet()
            .start()
        })
        .collect();
    let deadline = tokio::time::Instant::now() + 3 * BOUND;
    while !nodes
        .iter()
        .all(|p| p.metric("tollgate_cluster_alone ") == 0.0)
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the processes did not join over TLS:\n{}",
            nodes.iter().map(Proxy::log).collect::<Vec<_>>().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // One source at 10x its limit, spread in turn over the three, for one 10 s period.
    let (served, _) = support::process::shared_flood(
        &nodes,
        &["127.0.0.2", "127.0.0.22"],
        10 * limit,
        Duration::from_secs(10),
    )
    .await;
    let ratio = served as f64 / limit as f64;
    println!(
        "three processes over TLS, one source at 10x its limit: {served} of {limit} ({ratio:.2}x)"
    );
    assert!(served >= limit * 9 / 10, "{served}: well under the limit");
    let errors: Vec<f64> = nodes
        .iter()
        .map(|p| p.metric("tollgate_cluster_redis_errors_total"))
        .collect();
    // Three alone would admit 3 L.
    assert!(
        ratio <= 1.1,
        "{ratio:.2}x > 1.1x; Redis errors per node: {errors:?}"
    );
}
