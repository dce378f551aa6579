//! Writes a synthetic pcap for measuring `tollgate replay` end to end:
//!
//! ```text
//! cargo run --release -p tollgate-benches --bin capture -- /tmp/replay.pcap 1000000
//! cargo build --release -p tollgate
//! time target/release/tollgate replay --config benches/replay-policy.toml /tmp/replay.pcap
//! ```
//!
//! Frames: TCP SYNs and small UDP datagrams, IPv4 and IPv6 (3:1), from sources drawn from
//! Zipf(1.1) over 100k ids, 10 us apart (100k frames per second of capture time).

#[path = "workload.rs"]
mod workload;

use std::io::BufWriter;
use std::process::ExitCode;
use std::time::Duration;

use pcap_file::pcap::{PcapPacket, PcapWriter};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(path), Some(count)) = (
        args.get(1),
        args.get(2).and_then(|n| n.parse::<usize>().ok()),
    ) else {
        eprintln!("usage: capture FILE FRAMES");
        return ExitCode::from(2);
    };
    let file = match std::fs::File::create(path) {
        Ok(file) => file,
        Err(err) => {
            eprintln!("error: cannot create {path}: {err}");
            return ExitCode::FAILURE;
        }
    };
    let mut writer = PcapWriter::new(BufWriter::new(file)).expect("a pcap header");
    let ids = workload::zipf_stream(100_000, 1.1, count, 17);
    for (i, id) in ids.into_iter().enumerate() {
        let frame = workload::synthetic_frame(id);
        let at = Duration::from_secs(1_700_000_000) + Duration::from_micros(10 * i as u64);
        let packet = PcapPacket::new(at, frame.len() as u32, &frame);
        if let Err(err) = writer.write_packet(&packet) {
            eprintln!("error: writing {path}: {err}");
            return ExitCode::FAILURE;
        }
    }
    println!("wrote {count} frames to {path}");
    ExitCode::SUCCESS
}
