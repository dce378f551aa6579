//! The PROXY protocol (HAProxy's spec, v1 text and v2 binary): a header a load balancer
//! puts in front of a relayed connection to say which client it is relaying.
//!
//! Behind a load balancer every connection comes from the balancer's own address, so
//! limiting per source would put all clients in one bucket. With the PROXY protocol the
//! balancer starts each connection with a short header naming the real client
//! (`PROXY TCP4 203.0.113.7 192.0.2.1 51234 443\r\n` in v1, or the binary v2 form), and we
//! key the rate limit on that. Going the other way, [`encode_v1`] and [`encode_v2`] build
//! the header we send upstream, so the backend learns the client too.
//!
//! # Trust
//!
//! The header is just bytes the peer chose: anyone who can open a connection can claim to
//! be relaying any source, and so spread their traffic over made-up addresses or blame a
//! victim. Headers are therefore only read from configured trusted peers (the balancers).
//! From anyone else a connection that starts like a header ([`looks_like_header`]) is
//! refused instead of forwarded, so a backend that also speaks the protocol is not fooled.
//!
//! # Limits
//!
//! - v1: the whole line, CRLF included, is at most [`MAX_V1_LEN`] (107) bytes, as the spec
//!   says; we stop reading there.
//! - v2: the 16-byte fixed part plus the announced address and TLV bytes is at most
//!   [`MAX_V2_LEN`] (1040) bytes. The length field allows 64 KiB; real headers are far
//!   smaller, and the cap keeps a connection's memory fixed.
//! - [`read_header`] reads v2 headers exactly and v1 headers in reads of at most 107 bytes,
//!   so at most one read's worth past the header is returned as leftover payload.
//! - TLVs are skipped (not validated); AF_UNIX addresses, which have no socket address
//!   here, fall back to [`Header::Local`] as the spec allows.
//! - No timeout: the caller wraps [`read_header`] in `tokio::time::timeout`.
//!
//! Parsing is done by the [`ppp`] crate on complete headers; the framing (how many bytes
//! to read, when to stop) and the encoders are ours, so the round-trip tests check each
//! side against an independent implementation.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use ppp::v2::{Addresses, Command, Protocol};
use tokio::io::{AsyncRead, AsyncReadExt};

/// The longest v1 header the spec allows: `PROXY UNKNOWN` with two full IPv6 addresses,
/// two ports and CRLF.
pub const MAX_V1_LEN: usize = 107;

/// The longest v2 header we accept, fixed part included: 16 bytes plus 1024 bytes of
/// addresses and TLVs (IPv6 addresses take 36, AF_UNIX 216).
pub const MAX_V2_LEN: usize = V2_FIXED_LEN + 1024;

/// The v1 signature, its trailing space included.
const V1_SIGNATURE: &[u8] = b"PROXY ";

/// The v2 signature: 12 bytes chosen never to start a valid text protocol.
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";

/// The v2 fixed part: signature, version/command, family/transport, 2-byte length.
const V2_FIXED_LEN: usize = 16;

/// What a PROXY header said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Header {
    /// The connection was relayed for this client, to this address.
    Proxied {
        /// The client the peer relays for.
        source: SocketAddr,
        /// The address the client connected to.
        destination: SocketAddr,
    },
    /// v2 LOCAL command (health check by the peer itself) or v1 "UNKNOWN" / v2 UNSPEC
    /// family (or AF_UNIX): use the connection's own addresses.
    Local,
}

/// The transport a v2 header announces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum V2Transport {
    /// TCP (`STREAM`).
    Stream,
    /// UDP (`DGRAM`).
    Datagram,
}

/// Why a header was refused (the connection is then closed; the caller counts and logs it).
#[derive(Debug)]
pub enum HeaderError {
    /// The peer closed (or the stream ended) before a whole header arrived; says how many
    /// bytes were read.
    Truncated {
        /// Bytes read before the end of the stream.
        read: usize,
    },
    /// Not a PROXY header at all (first bytes match neither signature).
    NotProxy,
    /// A header longer than we accept: v1 without CRLF within [`MAX_V1_LEN`] bytes, or v2
    /// announcing more than [`MAX_V2_LEN`] bytes.
    TooLong {
        /// v1: the bytes read without finding a CRLF ([`MAX_V1_LEN`]); v2: the total
        /// length the header announced, fixed part included.
        length: usize,
    },
    /// Malformed: bad version/command/family, bad address text, bad ports, missing CRLF, etc.
    Invalid(String),
    /// I/O error reading.
    Io(std::io::Error),
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { read } => write!(
                f,
                "the stream ended after {read} bytes, before a whole PROXY header arrived"
            ),
            Self::NotProxy => {
                f.write_str("the first bytes are not a PROXY protocol v1 or v2 signature")
            }
            Self::TooLong { length } => write!(
                f,
                "PROXY header too long ({length} bytes; v1 allows {MAX_V1_LEN}, v2 {MAX_V2_LEN})"
            ),
            Self::Invalid(why) => write!(f, "invalid PROXY header: {why}"),
            Self::Io(err) => write!(f, "reading the PROXY header: {err}"),
        }
    }
}

impl std::error::Error for HeaderError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io(err) => Some(err),
            _ => None,
        }
    }
}

impl From<std::io::Error> for HeaderError {
    fn from(err: std::io::Error) -> Self {
        Self::Io(err)
    }
}

/// Reads one PROXY header (v1 or v2, detected by its first bytes) from `reader`.
///
/// Returns the header and any bytes read past its end: the start of the client's payload,
/// which the caller forwards first. v2 headers are read exactly (the 16-byte fixed part,
/// then the announced length), so their leftover is empty; v1 lines are read in chunks of
/// at most [`MAX_V1_LEN`] bytes in all, so some payload may come along. Memory is bounded
/// by [`MAX_V2_LEN`]; no input makes it panic.
///
/// # Errors
/// [`HeaderError::Truncated`] if the stream ends first, [`HeaderError::NotProxy`] if the
/// first bytes match neither signature, [`HeaderError::TooLong`] and
/// [`HeaderError::Invalid`] for headers we refuse, [`HeaderError::Io`] if a read fails.
///
/// # Examples
/// ```
/// use tollgate::listeners::proxy_protocol::{read_header, Header};
///
/// let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
/// let mut stream: &[u8] = b"PROXY TCP4 203.0.113.7 192.0.2.1 51234 443\r\nGET / HTTP/1.1\r\n";
/// let (header, leftover) = runtime.block_on(read_header(&mut stream)).unwrap();
/// assert_eq!(
///     header,
///     Header::Proxied {
///         source: "203.0.113.7:51234".parse().unwrap(),
///         destination: "192.0.2.1:443".parse().unwrap(),
///     }
/// );
/// assert_eq!(leftover, b"GET / HTTP/1.1\r\n");
/// ```
pub async fn read_header<R: AsyncRead + Unpin>(
    reader: &mut R,
) -> Result<(Header, Vec<u8>), HeaderError> {
    let mut buf = Vec::with_capacity(MAX_V1_LEN);
    // Up to 16 bytes tell the version apart, and never overshoot a v2 fixed part.
    loop {
        match classify(&buf) {
            Signature::V1 => return read_v1(reader, buf).await,
            Signature::V2 => return read_v2(reader, buf).await,
            Signature::Partial => fill(reader, &mut buf, V2_FIXED_LEN).await?,
            Signature::None => return Err(HeaderError::NotProxy),
        }
    }
}

/// True if `first` (the first bytes a peer sent, possibly fewer than a whole signature)
/// could be the start of a PROXY header, v1 (`"PROXY "`) or v2 (the 12-byte signature).
/// Used to refuse headers from untrusted peers.
///
/// Only the signature is compared: bytes after it are ignored, so a whole header is true.
/// An empty slice is false: nothing has arrived, so there is nothing to refuse yet. A short
/// prefix such as `b"P"` is true, so callers should look at as many bytes as they have
/// (12 settle it for both versions).
///
/// # Examples
/// ```
/// use tollgate::listeners::proxy_protocol::looks_like_header;
///
/// assert!(looks_like_header(b"PROXY TCP4 "));
/// assert!(looks_like_header(b"\r\n\r\n\0\r"));
/// assert!(!looks_like_header(b"GET / HTTP/1.1\r\n"));
/// assert!(!looks_like_header(b""));
/// ```
#[must_use]
pub fn looks_like_header(first: &[u8]) -> bool {
    !first.is_empty()
        && matches!(
            classify(first),
            Signature::V1 | Signature::V2 | Signature::Partial
        )
}

/// A v1 header line for a TCP connection from `source` to `destination`: `TCP4` if both
/// are IPv4, otherwise `TCP6` with any IPv4 address written IPv4-mapped (`::ffff:a.b.c.d`).
///
/// # Examples
/// ```
/// use tollgate::listeners::proxy_protocol::encode_v1;
///
/// let line = encode_v1("203.0.113.7:51234".parse().unwrap(), "192.0.2.1:443".parse().unwrap());
/// assert_eq!(line, b"PROXY TCP4 203.0.113.7 192.0.2.1 51234 443\r\n");
/// ```
#[must_use]
pub fn encode_v1(source: SocketAddr, destination: SocketAddr) -> Vec<u8> {
    let line = match same_family(source, destination) {
        Pair::V4(s, d) => format!(
            "PROXY TCP4 {} {} {} {}\r\n",
            s.ip(),
            d.ip(),
            s.port(),
            d.port()
        ),
        Pair::V6(s, d) => format!(
            "PROXY TCP6 {} {} {} {}\r\n",
            s.ip(),
            d.ip(),
            s.port(),
            d.port()
        ),
    };
    line.into_bytes()
}

/// A v2 PROXY-command header for `transport` (STREAM or DGRAM), INET if both addresses
/// are IPv4, otherwise INET6 with any IPv4 address IPv4-mapped. No TLVs.
///
/// # Examples
/// ```
/// use tollgate::listeners::proxy_protocol::{encode_v2, V2Transport};
///
/// let header = encode_v2(
///     "203.0.113.7:51234".parse().unwrap(),
///     "192.0.2.1:443".parse().unwrap(),
///     V2Transport::Stream,
/// );
/// assert_eq!(header.len(), 16 + 12);
/// assert_eq!(header[12..16], [0x21, 0x11, 0, 12]);
/// ```
#[must_use]
pub fn encode_v2(source: SocketAddr, destination: SocketAddr, transport: V2Transport) -> Vec<u8> {
    let transport = match transport {
        V2Transport::Stream => 0x01,
        V2Transport::Datagram => 0x02,
    };
    let mut out = Vec::with_capacity(V2_FIXED_LEN + 36);
    out.extend_from_slice(V2_SIGNATURE);
    out.push(0x21); // version 2, command PROXY
    match same_family(source, destination) {
        Pair::V4(s, d) => {
            out.extend_from_slice(&[0x10 | transport, 0, 12]);
            out.extend_from_slice(&s.ip().octets());
            out.extend_from_slice(&d.ip().octets());
            out.extend_from_slice(&s.port().to_be_bytes());
            out.extend_from_slice(&d.port().to_be_bytes());
        }
        Pair::V6(s, d) => {
            out.extend_from_slice(&[0x20 | transport, 0, 36]);
            out.extend_from_slice(&s.ip().octets());
            out.extend_from_slice(&d.ip().octets());
            out.extend_from_slice(&s.port().to_be_bytes());
            out.extend_from_slice(&d.port().to_be_bytes());
        }
    }
    out
}

/// How far the first bytes go towards a signature.
enum Signature {
    /// The whole v1 signature is there.
    V1,
    /// The whole v2 signature is there.
    V2,
    /// A prefix of one of them (the empty slice included): read more to decide.
    Partial,
    /// Neither.
    None,
}

fn classify(first: &[u8]) -> Signature {
    let matches = |signature: &[u8]| {
        let n = first.len().min(signature.len());
        first[..n] == signature[..n]
    };
    if matches(V2_SIGNATURE) {
        if first.len() >= V2_SIGNATURE.len() {
            Signature::V2
        } else {
            Signature::Partial
        }
    } else if matches(V1_SIGNATURE) {
        if first.len() >= V1_SIGNATURE.len() {
            Signature::V1
        } else {
            Signature::Partial
        }
    } else {
        Signature::None
    }
}

/// One read into `buf`, never past `limit` bytes in all; the end of the stream is
/// [`HeaderError::Truncated`]. The caller makes sure `buf.len() < limit`.
async fn fill<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    limit: usize,
) -> Result<(), HeaderError> {
    let old = buf.len();
    debug_assert!(
        old < limit,
        "a read into no room would look like the end of the stream"
    );
    buf.resize(limit.max(old), 0);
    let n = reader.read(&mut buf[old..]).await?;
    buf.truncate(old + n);
    if n == 0 {
        return Err(HeaderError::Truncated { read: old });
    }
    Ok(())
}

/// Reads up to the CRLF (at most [`MAX_V1_LEN`] bytes) and parses the line.
async fn read_v1<R: AsyncRead + Unpin>(
    reader: &mut R,
    mut buf: Vec<u8>,
) -> Result<(Header, Vec<u8>), HeaderError> {
    let end = loop {
        // The first CR must end the line: the spec's lines contain no other.
        if let Some(cr) = buf.iter().position(|&b| b == b'\r') {
            if cr + 1 < buf.len() {
                if buf[cr + 1] != b'\n' {
                    return Err(HeaderError::Invalid(format!(
                        "v1 line {} has a CR not followed by LF",
                        escaped(&buf[..cr + 2])
                    )));
                }
                // Within MAX_V1_LEN, as `buf` never grows past it.
                break cr + 2;
            }
        }
        if buf.len() >= MAX_V1_LEN {
            return Err(HeaderError::TooLong { length: buf.len() });
        }
        fill(reader, &mut buf, MAX_V1_LEN).await?;
    };
    let line = &buf[..end];
    let parsed = ppp::v1::Header::try_from(line)
        .map_err(|err| HeaderError::Invalid(format!("v1 line {}: {err}", escaped(line))))?;
    let header = match parsed.addresses {
        ppp::v1::Addresses::Unknown => Header::Local,
        ppp::v1::Addresses::Tcp4(a) => Header::Proxied {
            source: SocketAddrV4::new(a.source_address, a.source_port).into(),
            destination: SocketAddrV4::new(a.destination_address, a.destination_port).into(),
        },
        ppp::v1::Addresses::Tcp6(a) => Header::Proxied {
            source: SocketAddrV6::new(a.source_address, a.source_port, 0, 0).into(),
            destination: SocketAddrV6::new(a.destination_address, a.destination_port, 0, 0).into(),
        },
    };
    Ok((header, buf.split_off(end)))
}

/// Reads the fixed part, then exactly the announced length, and parses the header.
async fn read_v2<R: AsyncRead + Unpin>(
    reader: &mut R,
    mut buf: Vec<u8>,
) -> Result<(Header, Vec<u8>), HeaderError> {
    while buf.len() < V2_FIXED_LEN {
        fill(reader, &mut buf, V2_FIXED_LEN).await?;
    }
    let total = V2_FIXED_LEN + usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    if total > MAX_V2_LEN {
        return Err(HeaderError::TooLong { length: total });
    }
    while buf.len() < total {
        fill(reader, &mut buf, total).await?;
    }
    let parsed = ppp::v2::Header::try_from(&buf[..total]).map_err(|err| {
        HeaderError::Invalid(format!(
            "v2 header (version/command 0x{:02x}, family/transport 0x{:02x}, length {}): {err}",
            buf[12],
            buf[13],
            total - V2_FIXED_LEN
        ))
    })?;
    let header = match (parsed.command, parsed.addresses, parsed.protocol) {
        // LOCAL: the peer speaks for itself; the spec says to ignore the address block.
        (Command::Local, _, _) => Header::Local,
        (Command::Proxy, Addresses::Unspecified, Protocol::Unspecified) => Header::Local,
        (Command::Proxy, Addresses::IPv4(a), Protocol::Stream | Protocol::Datagram) => {
            Header::Proxied {
                source: SocketAddrV4::new(a.source_address, a.source_port).into(),
                destination: SocketAddrV4::new(a.destination_address, a.destination_port).into(),
            }
        }
        (Command::Proxy, Addresses::IPv6(a), Protocol::Stream | Protocol::Datagram) => {
            Header::Proxied {
                source: SocketAddrV6::new(a.source_address, a.source_port, 0, 0).into(),
                destination: SocketAddrV6::new(a.destination_address, a.destination_port, 0, 0)
                    .into(),
            }
        }
        // AF_UNIX is valid but has no socket address here: the spec's UNSPEC fallback.
        (Command::Proxy, Addresses::Unix(_), Protocol::Stream | Protocol::Datagram) => {
            Header::Local
        }
        // The spec lists only the combinations above; others "must be rejected".
        (Command::Proxy, _, _) => {
            return Err(HeaderError::Invalid(format!(
                "v2 family/transport byte 0x{:02x} is not a combination the spec allows",
                buf[13]
            )));
        }
    };
    Ok((header, buf.split_off(total)))
}

/// Both addresses in one family, IPv4 mapped into IPv6 when they differ.
enum Pair {
    V4(SocketAddrV4, SocketAddrV4),
    V6(SocketAddrV6, SocketAddrV6),
}

fn same_family(source: SocketAddr, destination: SocketAddr) -> Pair {
    match (source, destination) {
        (SocketAddr::V4(s), SocketAddr::V4(d)) => Pair::V4(s, d),
        _ => Pair::V6(as_v6(source), as_v6(destination)),
    }
}

fn as_v6(address: SocketAddr) -> SocketAddrV6 {
    let ip: Ipv6Addr = match address.ip() {
        IpAddr::V4(ip) => ip.to_ipv6_mapped(),
        IpAddr::V6(ip) => ip,
    };
    SocketAddrV6::new(ip, address.port(), 0, 0)
}

/// Header bytes for an error message: quoted, non-printable bytes escaped.
fn escaped(bytes: &[u8]) -> String {
    format!("\"{}\"", bytes.escape_ascii())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `read_header` returns.
    type Outcome = Result<(Header, Vec<u8>), HeaderError>;

    /// Reads a header from `first` then `second`, each delivered by its own read (a header
    /// split across TCP segments); also returns the bytes left unread.
    fn parse_split(first: &[u8], second: &[u8]) -> (Outcome, Vec<u8>) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a current-thread runtime");
        let mut reader = first.chain(second);
        let outcome = runtime.block_on(read_header(&mut reader));
        let (first, second) = reader.into_inner();
        (outcome, [first, second].concat())
    }

    /// Reads a header from `bytes`, delivered in as few reads as the reader allows.
    fn parse(bytes: &[u8]) -> (Outcome, Vec<u8>) {
        parse_split(bytes, b"")
    }

    fn addr(text: &str) -> SocketAddr {
        text.parse().expect("a socket address")
    }

    fn proxied(source: &str, destination: &str) -> Header {
        Header::Proxied {
            source: addr(source),
            destination: addr(destination),
        }
    }

    /// A v2 PROXY/STREAM/INET header from 203.0.113.7:51234 to 192.0.2.1:443 with one
    /// NOOP TLV of `tlv` value bytes, written out from the spec.
    fn v2_inet_with_tlv(tlv: usize) -> Vec<u8> {
        let length = 12 + 3 + tlv;
        let mut out = V2_SIGNATURE.to_vec();
        out.extend_from_slice(&[0x21, 0x11]);
        out.extend_from_slice(&u16::try_from(length).expect("fits").to_be_bytes());
        out.extend_from_slice(&[203, 0, 113, 7, 192, 0, 2, 1]);
        out.extend_from_slice(&51234_u16.to_be_bytes());
        out.extend_from_slice(&443_u16.to_be_bytes());
        out.push(0x04); // PP2_TYPE_NOOP
        out.extend_from_slice(&u16::try_from(tlv).expect("fits").to_be_bytes());
        out.resize(out.len() + tlv, 0);
        out
    }

    #[test]
    fn a_v1_line_gives_its_addresses_and_the_payload_after_it() {
        let (outcome, unread) = parse(b"PROXY TCP4 203.0.113.7 192.0.2.1 51234 443\r\nGET /");
        let (header, leftover) = outcome.expect("a valid line");
        assert_eq!(header, proxied("203.0.113.7:51234", "192.0.2.1:443"));
        assert_eq!([leftover, unread].concat(), b"GET /");
    }

    #[test]
    fn a_v1_line_split_right_after_its_cr_is_read_whole() {
        let (outcome, unread) = parse_split(
            b"PROXY TCP6 2001:db8::7 2001:db8::1 51234 443\r",
            b"\nGET /",
        );
        let (header, leftover) = outcome.expect("a valid line in two reads");
        assert_eq!(header, proxied("[2001:db8::7]:51234", "[2001:db8::1]:443"));
        assert_eq!([leftover, unread].concat(), b"GET /");
    }

    /// The longest line the spec allows (107 bytes) is read; one byte more is refused
    /// after 107 bytes, however the peer goes on.
    #[test]
    fn a_v1_line_is_refused_past_107_bytes() {
        let full = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";
        let longest = format!("PROXY UNKNOWN {full} {full} 65535 65535\r\n");
        assert_eq!(longest.len(), MAX_V1_LEN);
        let (outcome, _) = parse(longest.as_bytes());
        assert_eq!(outcome.expect("the longest line").0, Header::Local);

        let too_long = format!("PROXY UNKNOWN {full} {full} 65535 655350\r\n");
        let (outcome, _) = parse(too_long.as_bytes());
        assert!(
            matches!(outcome, Err(HeaderError::TooLong { length: MAX_V1_LEN })),
            "{outcome:?}"
        );
    }

    #[test]
    fn a_v1_cr_without_lf_is_refused_and_quoted() {
        let (outcome, _) = parse(b"PROXY TCP4 1\rX 192.0.2.1 51234 443\r\n");
        match outcome {
            Err(HeaderError::Invalid(why)) => {
                assert!(why.contains("\"PROXY TCP4 1\\rX\""), "{why}")
            }
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn a_v2_header_is_read_exactly_even_split_inside_its_fixed_part() {
        let header = v2_inet_with_tlv(5);
        let (outcome, unread) = parse_split(&header[..12], &[&header[12..], b"GET /"].concat());
        let (parsed, leftover) = outcome.expect("a valid v2 header");
        assert_eq!(parsed, proxied("203.0.113.7:51234", "192.0.2.1:443"));
        assert!(leftover.is_empty(), "v2 reads no payload: {leftover:?}");
        assert_eq!(unread, b"GET /");
    }

    /// 16 + 1024 bytes is read; 16 + 1025 is refused before anything past the fixed part.
    #[test]
    fn a_v2_header_is_refused_past_1040_bytes() {
        let longest = v2_inet_with_tlv(1024 - 15);
        assert_eq!(longest.len(), MAX_V2_LEN);
        let (outcome, unread) = parse(&longest);
        assert_eq!(
            outcome.expect("the longest header").0,
            proxied("203.0.113.7:51234", "192.0.2.1:443")
        );
        assert!(unread.is_empty());

        let too_long = v2_inet_with_tlv(1025 - 15);
        let (outcome, unread) = parse(&too_long);
        assert!(
            matches!(outcome, Err(HeaderError::TooLong { length }) if length == MAX_V2_LEN + 1),
            "{outcome:?}"
        );
        assert_eq!(unread.len(), too_long.len() - V2_FIXED_LEN);
    }

    #[test]
    fn the_encoders_round_trip_with_families_kept_or_mapped() {
        let cases = [
            (
                "203.0.113.7:51234",
                "192.0.2.1:443",
                "203.0.113.7:51234",
                "192.0.2.1:443",
            ),
            (
                "[2001:db8::7]:51234",
                "[2001:db8::1]:443",
                "[2001:db8::7]:51234",
                "[2001:db8::1]:443",
            ),
            (
                "203.0.113.7:51234",
                "[2001:db8::1]:443",
                "[::ffff:203.0.113.7]:51234",
                "[2001:db8::1]:443",
            ),
        ];
        for (source, destination, want_source, want_destination) in cases {
            let want = proxied(want_source, want_destination);
            let v1 = encode_v1(addr(source), addr(destination));
            assert_eq!(parse(&v1).0.expect("our v1").0, want, "{}", escaped(&v1));
            for transport in [V2Transport::Stream, V2Transport::Datagram] {
                let v2 = encode_v2(addr(source), addr(destination), transport);
                assert_eq!(parse(&v2).0.expect("our v2").0, want, "{}", escaped(&v2));
            }
        }
        assert_eq!(
            encode_v1(addr("203.0.113.7:51234"), addr("192.0.2.1:443")),
            b"PROXY TCP4 203.0.113.7 192.0.2.1 51234 443\r\n"
        );
    }

    #[test]
    fn the_v2_encoder_says_family_and_transport() {
        let v4 = (addr("203.0.113.7:1"), addr("192.0.2.1:2"));
        let v6 = (addr("[2001:db8::7]:1"), addr("[2001:db8::1]:2"));
        assert_eq!(
            encode_v2(v4.0, v4.1, V2Transport::Stream)[12..16],
            [0x21, 0x11, 0, 12]
        );
        assert_eq!(encode_v2(v4.0, v4.1, V2Transport::Datagram)[13], 0x12);
        assert_eq!(
            encode_v2(v6.0, v6.1, V2Transport::Stream)[12..16],
            [0x21, 0x21, 0, 36]
        );
        assert_eq!(encode_v2(v6.0, v6.1, V2Transport::Datagram)[13], 0x22);
    }

    #[test]
    fn only_a_signature_prefix_looks_like_a_header() {
        assert!(!looks_like_header(b""));
        assert!(!looks_like_header(b"GET / HTTP/1.1\r\n"));
        assert!(looks_like_header(b"P"));
        assert!(looks_like_header(b"PROXY TCP4 "));
        assert!(looks_like_header(V2_SIGNATURE));
        assert!(matches!(
            parse(b"GET / HTTP/1.1\r\n").0,
            Err(HeaderError::NotProxy)
        ));
    }

    #[test]
    fn errors_say_what_went_wrong_and_keep_their_cause() {
        use std::error::Error as _;
        assert!(matches!(
            parse(b"PROXY TCP4 ").0,
            Err(HeaderError::Truncated { read: 11 })
        ));
        let too_long = HeaderError::TooLong { length: 2000 };
        assert!(too_long.to_string().contains("2000 bytes"), "{too_long}");
        assert!(too_long.source().is_none());
        let io = HeaderError::from(std::io::Error::other("reset"));
        assert!(io.to_string().contains("reset"), "{io}");
        assert!(io.source().is_some());
    }
}
