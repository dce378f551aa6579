//! Reading captures (pcap and pcapng, through pcap-file): each Ethernet frame with its
//! timestamp, and for a truncated or corrupt file, how far it got.

use std::fmt;
use std::time::Duration;

use pcap_file::DataLink;
use pcap_file::pcap::PcapParser;
use pcap_file::pcapng::{Block, PcapNgParser};

/// Why a capture could not be read to its end.
#[derive(Debug)]
pub struct CaptureError {
    /// Frames read before the problem.
    pub frames: u64,
    /// Byte offset of the problem in the file.
    pub offset: usize,
    /// What is wrong.
    pub reason: String,
}

impl fmt::Display for CaptureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the capture is unreadable at byte {} after {} frame(s): {}",
            self.offset, self.frames, self.reason
        )
    }
}

impl std::error::Error for CaptureError {}

/// Calls `frame(timestamp, bytes)` for every Ethernet frame of the pcap or pcapng capture in
/// `bytes`, in file order, and returns how many there were.
///
/// # Errors
/// [`CaptureError`] for an unknown format, a link type other than Ethernet, or a truncated or
/// corrupt record; the frames before it have been handed to `frame`.
pub fn for_each_frame(
    bytes: &[u8],
    mut frame: impl FnMut(Duration, &[u8]),
) -> Result<u64, CaptureError> {
    let mut frames = 0;
    let fail = |frames: u64, rest: &[u8], reason: String| CaptureError {
        frames,
        offset: bytes.len() - rest.len(),
        reason,
    };
    match bytes.get(..4) {
        Some([0x0a, 0x0d, 0x0d, 0x0a]) => {
            let (mut rest, mut parser) = PcapNgParser::new(bytes)
                .map_err(|e| fail(0, bytes, format!("pcapng header: {e}")))?;
            while !rest.is_empty() {
                let (next, block) = parser
                    .next_block(rest)
                    .map_err(|e| fail(frames, rest, format!("pcapng block: {e}")))?;
                match block {
                    Block::EnhancedPacket(packet) => {
                        frame(packet.timestamp, &packet.data);
                        frames += 1;
                    }
                    Block::InterfaceDescription(interface)
                        if interface.linktype != DataLink::ETHERNET =>
                    {
                        return Err(fail(
                            frames,
                            rest,
                            format!("link type {:?} is not Ethernet", interface.linktype),
                        ));
                    }
                    _ => {}
                }
                rest = next;
            }
        }
        Some(_) => {
            let (mut rest, parser) = PcapParser::new(bytes)
                .map_err(|e| fail(0, bytes, format!("not a pcap or pcapng file ({e})")))?;
            let link = parser.header().datalink;
            if link != DataLink::ETHERNET {
                return Err(fail(0, rest, format!("link type {link:?} is not Ethernet")));
            }
            while !rest.is_empty() {
                let (next, packet) = parser
                    .next_packet(rest)
                    .map_err(|e| fail(frames, rest, format!("pcap record: {e}")))?;
                frame(packet.timestamp, &packet.data);
                frames += 1;
                rest = next;
            }
        }
        None => {
            return Err(fail(
                0,
                bytes,
                "the file is shorter than any capture header".into(),
            ));
        }
    }
    Ok(frames)
}
