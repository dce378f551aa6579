//! Issue 9's reproductions as an operator ran them: captures replayed through `tollgate
//! replay`, whose verdicts must follow the limits (items 1 and 6).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use etherparse::PacketBuilder;
use pcap_file::pcap::{PcapPacket, PcapWriter};

fn syn(src: [u8; 4]) -> Vec<u8> {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2([2; 6], [4; 6])
        .ipv4(src, [198, 51, 100, 1], 64)
        .tcp(40_000, 443, 1, 64_240)
        .syn()
        .write(&mut frame, &[])
        .expect("a frame");
    frame
}

/// Replays `frames` (each with its offset from the capture's start) under `policy`; the
/// JSON report's totals.
fn replay(name: &str, policy: &str, frames: &[(Duration, Vec<u8>)]) -> serde_json::Value {
    let dir = std::env::temp_dir().join(format!("tollgate-replay-counters-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let capture: PathBuf = dir.join(format!("{name}.pcap"));
    let file = std::fs::File::create(&capture).expect("created");
    let mut writer = PcapWriter::new(file).expect("a pcap writer");
    for (offset, frame) in frames {
        let at = Duration::from_secs(1_700_000_000) + *offset;
        let packet = PcapPacket::new(at, frame.len() as u32, frame);
        writer.write_packet(&packet).expect("written");
    }
    drop(writer);
    let config = capture.with_extension("toml");
    std::fs::write(&config, policy).expect("written");
    let output = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["replay", "--json", "--config"])
        .arg(&config)
        .arg(&capture)
        .output()
        .expect("tollgate runs");
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{out}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    report["totals"].clone()
}

/// Item 1: 7 SYNs from 3 sources, 1 s apart, under `100/1m` with a penalty: none is near its
/// limit, so none is refused (main: 3 allowed, 4 denied_penalty).
#[test]
fn a_penalty_falls_on_no_source_under_its_limit() {
    let policy = "[[rule]]\nname = \"r\"\nlimits = [{ rate = \"100/1m\" }]\npenalty = \"1m\"\n";
    let frames: Vec<(Duration, Vec<u8>)> = [1u8, 2, 3, 1, 2, 3, 1]
        .into_iter()
        .enumerate()
        .map(|(i, last)| (Duration::from_secs(i as u64), syn([203, 0, 113, last])))
        .collect();
    let totals = replay("penalty", policy, &frames);
    assert_eq!(totals["allowed"], 7, "{totals}");
    assert_eq!(totals["denied_penalty"], 0, "{totals}");
}

/// Item 6: two limits with one period and prefix count each of 60 SYNs once (main: 50
/// allowed, 10 throttled).
#[test]
fn two_limits_of_one_period_and_prefix_count_each_syn_once() {
    let policy = "[[rule]]\nname = \"r\"\nlimits = [{ rate = \"100/10s\", ipv4_prefix = 32 }, { rate = \"500/10s\", ipv4_prefix = 32 }]\n";
    let frames: Vec<(Duration, Vec<u8>)> = (0..60u64)
        .map(|i| (Duration::from_millis(i * 10), syn([203, 0, 113, 9])))
        .collect();
    let totals = replay("limits", policy, &frames);
    assert_eq!(totals["allowed"], 60, "{totals}");
    assert_eq!(totals["throttled"], 0, "{totals}");
}
