//! Captures for the replay tests: frames built with etherparse, written as pcap with their
//! times.

use std::net::Ipv6Addr;
use std::path::Path;
use std::time::Duration;

use etherparse::PacketBuilder;
use pcap_file::pcap::{PcapPacket, PcapWriter};

/// A TCP SYN from `src` to 198.51.100.1:443, in an Ethernet frame.
pub(crate) fn v4_frame(src: [u8; 4]) -> Vec<u8> {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2([2; 6], [4; 6])
        .ipv4(src, [198, 51, 100, 1], 64)
        .tcp(40_000, 443, 1, 64_240)
        .syn()
        .write(&mut frame, &[])
        .expect("a frame");
    frame
}

/// A one-byte UDP datagram from `src` to [::1]:53, in an Ethernet frame.
pub(crate) fn v6_frame(src: Ipv6Addr) -> Vec<u8> {
    let mut frame = Vec::new();
    PacketBuilder::ethernet2([2; 6], [4; 6])
        .ipv6(src.octets(), Ipv6Addr::LOCALHOST.octets(), 64)
        .udp(5353, 53)
        .write(&mut frame, b"q")
        .expect("a frame");
    frame
}

/// Writes `frames`, each at its offset from the capture's start.
pub(crate) fn write_timed_pcap(path: &Path, frames: &[(Duration, Vec<u8>)]) {
    let file = std::fs::File::create(path).expect("created");
    let mut writer = PcapWriter::new(file).expect("a pcap writer");
    for (offset, frame) in frames {
        let at = Duration::from_secs(1_700_000_000) + *offset;
        let packet = PcapPacket::new(at, frame.len() as u32, frame);
        writer.write_packet(&packet).expect("written");
    }
}
