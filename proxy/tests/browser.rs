//! The pages, rendered by a real browser: headless Chromium loads the replay's HTML report
//! (from disk) and the admin's status page (from a proxy on loopback), and the tests read
//! back the DOM after the page's scripts ran and a 1200x900 screenshot.
//!
//! Ignored by the plain run: they need Chromium (`apt-get install -y chromium`); CI installs
//! it and runs them with `--include-ignored`. Without it they fail, never pass silently.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::browser::{self, assert_rendered};
use common::capture::{v4_frame, write_timed_pcap};

/// The chart's colours (`proxy/src/tools/replay/report.css`, `proxy/src/ops/admin/status.html`).
const ALLOWED: (&str, [u8; 3]) = ("allowed green", [0x2f, 0x9e, 0x68]);
const THROTTLED: (&str, [u8; 3]) = ("throttled orange", [0xe8, 0x90, 0x2c]);
const DENIED: (&str, [u8; 3]) = ("denied red", [0xd2, 0x43, 0x3f]);

/// A rule name that is markup: shown as text, never run.
const HOSTILE: &str = "<script>document.title='owned'</script><img src=x onerror=alert(1)>";

/// A scratch directory of this test process; the screenshots stay there for a look.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tollgate-browser-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch dir");
    dir
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
    let dir = scratch("replay");
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
    let dom = browser::dom(&dir, &url);
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
    let png = browser::screenshot(&dir, &url, &dir.join("replay.png"));
    assert_rendered(&png, &[ALLOWED, THROTTLED, DENIED], 500);
    eprintln!("screenshot: {}", dir.join("replay.png").display());
}
