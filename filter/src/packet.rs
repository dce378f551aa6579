//! What the filter reads from one Ethernet frame: source and destination address, transport
//! protocol and ports, and the frame's length, or why the frame could not be read.
//!
//! The rules the parser follows are on [`parse_frame`].

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use etherparse::{
    EtherType, Ethernet2Slice, IpAuthHeaderSlice, IpNumber, Ipv4HeaderSlice,
    Ipv6FragmentHeaderSlice, Ipv6HeaderSlice, Ipv6RawExtHeaderSlice, SingleVlanSlice,
    TcpHeaderSlice, UdpHeaderSlice, err, ip_number,
};

use crate::key::Source;

/// What the filter needs from one frame.
///
/// # Examples
/// See [`parse_frame`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PacketInfo {
    /// The source address (IPv4-mapped IPv6 folded to IPv4).
    pub source: Source,
    /// The destination address, as sent.
    pub destination: IpAddr,
    /// The protocol of the IP payload after any extension headers.
    pub protocol: Protocol,
    /// The TCP or UDP source port, if the transport header is whole in the frame.
    pub source_port: Option<u16>,
    /// The TCP or UDP destination port, if the transport header is whole in the frame.
    pub destination_port: Option<u16>,
    /// The frame's length in bytes as given (headers, payload, padding), for byte-weighted limits.
    pub frame_len: usize,
}

/// The protocol of an IP payload.
///
/// # Examples
/// ```
/// use tollgate_filter::Protocol;
/// assert_eq!(Protocol::from_number(6), Protocol::Tcp);
/// assert_eq!(Protocol::from_number(1), Protocol::Other(1)); // ICMP
/// assert_eq!(Protocol::Udp.number(), 17);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// TCP (IP protocol 6).
    Tcp,
    /// UDP (IP protocol 17).
    Udp,
    /// Any other IP protocol number or IPv6 next header (never 6 or 17 when made by
    /// [`Protocol::from_number`] or [`parse_frame`]).
    Other(u8),
}

impl Protocol {
    /// The protocol with IP protocol number `number`.
    #[must_use]
    pub fn from_number(number: u8) -> Protocol {
        match IpNumber(number) {
            ip_number::TCP => Protocol::Tcp,
            ip_number::UDP => Protocol::Udp,
            _ => Protocol::Other(number),
        }
    }

    /// The IP protocol number.
    #[must_use]
    pub fn number(self) -> u8 {
        match self {
            Protocol::Tcp => ip_number::TCP.0,
            Protocol::Udp => ip_number::UDP.0,
            Protocol::Other(number) => number,
        }
    }
}

/// Why a frame could not be read: a verdict reason, never a panic. It is `Copy` and holds no
/// heap data, so counting or logging one costs no allocation.
///
/// The layers named are `"Ethernet"`, `"VLAN"`, `"IPv4"`, `"IPv6"`, `"IPv6 extension"` and
/// `"IP authentication"`.
///
/// # Examples
/// ```
/// use tollgate_filter::{parse_frame, Malformed};
/// assert_eq!(parse_frame(&[0; 10]), Err(Malformed::Truncated { layer: "Ethernet" }));
/// let arp = [[0xff; 12].as_slice(), &[0x08, 0x06], &[0; 28]].concat();
/// assert_eq!(parse_frame(&arp), Err(Malformed::NotIp { ether_type: 0x0806 }));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Malformed {
    /// The frame ends inside a header of `layer`.
    Truncated {
        /// The header cut short.
        layer: &'static str,
    },
    /// The innermost EtherType (after any VLAN tags) is neither IPv4 nor IPv6.
    NotIp {
        /// That EtherType (or 802.3 length field).
        ether_type: u16,
    },
    /// A header field of `layer` holds an impossible value.
    Invalid {
        /// The header at fault.
        layer: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Malformed::Truncated { layer } => write!(f, "frame ends inside its {layer} header"),
            Malformed::NotIp { ether_type } => {
                write!(f, "not an IP frame (EtherType {ether_type:#06x})")
            }
            Malformed::Invalid { layer, reason } => write!(f, "invalid {layer} header: {reason}"),
        }
    }
}

impl std::error::Error for Malformed {}

const ETHERNET: &str = "Ethernet";
const VLAN: &str = "VLAN";
const IPV4: &str = "IPv4";
const IPV6: &str = "IPv6";
const IPV6_EXTENSION: &str = "IPv6 extension";
const IP_AUTHENTICATION: &str = "IP authentication";

/// Reads an Ethernet II frame as captured, with or without its FCS.
///
/// The headers are read with [`etherparse`]'s header slices, one layer at a time, by these rules:
///
/// - **Link.** Ethernet II, then any number of 802.1Q / 802.1ad (QinQ) / `0x9100`
///   tags. A frame whose innermost EtherType is not IPv4 or IPv6 (ARP, MACsec, an 802.3 length
///   field) is [`Malformed::NotIp`].
/// - **Network.** IPv4 with options (and an IP authentication header after it) or IPv6 with its
///   extension headers (hop-by-hop, routing, destination options, fragment, authentication).
///   These headers must be whole and sane, and the IP version must match the EtherType: a frame
///   that ends inside them, or carries an impossible field, is [`Malformed`]. Checksums are not
///   verified (NICs verify them, and offloaded captures carry none).
/// - **Lengths.** The IP packet ends where its length field says (IPv4 total length, IPv6
///   payload length), so Ethernet padding and an FCS are never read as headers. A frame
///   shorter than that length is still read as far as it goes: the addresses are known, and the
///   transport header is read if it is whole. The one exception is an IPv6 payload length of 0
///   (a jumbogram), which runs to the end of the frame.
/// - **Transport.** [`PacketInfo::protocol`] is the IP protocol number of the payload after the
///   extension headers, even when the transport header cannot be read, so a rule for TCP also
///   sees truncated and fragmented TCP. The ports are `Some` only when the whole TCP header
///   (with its options) or the UDP header is in the frame. Non-first fragments (IPv4 fragment
///   offset or IPv6 fragment header offset not zero) carry no transport header: their protocol
///   comes from the IP (or fragment) header and their ports are `None`. A first fragment has
///   its ports when its transport header is whole.
///
/// # Errors
/// [`Malformed`] if the frame is not IP, or ends inside or holds an impossible value in its
/// Ethernet, VLAN, IP or IP extension headers. A missing, cut or unknown transport header is not
/// an error: the result then has no ports.
///
/// # Examples
/// ```
/// use std::net::{IpAddr, Ipv4Addr};
/// use etherparse::{PacketBuilder, VlanId};
/// use tollgate_filter::{parse_frame, Protocol, Source};
///
/// let builder = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
///     .single_vlan(VlanId::try_new(42)?)
///     .ipv4([192, 0, 2, 1], [198, 51, 100, 2], 64)
///     .tcp(40000, 443, 1, 65535);
/// let mut frame = Vec::new();
/// builder.write(&mut frame, b"hello")?;
///
/// let info = parse_frame(&frame)?;
/// assert_eq!(info.source, Source::from(Ipv4Addr::new(192, 0, 2, 1)));
/// assert_eq!(info.destination, IpAddr::V4(Ipv4Addr::new(198, 51, 100, 2)));
/// assert_eq!(info.protocol, Protocol::Tcp);
/// assert_eq!((info.source_port, info.destination_port), (Some(40000), Some(443)));
/// assert_eq!(info.frame_len, frame.len());
///
/// // Cut inside the IPv4 header: malformed, not a panic.
/// assert!(parse_frame(&frame[..30]).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn parse_frame(frame: &[u8]) -> Result<PacketInfo, Malformed> {
    let network = network(frame)?;
    let ports = network.transport.and_then(|t| ports(network.protocol, t));
    Ok(PacketInfo {
        source: Source::new(network.source),
        destination: network.destination,
        protocol: Protocol::from_number(network.protocol.0),
        source_port: ports.map(|(source, _)| source),
        destination_port: ports.map(|(_, destination)| destination),
        frame_len: frame.len(),
    })
}

/// What a decision reads of a frame: [`parse_frame`]'s source and protocol, without the
/// destination and the ports, which no rule reads. It errs exactly where [`parse_frame`] does
/// (the ports never make that err).
///
/// Most frames on the wire are untagged IPv4 without options or IPv6 without extension
/// headers: those are read straight from their header bytes ([`plain_source`]), every other
/// frame through etherparse's slices ([`sliced_source`]), with the same result.
#[inline]
pub(crate) fn parse_source(frame: &[u8]) -> Result<(Source, Protocol), Malformed> {
    match plain_source(frame) {
        Some(read) => Ok(read),
        None => sliced_source(frame),
    }
}

/// For the fuzz harness: the decision's read of `frame` ([`parse_source`], fast path first)
/// and the read of the etherparse slices alone. The two must be equal for every input.
#[doc(hidden)]
pub fn decision_reads(frame: &[u8]) -> [Result<(Source, Protocol), Malformed>; 2] {
    [parse_source(frame), sliced_source(frame)]
}

/// [`parse_source`] by etherparse's header slices, one layer at a time: every frame.
fn sliced_source(frame: &[u8]) -> Result<(Source, Protocol), Malformed> {
    let network = network(frame)?;
    Ok((
        Source::new(network.source),
        Protocol::from_number(network.protocol.0),
    ))
}

/// The length of an Ethernet II header: two addresses and the EtherType.
const ETHERNET_LEN: usize = 14;
/// An untagged frame up to the end of an IPv4 header without options.
const PLAIN_IPV4_LEN: usize = ETHERNET_LEN + 20;
/// An untagged frame up to the end of an IPv6 header.
const PLAIN_IPV6_LEN: usize = ETHERNET_LEN + 40;

/// [`sliced_source`]'s read of a frame that is untagged IPv4 without options or IPv6
/// without extension headers, straight from its header bytes; `None` for every other frame
/// (it then takes the sliced path). It answers only where the sliced path reads `Ok`, and
/// only from the fields that path decides on:
///
/// - IPv4: version 4 with a header length of 5 words (first byte `0x45`), a total length
///   of at least the header's 20 bytes (less is [`Malformed::Invalid`]), and a protocol that
///   is not an IP authentication header (which the sliced path reads past). The fragment
///   offset then changes only the ports, never the source or protocol.
/// - IPv6: version 6 and a next header that [`ipv6`] does not read past (hop-by-hop,
///   routing, fragment, authentication, destination options). The payload length then
///   changes only the ports.
#[inline]
fn plain_source(frame: &[u8]) -> Option<(Source, Protocol)> {
    let head: &[u8; PLAIN_IPV4_LEN] = frame.first_chunk()?;
    match EtherType(u16::from_be_bytes([head[12], head[13]])) {
        EtherType::IPV4 => plain_ipv4(head),
        EtherType::IPV6 => plain_ipv6(frame.first_chunk()?),
        _ => None,
    }
}

/// [`plain_source`] of an untagged IPv4 frame.
#[inline]
fn plain_ipv4(frame: &[u8; PLAIN_IPV4_LEN]) -> Option<(Source, Protocol)> {
    const IP: usize = ETHERNET_LEN;
    let total_len = u16::from_be_bytes([frame[IP + 2], frame[IP + 3]]);
    let protocol = frame[IP + 9];
    if frame[IP] != 0x45 || total_len < 20 || IpNumber(protocol) == ip_number::AUTH {
        return None;
    }
    // A fixed range of a fixed-size array: always 4 bytes.
    let source = <[u8; 4]>::try_from(&frame[IP + 12..IP + 16]).ok()?;
    Some((
        Source::from(Ipv4Addr::from(source)),
        Protocol::from_number(protocol),
    ))
}

/// [`plain_source`] of an untagged IPv6 frame.
#[inline]
fn plain_ipv6(frame: &[u8; PLAIN_IPV6_LEN]) -> Option<(Source, Protocol)> {
    const IP: usize = ETHERNET_LEN;
    let next_header = IpNumber(frame[IP + 6]);
    if frame[IP] >> 4 != 6
        || matches!(
            next_header,
            ip_number::IPV6_HOP_BY_HOP
                | ip_number::IPV6_ROUTE
                | ip_number::IPV6_FRAG
                | ip_number::AUTH
                | ip_number::IPV6_DEST_OPTIONS
        )
    {
        return None;
    }
    // A fixed range of a fixed-size array: always 16 bytes.
    let source = <[u8; 16]>::try_from(&frame[IP + 8..IP + 24]).ok()?;
    Some((
        Source::new(IpAddr::V6(Ipv6Addr::from(source))),
        Protocol::from_number(next_header.0),
    ))
}

/// The link layer and the network layer of `frame`, by [`parse_frame`]'s rules.
#[inline]
fn network(frame: &[u8]) -> Result<Network<'_>, Malformed> {
    let ethernet =
        Ethernet2Slice::from_slice_without_fcs(frame).map_err(|_| truncated(ETHERNET))?;
    let mut payload = ethernet.payload();
    // Each tag consumes 4 bytes, so the loop ends with the frame.
    while matches!(
        payload.ether_type,
        EtherType::VLAN_TAGGED_FRAME
            | EtherType::PROVIDER_BRIDGING
            | EtherType::VLAN_DOUBLE_TAGGED_FRAME
    ) {
        payload = SingleVlanSlice::from_slice(payload.payload)
            .map_err(|_| truncated(VLAN))?
            .payload();
    }
    match payload.ether_type {
        EtherType::IPV4 => ipv4(payload.payload),
        EtherType::IPV6 => ipv6(payload.payload),
        EtherType(ether_type) => Err(Malformed::NotIp { ether_type }),
    }
}

/// The network layer as read: addresses, the payload's protocol and, unless this is a
/// non-first fragment, the payload bytes (possibly cut short by the frame).
struct Network<'a> {
    source: IpAddr,
    destination: IpAddr,
    protocol: IpNumber,
    transport: Option<&'a [u8]>,
}

#[inline]
fn ipv4(packet: &[u8]) -> Result<Network<'_>, Malformed> {
    use err::ipv4::{HeaderError, HeaderSliceError};
    let header = Ipv4HeaderSlice::from_slice(packet).map_err(|e| match e {
        HeaderSliceError::Len(_) => truncated(IPV4),
        HeaderSliceError::Content(HeaderError::UnexpectedVersion { .. }) => {
            invalid(IPV4, "version is not 4")
        }
        HeaderSliceError::Content(HeaderError::HeaderLengthSmallerThanHeader { .. }) => {
            invalid(IPV4, "header length below 20 bytes")
        }
    })?;
    let header_len = header.slice().len();
    let total_len = usize::from(header.total_len());
    if total_len < header_len {
        return Err(invalid(IPV4, "total length shorter than the header"));
    }
    let end = total_len.min(packet.len());
    // header_len <= end: the header is in `packet` and within `total_len`.
    let payload = packet.get(header_len..end).unwrap_or_default();
    let mut network = Network {
        source: IpAddr::V4(header.source_addr()),
        destination: IpAddr::V4(header.destination_addr()),
        protocol: header.protocol(),
        transport: None,
    };
    if header.fragments_offset().value() != 0 {
        return Ok(network);
    }
    let payload = if network.protocol == ip_number::AUTH {
        let auth = authentication(payload)?;
        network.protocol = auth.next_header();
        rest_after(payload, auth.slice())
    } else {
        payload
    };
    network.transport = Some(payload);
    Ok(network)
}

#[inline]
fn ipv6(packet: &[u8]) -> Result<Network<'_>, Malformed> {
    use err::ipv6::{HeaderError, HeaderSliceError};
    let header = Ipv6HeaderSlice::from_slice(packet).map_err(|e| match e {
        HeaderSliceError::Len(_) => truncated(IPV6),
        HeaderSliceError::Content(HeaderError::UnexpectedVersion { .. }) => {
            invalid(IPV6, "version is not 6")
        }
    })?;
    let header_len = header.slice().len();
    let end = match usize::from(header.payload_length()) {
        0 => packet.len(),
        len => (header_len + len).min(packet.len()),
    };
    // header_len <= end: the header is in `packet`.
    let mut payload = packet.get(header_len..end).unwrap_or_default();
    let mut network = Network {
        source: IpAddr::V6(header.source_addr()),
        destination: IpAddr::V6(header.destination_addr()),
        protocol: header.next_header(),
        transport: None,
    };
    let mut first = true;
    // Each extension header consumes at least 8 bytes, so the loop ends with the packet.
    loop {
        match network.protocol {
            ip_number::IPV6_HOP_BY_HOP if !first => {
                return Err(invalid(IPV6_EXTENSION, "hop-by-hop options not first"));
            }
            ip_number::IPV6_HOP_BY_HOP | ip_number::IPV6_ROUTE | ip_number::IPV6_DEST_OPTIONS => {
                let ext = Ipv6RawExtHeaderSlice::from_slice(payload)
                    .map_err(|_| truncated(IPV6_EXTENSION))?;
                network.protocol = ext.next_header();
                payload = rest_after(payload, ext.slice());
            }
            ip_number::IPV6_FRAG => {
                let fragment = Ipv6FragmentHeaderSlice::from_slice(payload)
                    .map_err(|_| truncated(IPV6_EXTENSION))?;
                network.protocol = fragment.next_header();
                if fragment.fragment_offset().value() != 0 {
                    // What follows is the middle of the original payload, not headers.
                    return Ok(network);
                }
                payload = rest_after(payload, fragment.slice());
            }
            ip_number::AUTH => {
                let auth = authentication(payload)?;
                network.protocol = auth.next_header();
                payload = rest_after(payload, auth.slice());
            }
            _ => break,
        }
        first = false;
    }
    network.transport = Some(payload);
    Ok(network)
}

fn authentication(payload: &[u8]) -> Result<IpAuthHeaderSlice<'_>, Malformed> {
    use err::ip_auth::{HeaderError, HeaderSliceError};
    IpAuthHeaderSlice::from_slice(payload).map_err(|e| match e {
        HeaderSliceError::Len(_) => truncated(IP_AUTHENTICATION),
        HeaderSliceError::Content(HeaderError::ZeroPayloadLen) => {
            invalid(IP_AUTHENTICATION, "payload length 0")
        }
    })
}

/// The TCP or UDP ports, if `payload` starts with a whole header of `protocol`.
fn ports(protocol: IpNumber, payload: &[u8]) -> Option<(u16, u16)> {
    match protocol {
        ip_number::TCP => TcpHeaderSlice::from_slice(payload)
            .ok()
            .map(|tcp| (tcp.source_port(), tcp.destination_port())),
        ip_number::UDP => UdpHeaderSlice::from_slice(payload)
            .ok()
            .map(|udp| (udp.source_port(), udp.destination_port())),
        _ => None,
    }
}

/// What follows `header`, which etherparse sliced from the start of `bytes`.
fn rest_after<'a>(bytes: &'a [u8], header: &[u8]) -> &'a [u8] {
    bytes.get(header.len()..).unwrap_or_default()
}

fn truncated(layer: &'static str) -> Malformed {
    Malformed::Truncated { layer }
}

fn invalid(layer: &'static str, reason: &'static str) -> Malformed {
    Malformed::Invalid { layer, reason }
}

#[cfg(test)]
mod tests {
    use etherparse::PacketBuilder;
    use proptest::prelude::*;

    use super::*;

    /// Untagged TCP and UDP frames over IPv4 without options and IPv6 without extension
    /// headers (one with an IPv4-mapped source), as a sender writes them.
    fn plain_frames() -> Vec<Vec<u8>> {
        let eth = || PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        let v4 = || eth().ipv4([198, 51, 100, 7], [192, 0, 2, 1], 64);
        let v6 = |source| {
            eth().ipv6(
                source,
                [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
                64,
            )
        };
        let global = [0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 9];
        let mapped = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 51, 100, 7];
        let mut frames = vec![Vec::new(); 5];
        let written = [
            v4().tcp(40_000, 443, 1, 64_240)
                .syn()
                .write(&mut frames[0], &[]),
            v4().udp(40_000, 53).write(&mut frames[1], &[0; 8]),
            v6(global)
                .tcp(40_000, 443, 1, 64_240)
                .syn()
                .write(&mut frames[2], &[]),
            v6(global).udp(40_000, 53).write(&mut frames[3], &[0; 8]),
            v6(mapped).udp(40_000, 53).write(&mut frames[4], &[0; 8]),
        ];
        assert!(written.iter().all(Result::is_ok), "{written:?}");
        frames
    }

    /// The header-bytes path reads what the etherparse slices read, and errs where they err:
    /// on plain frames with each byte of their link and IP headers (EtherType, version and
    /// header length, total or payload length, fragment fields, protocol or next header,
    /// addresses) set to each of its 256 values, each cut at every length.
    #[test]
    fn plain_frames_read_as_the_header_slices_read_them() {
        let mut fast = 0;
        for frame in plain_frames() {
            // Else this would only test the sliced path against itself.
            assert!(
                plain_source(&frame).is_some(),
                "no fast read of {frame:02x?}"
            );
            let headers = if frame.len() >= PLAIN_IPV6_LEN && frame[12] == 0x86 {
                PLAIN_IPV6_LEN
            } else {
                PLAIN_IPV4_LEN
            };
            for at in 0..headers {
                for byte in 0..=u8::MAX {
                    let mut changed = frame.clone();
                    changed[at] = byte;
                    for cut in 0..=changed.len() {
                        let cut = &changed[..cut];
                        let read = parse_source(cut);
                        assert_eq!(
                            read,
                            sliced_source(cut),
                            "byte {at} = {byte:#04x} of {cut:02x?}"
                        );
                        fast += usize::from(plain_source(cut).is_some());
                    }
                }
            }
        }
        // The changed frames went down both paths.
        assert!(fast > 0);
    }

    /// An IPv4 header whose total length is exactly its own 20 bytes (no payload) is valid,
    /// so the header-bytes path reads it rather than leaving it to the slices.
    #[test]
    fn an_ipv4_packet_of_its_header_alone_takes_the_fast_path() {
        let mut frame = plain_frames().swap_remove(0);
        frame[ETHERNET_LEN + 2..ETHERNET_LEN + 4].copy_from_slice(&20u16.to_be_bytes());
        let read = (Source::from(Ipv4Addr::new(198, 51, 100, 7)), Protocol::Tcp);
        assert_eq!(plain_source(&frame), Some(read));
        assert_eq!(sliced_source(&frame), Ok(read));
    }

    proptest! {
        /// The decision's parse reads what `parse_frame` reads, and errs where it errs, on
        /// frames of either family and transport, cut anywhere and with any one byte changed.
        #[test]
        fn parse_source_agrees_with_parse_frame(
            v6 in any::<bool>(),
            udp in any::<bool>(),
            source in any::<[u8; 16]>(),
            cut in 0usize..100,
            at in 0usize..100,
            byte in any::<u8>(),
        ) {
            let eth = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
            let ip = if v6 {
                eth.ipv6(source, [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], 64)
            } else {
                eth.ipv4([source[0], source[1], source[2], source[3]], [192, 0, 2, 1], 64)
            };
            let mut frame = Vec::new();
            let written = if udp {
                ip.udp(40_000, 53).write(&mut frame, &[0; 8])
            } else {
                ip.tcp(40_000, 443, 1, 64_240).syn().write(&mut frame, &[])
            };
            prop_assert!(written.is_ok());
            if let Some(b) = frame.get_mut(at) {
                *b = byte;
            }
            frame.truncate(cut);
            prop_assert_eq!(
                parse_source(&frame),
                parse_frame(&frame).map(|p| (p.source, p.protocol))
            );
        }
    }
}
