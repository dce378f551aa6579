//! Writes the binary seed corpus: frames from the benchmarks' synthetic builder and a few
//! hand-built ones, PROXY v1/v2 headers, and a tiny pcap and pcapng of those frames.
//! The config seeds are the README's blocks and `benches/replay-policy.toml`, copied by hand.
//! The state seeds are small state files (fixed hash seeds, so they come out the same every
//! run) and their bodies alone (the harness also reads its input sealed as a body).
//!
//! ```text
//! cargo run -p tollgate-fuzz --example seeds    # rewrites tests/fuzz/corpus/*/seed-*
//! ```

#[path = "../../../benches/workload.rs"]
mod workload;

use std::borrow::Cow;
use std::path::Path;
use std::time::Duration;

use etherparse::PacketBuilder;
use pcap_file::DataLink;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
use tollgate::listeners::proxy_protocol::{V2Transport, encode_v1, encode_v2};
use tollgate::state::format::HEADER_LEN;
use tollgate::state::{ListEntry, State, encode};
use tollgate_filter::{Cidr, SavedKind, SavedSketch};
use tollgate_sketch::{RateSketch, Tick};

fn write(target: &str, name: &str, bytes: &[u8]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    std::fs::create_dir_all(&dir).expect("the corpus directory");
    std::fs::write(dir.join(format!("seed-{name}")), bytes).expect("a seed file");
}

/// Frames the synthetic builder does not make: VLAN tags, an ARP frame, a cut one, and
/// [`past_the_fast_path`].
fn hand_built() -> Vec<(&'static str, Vec<u8>)> {
    let mut vlan = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .single_vlan(7.try_into().expect("a VLAN id"))
        .ipv4([10, 1, 2, 3], [192, 0, 2, 1], 64)
        .udp(5353, 53)
        .write(&mut vlan, b"query")
        .expect("a VLAN frame");
    let mut qinq = Vec::new();
    PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .double_vlan(
            100.try_into().expect("a VLAN id"),
            200.try_into().expect("a VLAN id"),
        )
        .ipv6(
            [0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7],
            [0xfe; 16],
            64,
        )
        .tcp(40_000, 443, 9, 1024)
        .syn()
        .write(&mut qinq, &[])
        .expect("a QinQ frame");
    let arp = [[0xff; 12].as_slice(), &[0x08, 0x06], &[0; 28]].concat();
    let cut = workload::synthetic_frame(0)[..30].to_vec();
    let mut frames = vec![("vlan", vlan), ("qinq", qinq), ("arp", arp), ("cut", cut)];
    frames.extend(past_the_fast_path());
    frames
}

/// Untagged frames one byte away from what the decision reads from header bytes alone
/// (`plain_source` in the filter's `packet.rs`), which it hands to etherparse's slices: IPv4
/// whose protocol is an authentication header (51), IPv4 whose total length (19) is shorter
/// than its header, IPv6 whose next header is destination options (60).
fn past_the_fast_path() -> Vec<(&'static str, Vec<u8>)> {
    let eth = || PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    let mut v4 = Vec::new();
    eth()
        .ipv4([198, 51, 100, 7], [192, 0, 2, 1], 64)
        .tcp(40_000, 443, 1, 64_240)
        .syn()
        .write(&mut v4, &[])
        .expect("an IPv4 frame");
    let mut v6 = Vec::new();
    eth()
        .ipv6(
            [0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9],
            [0xfe; 16],
            64,
        )
        .udp(5353, 53)
        .write(&mut v6, b"query")
        .expect("an IPv6 frame");
    let with = |frame: &[u8], at: usize, byte: u8| {
        let mut changed = frame.to_vec();
        changed[at] = byte;
        changed
    };
    vec![
        ("ipv4-auth", with(&v4, 14 + 9, 51)),
        ("ipv4-total-19", with(&v4, 14 + 3, 19)),
        ("ipv6-destination-options", with(&v6, 14 + 6, 60)),
    ]
}

/// A saved sketch of `kind` and window 10 s with a fixed seed, `keys` keys counted in its
/// windows 7 and 8 (and retired until 95 s if `retired`).
fn saved_sketch(kind: SavedKind, keys: u32, retired: bool) -> SavedSketch {
    let period = Duration::from_secs(10);
    let builder = RateSketch::builder()
        .window(period)
        .depth(2)
        .front_share(if kind == SavedKind::Limits {
            0.125
        } else {
            0.0
        })
        .seed(7);
    let bytes = builder.min_memory_bytes();
    let sketch = builder.memory_bytes(bytes).build().expect("a small sketch");
    for window in [7u64, 8] {
        for key in 0..keys {
            let at = Tick::from_nanos(window * 10_000_000_000 + u64::from(key));
            let _ = sketch.observe(&key.to_le_bytes(), 1 + u64::from(key % 3), at);
        }
    }
    SavedSketch {
        kind,
        period,
        bytes: bytes as u64,
        retired_until: retired.then(|| Tick::from_nanos(95_000_000_000)),
        shape: sketch.shape(),
        windows: vec![sketch.export_window(7), sketch.export_window(8)],
    }
}

/// Small state files: empty, limits with list entries, penalties and a retired sketch, and
/// descriptor sketches (version 2).
fn states() -> Vec<(&'static str, State)> {
    let state = |sketches, lists| State {
        saved_at_unix_ms: 1_795_000_000_000,
        tick: Tick::from_nanos(85_000_000_000),
        sketches,
        lists,
        descriptors: None,
    };
    let entry = |cidr: &str, deny, reason: &str| ListEntry {
        cidr: Cidr::parse(cidr).expect("a CIDR"),
        deny,
        expires_unix_ms: 1_795_000_600_000,
        reason: reason.to_owned(),
    };
    vec![
        ("empty", state(Vec::new(), Vec::new())),
        (
            "limits-lists",
            state(
                vec![saved_sketch(SavedKind::Limits, 20, false)],
                vec![
                    entry("198.51.100.0/24", true, "scanner"),
                    entry("2001:db8::/48", false, "partner"),
                ],
            ),
        ),
        (
            "penalties-retired",
            state(
                vec![
                    saved_sketch(SavedKind::Penalties, 3, false),
                    saved_sketch(SavedKind::ShiftedPenalties, 2, false),
                    saved_sketch(SavedKind::Limits, 5, true),
                ],
                Vec::new(),
            ),
        ),
        (
            // Format version 2: the rate-limit service's sketches in their own section.
            "descriptors",
            State {
                descriptors: Some(vec![saved_sketch(SavedKind::Limits, 4, false)]),
                ..state(Vec::new(), Vec::new())
            },
        ),
    ]
}

fn main() {
    for (name, state) in states() {
        let bytes = encode(&state);
        write("state", name, &bytes);
        write("state", &format!("body-{name}"), &bytes[HEADER_LEN..]);
    }

    let frames: Vec<Vec<u8>> = (0..12).map(workload::synthetic_frame).collect();
    for (id, frame) in frames.iter().enumerate() {
        write("frame", &format!("synthetic-{id}"), frame);
    }
    for (name, frame) in hand_built() {
        write("frame", name, &frame);
    }

    let v4 = (
        "203.0.113.7:51234".parse().unwrap(),
        "192.0.2.1:443".parse().unwrap(),
    );
    let v6 = (
        "[2001:db8::7]:51234".parse().unwrap(),
        "[2001:db8::1]:443".parse().unwrap(),
    );
    write(
        "proxy_header",
        "v1-tcp4",
        &[encode_v1(v4.0, v4.1), b"GET / HTTP/1.1\r\n".to_vec()].concat(),
    );
    write("proxy_header", "v1-tcp6", &encode_v1(v6.0, v6.1));
    write("proxy_header", "v1-unknown", b"PROXY UNKNOWN\r\n");
    write(
        "proxy_header",
        "v2-tcp4",
        &encode_v2(v4.0, v4.1, V2Transport::Stream),
    );
    write(
        "proxy_header",
        "v2-udp6",
        &encode_v2(v6.0, v6.1, V2Transport::Datagram),
    );
    let signature = b"\r\n\r\n\0\r\nQUIT\n";
    write(
        "proxy_header",
        "v2-local",
        &[signature.as_slice(), &[0x20, 0x00, 0, 0]].concat(),
    );
    // IPv4 STREAM with one TLV (PP2_TYPE_AUTHORITY, "a.example").
    let tlv = [[0x02, 0, 9].as_slice(), b"a.example"].concat();
    let with_tlv = [
        signature.as_slice(),
        &[0x21, 0x11, 0, 12 + 12],
        &[203, 0, 113, 7, 192, 0, 2, 1, 0xc8, 0x22, 0x01, 0xbb],
        &tlv,
    ]
    .concat();
    write("proxy_header", "v2-tlv", &with_tlv);
    let unix = [signature.as_slice(), &[0x21, 0x31, 0, 216], &[b'/'; 216]].concat();
    write("proxy_header", "v2-unix", &unix);

    let at = |i: usize| Duration::from_secs(1_700_000_000) + Duration::from_micros(10 * i as u64);
    let mut pcap = PcapWriter::new(Vec::new()).expect("a pcap header");
    for (i, frame) in frames.iter().take(3).enumerate() {
        let len = u32::try_from(frame.len()).expect("a small frame");
        pcap.write_packet(&PcapPacket::new(at(i), len, frame))
            .expect("a pcap record");
    }
    write("capture", "pcap", &pcap.into_writer());
    let header = PcapHeader {
        endianness: pcap_file::Endianness::Big,
        ts_resolution: pcap_file::TsResolution::NanoSecond,
        ..PcapHeader::default()
    };
    let mut nano = PcapWriter::with_header(Vec::new(), header).expect("a pcap header");
    let len = u32::try_from(frames[3].len()).expect("a small frame");
    nano.write_packet(&PcapPacket::new(at(0), len, &frames[3]))
        .expect("a pcap record");
    write("capture", "pcap-nano-big-endian", &nano.into_writer());
    let mut pcapng = PcapNgWriter::new(Vec::new()).expect("a pcapng section");
    pcapng
        .write_pcapng_block(InterfaceDescriptionBlock {
            linktype: DataLink::ETHERNET,
            snaplen: 0,
            options: Vec::new(),
        })
        .expect("an interface block");
    for (i, frame) in frames.iter().take(3).enumerate() {
        pcapng
            .write_pcapng_block(EnhancedPacketBlock {
                interface_id: 0,
                timestamp: at(i),
                original_len: u32::try_from(frame.len()).expect("a small frame"),
                data: Cow::Borrowed(frame),
                options: Vec::new(),
            })
            .expect("a packet block");
    }
    write("capture", "pcapng", &pcapng.into_inner());
}
