//! The admin endpoint under attack: silent and slow connections are cut by its header and
//! idle timeouts, its connections are capped (at the cap a newcomer evicts the oldest one
//! still waiting for its request head), and a bearer token guards what changes state.

use std::path::PathBuf;

use crate::support::{self, BOUND, admin, admin_as, eventually, metric, start};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tollgate::config::ProxyConfig;
use tollgate::server::{Server, StartError};

fn config(admin: &str) -> String {
    format!(
        r#"
[admin]
listen = "127.0.0.1:0"
{admin}

[[rule]]
name = "r"
limits = [{{ rate = "10/1s" }}]
"#
    )
}

/// A fresh directory for test `name`, removed when dropped, and a file there holding `token`.
fn token_file(name: &str, token: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = support::scratch(&format!("admin-{name}"));
    let path = dir.path().join("token");
    std::fs::write(&path, format!("{token}\n")).unwrap();
    (dir, path)
}

/// Waits (bounded) for the proxy to end `stream`; what it sent before.
async fn closed_by_proxy(mut stream: TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    match tokio::time::timeout(BOUND, stream.read_to_end(&mut got)).await {
        Err(_) => panic!("the admin connection stayed open for {BOUND:?}; got {got:?}"),
        Ok(Ok(_)) => got,
        Ok(Err(err)) if err.kind() == std::io::ErrorKind::ConnectionReset => got,
        Ok(Err(err)) => panic!("{err}"),
    }
}

async fn open(server: &Server) -> TcpStream {
    TcpStream::connect(server.admin_addr().unwrap())
        .await
        .unwrap()
}

fn admin_open(server: &Server) -> f64 {
    metric(server, "tollgate_admin_connections ")
}

#[tokio::test]
async fn the_header_timeout_closes_silent_and_trickling_connections() {
    let server = start(&config("header_timeout = \"200ms\"\nidle_timeout = \"1h\"")).await;
    let silent = open(&server).await;
    let mut trickling = open(&server).await;
    trickling
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: a\r\n")
        .await
        .unwrap();
    closed_by_proxy(silent).await;
    closed_by_proxy(trickling).await;
    eventually(|| admin_open(&server) == 0.0).await;
    let (status, _) = admin(&server, "GET", "/metrics").await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn the_idle_timeout_closes_a_silent_connection() {
    let server = start(&config("header_timeout = \"1h\"\nidle_timeout = \"200ms\"")).await;
    closed_by_proxy(open(&server).await).await;
    eventually(|| admin_open(&server) == 0.0).await;
}

#[tokio::test]
async fn at_the_cap_a_request_evicts_the_oldest_connection_still_waiting() {
    let server = start(&config(
        "max_connections = 4\nheader_timeout = \"1h\"\nidle_timeout = \"1h\"",
    ))
    .await;
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(open(&server).await);
        // One at a time, so that the proxy sees them in this order.
        eventually(|| admin_open(&server) == held.len() as f64).await;
    }
    let (status, _) = admin(&server, "GET", "/metrics").await;
    assert_eq!(status, 200, "the scrape is answered at the cap");
    let oldest = closed_by_proxy(held.remove(0)).await;
    assert!(oldest.is_empty(), "{oldest:?}");
    assert_eq!(metric(&server, "tollgate_admin_evicted_total "), 1.0);
    assert_eq!(metric(&server, "tollgate_admin_refused_total "), 0.0);
    // The other three stay: exactly one was closed, and the cap still holds.
    eventually(|| admin_open(&server) == 3.0).await;
    held.push(open(&server).await);
    eventually(|| admin_open(&server) == 4.0).await;
    // A fifth connection, silent too, evicts the next oldest, the second opened.
    let _fifth = open(&server).await;
    closed_by_proxy(held.remove(0)).await;
    assert_eq!(metric(&server, "tollgate_admin_evicted_total "), 2.0);
    eventually(|| admin_open(&server) == 4.0).await;
    drop(held);
}

#[tokio::test]
async fn reload_needs_the_token() {
    let (_dir, token) = token_file("reload", "s3cret");
    let text = config(&format!("token_file = \"{}\"", token.display()));
    let dir = token.parent().unwrap().to_owned();
    let path = dir.join("tollgate.toml");
    std::fs::write(&path, &text).unwrap();
    let server = Server::start(ProxyConfig::parse(&text).unwrap(), Some(path))
        .await
        .unwrap();
    assert_eq!(admin(&server, "POST", "/reload").await.0, 401);
    assert_eq!(
        admin_as(&server, "POST", "/reload", Some("s3crex")).await.0,
        401
    );
    let (status, body) = admin_as(&server, "POST", "/reload", Some("s3cret")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        admin(&server, "GET", "/metrics").await.0,
        200,
        "reading needs no token on loopback"
    );
    // Without a token configured, nothing that changes state is served.
    let server = start(&config("")).await;
    assert_eq!(
        admin_as(&server, "POST", "/reload", Some("s3cret")).await.0,
        403
    );
}

#[tokio::test]
async fn a_non_loopback_admin_without_a_token_is_refused_with_its_line() {
    let text = config("").replace("127.0.0.1:0", "0.0.0.0:9090");
    let errors = ProxyConfig::parse(&text).expect_err("refused").0;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!((errors[0].line, errors[0].column), (3, 10), "{errors:?}");
    assert!(
        errors[0].message.contains("beyond loopback"),
        "{}",
        errors[0].message
    );
    // With a token it starts (checked without binding beyond loopback: parse only).
    let (_dir, token) = token_file("beyond", "t");
    let text = config(&format!("token_file = \"{}\"", token.display()))
        .replace("127.0.0.1:0", "0.0.0.0:9090");
    assert!(ProxyConfig::parse(&text).is_ok());
}

#[tokio::test]
async fn a_token_file_that_cannot_be_read_stops_the_start() {
    let dir = support::scratch("no-token");
    let missing = dir.path().join("token");
    let text = config(&format!("token_file = \"{}\"", missing.display()));
    let err = Server::start(ProxyConfig::parse(&text).unwrap(), None)
        .await
        .expect_err("no token, no start");
    assert!(matches!(err, StartError::Token(_)), "{err:?}");
    assert!(
        err.to_string().contains(&missing.display().to_string()),
        "{err}"
    );
}
