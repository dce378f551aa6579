//! `tollgate replay` end to end: a generated capture with known traffic replays to the verdicts
//! the policy implies, and a cut capture reports what it read, then fails.

use std::net::Ipv6Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support;
use crate::support::capture::{v4_frame, v6_frame, write_timed_pcap};

const POLICY: &str = r#"
[sketch]
memory = "2MiB"

[lists]
deny = ["192.0.2.0/24"]

[[rule]]
name = "per-source"
limits = [
  { rate = "20/10s", ipv4_prefix = 32, ipv6_prefix = 128 },
  { rate = "60/10s", ipv4_prefix = 24, ipv6_prefix = 64 },
]
"#;

/// Benign sources (5 each, 50 sources in 50 /24s), three heavy sources (50 each, separate
/// /24s), an IPv6 attacker using 100 addresses of one /64, and 10 frames from a denied /24,
/// interleaved over two seconds of capture time.
fn capture() -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    for round in 0..50u8 {
        for benign in 0..50u8 {
            if round < 5 {
                frames.push(v4_frame([10, benign, 0, 1]));
            }
        }
        for heavy in 0..3u8 {
            frames.push(v4_frame([172, 16, heavy, 9]));
        }
        for i in 0..2u16 {
            let host = u16::from(round) * 2 + i;
            frames.push(v6_frame(Ipv6Addr::new(0x2001, 0xdb8, 7, 7, host, 1, 2, 3)));
        }
        if round < 10 {
            frames.push(v4_frame([192, 0, 2, round]));
        }
    }
    frames
}

/// Writes `frames` spread evenly over two seconds of capture time.
fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let step = Duration::from_secs(2) / frames.len() as u32;
    let timed: Vec<(Duration, Vec<u8>)> = frames
        .iter()
        .enumerate()
        .map(|(i, frame)| (step * i as u32, frame.clone()))
        .collect();
    write_timed_pcap(path, &timed);
}

fn replay(capture: &PathBuf, json: bool) -> (bool, String) {
    replay_under(POLICY, capture, json)
}

fn replay_under(policy_text: &str, capture: &PathBuf, json: bool) -> (bool, String) {
    // One policy file per capture: tests run in parallel.
    let policy = capture.with_extension("toml");
    std::fs::write(&policy, policy_text).expect("written");
    let mut command = Command::new(env!("CARGO_BIN_EXE_tollgate"));
    command
        .args(["replay", "--config"])
        .arg(&policy)
        .arg(capture);
    if json {
        command.arg("--json");
    }
    let output = command.output().expect("tollgate runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

#[test]
fn a_known_capture_replays_to_the_expected_verdicts() {
    let dir = support::scratch("replay");
    let path = dir.path().join("known.pcap");
    write_pcap(&path, &capture());
    let (ok, out) = replay(&path, true);
    assert!(ok, "{out}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    let totals = &report["totals"];
    // Heavy: 3 x (50 - 20); the /64 attacker: 100 - 60; benign: none.
    assert_eq!(totals["throttled"], 3 * 30 + 40, "{out}");
    assert_eq!(totals["denied_listed"], 10);
    assert_eq!(totals["allowed"], 250 + 3 * 20 + 60);
    assert_eq!(totals["malformed"], 0);
    let sources: Vec<&str> = report["top_sources"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|entry| entry[0].as_str().expect("an address"))
        .collect();
    assert_eq!(&sources[..3], ["172.16.0.9", "172.16.1.9", "172.16.2.9"]);
    assert!(
        sources.iter().all(|s| !s.starts_with("10.")),
        "no benign source throttled"
    );
    let prefixes = report["top_prefixes"].as_array().expect("a list");
    assert!(
        prefixes
            .iter()
            .any(|p| p[0] == "2001:db8:7:7::/64" && p[1] == 40),
        "the rotating /64 is caught: {prefixes:?}"
    );
    let timeline = report["timeline"].as_array().expect("a list");
    assert!(!timeline.is_empty());
    // The timeline splits the same verdicts over time: its buckets add up to the totals.
    let sum = |field: &str| -> u64 {
        timeline
            .iter()
            .map(|bucket| bucket[field].as_u64().expect("a count"))
            .sum()
    };
    assert_eq!(sum("allowed"), 370, "{out}");
    assert_eq!(sum("throttled"), 130, "{out}");
    assert_eq!(sum("denied"), 10, "{out}");
    assert_eq!(sum("refused"), 140, "{out}");
    // The text report says the same.
    let (ok, text) = replay(&path, false);
    assert!(ok);
    assert!(text.contains("throttled 130, denied (listed) 10"), "{text}");
}

#[test]
fn a_cut_capture_reports_what_it_read_then_fails() {
    let dir = support::scratch("replay");
    let path = dir.path().join("cut.pcap");
    write_pcap(&path, &capture());
    let bytes = std::fs::read(&path).expect("read");
    std::fs::write(&path, &bytes[..bytes.len() / 2]).expect("cut");
    let (ok, out) = replay(&path, false);
    assert!(!ok);
    assert!(
        out.contains("frame(s) over"),
        "the partial report comes first: {out}"
    );
    assert!(out.contains("the capture is unreadable at byte"), "{out}");
    let (ok, out) = replay(&dir.path().join("missing.pcap"), false);
    assert!(!ok && out.contains("cannot read the capture"), "{out}");
}

/// Replays `frames` (each at its offset from the capture's start) under `policy`; the JSON
/// report's totals.
fn totals(name: &str, policy: &str, frames: &[(Duration, Vec<u8>)]) -> serde_json::Value {
    let dir = support::scratch("replay");
    let capture = dir.path().join(format!("counters-{name}.pcap"));
    write_timed_pcap(&capture, frames);
    let (ok, out) = replay_under(policy, &capture, true);
    assert!(ok, "{out}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    report["totals"].clone()
}

/// Issue 9 item 1: 7 SYNs from 3 sources, 1 s apart, under `100/1m` with a penalty: none is
/// near its limit, so none is refused (before: 3 allowed, 4 denied_penalty).
#[test]
fn a_penalty_falls_on_no_source_under_its_limit() {
    let policy = "[[rule]]\nname = \"r\"\nlimits = [{ rate = \"100/1m\" }]\npenalty = \"1m\"\n";
    let frames: Vec<(Duration, Vec<u8>)> = [1u8, 2, 3, 1, 2, 3, 1]
        .into_iter()
        .enumerate()
        .map(|(i, last)| (Duration::from_secs(i as u64), v4_frame([203, 0, 113, last])))
        .collect();
    let totals = totals("penalty", policy, &frames);
    assert_eq!(totals["allowed"], 7, "{totals}");
    assert_eq!(totals["denied_penalty"], 0, "{totals}");
}

/// Issue 9 item 6: two limits with one period and prefix count each of 60 SYNs once (before:
/// 50 allowed, 10 throttled).
#[test]
fn two_limits_of_one_period_and_prefix_count_each_syn_once() {
    let policy = "[[rule]]\nname = \"r\"\nlimits = [{ rate = \"100/10s\", ipv4_prefix = 32 }, { rate = \"500/10s\", ipv4_prefix = 32 }]\n";
    let frames: Vec<(Duration, Vec<u8>)> = (0..60u64)
        .map(|i| (Duration::from_millis(i * 10), v4_frame([203, 0, 113, 9])))
        .collect();
    let totals = totals("limits", policy, &frames);
    assert_eq!(totals["allowed"], 60, "{totals}");
    assert_eq!(totals["throttled"], 0, "{totals}");
}
