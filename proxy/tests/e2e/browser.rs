//! The pages, rendered by a real browser: headless Chromium loads the replay's HTML report
//! (from disk) and the admin's status page (from a proxy on loopback), and the tests read
//! back the DOM after the page's scripts ran and a 1200x900 screenshot.
//!
//! Ignored by the plain run: they need Chromium (`apt-get install -y chromium`); CI installs
//! it and runs them with `--include-ignored`. Without it they fail, never pass silently.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::support::browser::{self, assert_rendered};
use crate::support::capture::{v4_frame, write_timed_pcap};
use crate::support::{self, BOUND, attempt, echo_upstream, start};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tollgate::server::Server;

/// The chart's colours (`proxy/src/tools/replay/report.css`, `proxy/src/ops/admin/status.html`).
const ALLOWED: (&str, [u8; 3]) = ("allowed green", [0x2f, 0x9e, 0x68]);
const THROTTLED: (&str, [u8; 3]) = ("throttled orange", [0xe8, 0x90, 0x2c]);
const DENIED: (&str, [u8; 3]) = ("denied red", [0xd2, 0x43, 0x3f]);

/// A rule name that is markup: shown as text, never run.
const HOSTILE: &str = "<script>document.title='owned'</script><img src=x onerror=alert(1)>";

/// A fresh scratch directory, removed when dropped; `TOLLGATE_KEEP_SCRATCH=1` keeps it and
/// its screenshots for a look.
fn scratch(name: &str) -> tempfile::TempDir {
    support::scratch(&format!("browser-{name}"))
}

/// Sixty seconds of capture: ten steady sources (one SYN a second each), a flood from one
/// address from second 20 to 40 (40 a second), and a denied network probing from second 45.
fn replay_capture() -> Vec<(Duration, Vec<u8>)> {
    let mut frames = Vec::new();
    for second in 0..60u64 {
        for client in 0..10u8 {
            let at = Duration::from_millis(second * 1000 + u64::from(client) * 90);
            frames.push((at, v4_frame([10, 0, client, 1])));
        }
        if (20..40).contains(&second) {
            for i in 0..40u64 {
                let at = Duration::from_millis(second * 1000 + i * 25);
                frames.push((at, v4_frame([203, 0, 113, 66])));
            }
        }
        if second >= 45 {
            for i in 0..8u8 {
                let at = Duration::from_millis(second * 1000 + u64::from(i) * 110);
                frames.push((at, v4_frame([192, 0, 2, i])));
            }
        }
    }
    frames.sort_by_key(|(at, _)| *at);
    frames
}

#[test]
#[ignore = "needs chromium (CI installs it); run with --include-ignored"]
fn the_replay_report_renders_its_chart_and_shows_markup_as_text() {
    let temp = scratch("replay");
    let dir = temp.path().to_path_buf();
    let capture = dir.join("flood.pcap");
    write_timed_pcap(&capture, &replay_capture());
    let policy = dir.join("policy.toml");
    std::fs::write(
        &policy,
        format!(
            "[lists]\ndeny = [\"192.0.2.0/24\"]\n\n[[rule]]\nname = \"per-source\"\n\
             limits = [{{ rate = \"100/10s\" }}]\n\n[[rule]]\nname = {HOSTILE:?}\n\
             limits = [{{ rate = \"300/10s\", ipv4_prefix = 24 }}]\nshadow = true\n"
        ),
    )
    .expect("written");
    let html = dir.join("report.html");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["replay", "--config"])
        .arg(&policy)
        .arg(&capture)
        .arg("--html")
        .arg(&html)
        .output()
        .expect("tollgate runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    let url = format!("file://{}", html.display());
    let dom = browser::dom(&dir, &url, 1000);
    // The page holds no script of its own, and the rule's name did not become one.
    assert!(!dom.contains("<script"), "{dom}");
    assert!(!dom.contains("<img"), "{dom}");
    assert!(dom.contains("<title>tollgate replay: "), "{dom}");
    assert!(
        dom.contains("&lt;script&gt;document.title='owned'&lt;/script&gt;"),
        "the hostile rule name is shown as text: {dom}"
    );
    let bars = |class: &str| dom.matches(&format!("<rect class=\"{class}\"")).count();
    assert!(bars("allowed") >= 55, "{} allowed bars", bars("allowed"));
    assert!(
        bars("throttled") >= 10,
        "{} throttled bars",
        bars("throttled")
    );
    assert!(bars("denied") >= 10, "{} denied bars", bars("denied"));
    let png = browser::screenshot(&dir, &url, 1000, &dir.join("replay.png"));
    assert_rendered(&png, &[ALLOWED, THROTTLED, DENIED], 500);
    eprintln!("screenshot: {}", dir.join("replay.png").display());
}

/// A proxy with one TCP listener over an echo upstream, a denied address and a per-source
/// limit whose rule name is markup.
async fn status_proxy() -> Server {
    let upstream = echo_upstream().await;
    let rest = format!(
        r#"[lists]
deny = ["127.0.0.99/32"]

[[rule]]
name = {HOSTILE:?}
limits = [{{ rate = "200/10s" }}]"#
    );
    start(&support::one_listener(
        "listen = \"127.0.0.1:0\"",
        upstream,
        "",
        &rest,
    ))
    .await
}

/// The bound address of the status proxy's listener.
fn front(server: &Server) -> std::net::SocketAddr {
    server.local_addr("front").expect("the listener is bound")
}

/// A GET of `path` with `Accept: accept` (none if empty); (status, headers, body).
async fn get(server: &Server, path: &str, accept: &str) -> (u16, String, String) {
    let mut stream = TcpStream::connect(server.admin_addr().expect("admin"))
        .await
        .expect("admin connects");
    let accept = if accept.is_empty() {
        String::new()
    } else {
        format!("Accept: {accept}\r\n")
    };
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: admin\r\n{accept}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("sent");
    let mut response = Vec::new();
    tokio::time::timeout(BOUND, stream.read_to_end(&mut response))
        .await
        .expect("admin answers")
        .expect("read");
    let response = String::from_utf8(response).expect("UTF-8");
    let (head, body) = response.split_once("\r\n\r\n").expect("a head");
    (
        head[9..12].parse().expect("a status"),
        head.to_ascii_lowercase(),
        body.to_owned(),
    )
}

#[tokio::test]
async fn browsers_get_the_status_page_and_curl_the_text_index() {
    let server = status_proxy().await;
    attempt("127.0.0.99", front(&server)).await;
    let browser = "text/html,application/xhtml+xml,*/*;q=0.8";
    let (status, head, page) = get(&server, "/", browser).await;
    assert_eq!(status, 200);
    assert!(head.contains("content-type: text/html"), "{head}");
    assert!(
        head.contains("content-security-policy: default-src 'none'"),
        "{head}"
    );
    assert!(page.contains("<script src=\"status.js\">"), "{page}");
    let (status, head, script) = get(&server, "/status.js", "*/*").await;
    assert_eq!(status, 200);
    assert!(head.contains("content-type: text/javascript"), "{head}");
    assert!(script.contains("fetch(\"status.json\""), "{script}");
    for accept in ["*/*", ""] {
        let (status, head, index) = get(&server, "/", accept).await;
        assert_eq!(status, 200);
        assert!(head.contains("content-type: text/plain"), "{head}");
        assert!(index.contains("GET /metrics\n"), "{index}");
    }
    let (_, head, index) = get(&server, "/index.txt", browser).await;
    assert!(head.contains("content-type: text/plain") && index.contains("GET /status.json"));
    let (status, head, json) = get(&server, "/status.json", "").await;
    assert_eq!(status, 200);
    assert!(head.contains("content-type: application/json"), "{head}");
    let json: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    let listener = &json["listeners"][0];
    assert_eq!(listener["name"], "front");
    assert_eq!(listener["protocol"], "tcp");
    assert_eq!(listener["address"], front(&server).to_string());
    assert_eq!(listener["denied"], 1);
    assert_eq!(json["totals"]["denied"], 1);
    assert_eq!(json["offenders"][0]["source"], "127.0.0.99");
    let sketch = &json["sketches"][0];
    assert_eq!(sketch["window"], "10s");
    assert!(
        sketch["memory_bytes"].as_u64().expect("bytes") > 0,
        "{json}"
    );
    assert!(sketch["overcount_bound"].is_u64() && sketch["confidence"].is_f64());
}

/// The `points` of the chart's line for `verdict` in `dom`, as (x, y) pairs.
fn line(dom: &str, verdict: &str) -> Vec<(f64, f64)> {
    let start = format!("<polyline class=\"{verdict}\" points=\"");
    let at = dom
        .find(&start)
        .unwrap_or_else(|| panic!("no {verdict} line: {dom}"))
        + start.len();
    let points = &dom[at..at + dom[at..].find('"').expect("a closed attribute")];
    points
        .split_whitespace()
        .map(|pair| {
            let (x, y) = pair.split_once(',').expect("x,y");
            (x.parse().expect("x"), y.parse().expect("y"))
        })
        .collect()
}

/// Drives traffic at `server` until `stop`, per round: two steady sources (50 in turn, each
/// well under its limit), three connections of a heavy one over its limit, and every other
/// round one from the denied list. Bounded in
/// rounds and time, in case `stop` never comes.
async fn traffic(server: Arc<Server>, stop: Arc<AtomicBool>) {
    let to = front(&server);
    let deadline = tokio::time::Instant::now() + BOUND * 6;
    for round in 0..20_000u32 {
        // Acquire pairs with the Release store of the test: nothing else is handed over.
        if stop.load(Ordering::Acquire) || tokio::time::Instant::now() > deadline {
            return;
        }
        for steady in 0..2 {
            attempt(&format!("127.0.1.{}", (round * 2 + steady) % 50 + 1), to).await;
        }
        for _ in 0..3 {
            attempt("127.0.0.66", to).await;
        }
        if round % 2 == 0 {
            attempt("127.0.0.99", to).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium (CI installs it); run with --include-ignored"]
async fn the_status_page_draws_live_rates_and_shows_markup_as_text() {
    let server = Arc::new(status_proxy().await);
    let stop = Arc::new(AtomicBool::new(false));
    let driver = tokio::spawn(traffic(Arc::clone(&server), Arc::clone(&stop)));
    // Past the heavy source's limit before the page opens, so every verdict has a rate.
    support::eventually(|| {
        let shared = server.shared();
        shared
            .gate()
            .offenders()
            .top(1)
            .first()
            .is_some_and(|o| o.count > 30)
    })
    .await;
    let temp = scratch("status");
    let dir = temp.path().to_path_buf();
    let url = format!("http://{}/", server.admin_addr().expect("admin"));
    let (dom, png) = {
        let (dir, url) = (dir.clone(), url.clone());
        tokio::task::spawn_blocking(move || {
            let dom = browser::dom(&dir, &url, 6000);
            let png = browser::screenshot(&dir, &url, 6000, &dir.join("status.png"));
            (dom, png)
        })
        .await
        .expect("chromium ran")
    };
    // Release: the driver's Acquire load sees it; it ends at its next round.
    stop.store(true, Ordering::Release);
    driver.await.expect("the traffic ends");
    assert!(dom.contains("<span id=\"state\" class=\"live\">"), "{dom}");
    for verdict in ["allowed", "throttled", "denied"] {
        let points = line(&dom, verdict);
        assert!(points.len() >= 3, "{verdict}: {points:?}");
        assert!(
            points.iter().any(|(_, y)| *y < 208.0),
            "{verdict} never above zero: {points:?}"
        );
    }
    assert!(
        dom.contains(&format!("<td>{}</td>", front(&server))),
        "{dom}"
    );
    assert!(dom.contains("<td>127.0.0.66</td>"), "{dom}");
    assert!(dom.contains("<td>limits 10s</td>"), "{dom}");
    // The rule's name came back as an offender's reason: as text, not as elements.
    assert!(
        dom.contains("&lt;script&gt;document.title='owned'&lt;/script&gt;&lt;img"),
        "{dom}"
    );
    assert!(!dom.contains("<img"), "{dom}");
    assert_eq!(
        dom.matches("<script").count(),
        1,
        "the page's own script only"
    );
    assert_rendered(&png, &[ALLOWED, THROTTLED, DENIED], 150);
    eprintln!("screenshot: {}", dir.join("status.png").display());
}
