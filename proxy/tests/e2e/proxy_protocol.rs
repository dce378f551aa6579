//! PROXY protocol headers as peers send them: whole, in pieces, cut short, malformed, and
//! round-tripped through our encoders.
//!
//! The v2 samples are written out byte by byte from the spec, not made by `encode_v2`, so
//! the decoder is checked against the spec and the encoders against the decoder.

use std::future::Future;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};

use proptest::prelude::*;
use tokio::io::{AsyncRead, ReadBuf};
use tollgate::listeners::proxy_protocol::*;

const V2_SIGNATURE: &[u8] = b"\r\n\r\n\0\r\nQUIT\n";

thread_local! {
    static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime");
}

/// What `read_header` returns.
type Outcome = Result<(Header, Vec<u8>), HeaderError>;

/// Runs `future` on this thread's runtime (proptest cases are too many to build one each).
fn block_on<F: Future>(future: F) -> F::Output {
    RUNTIME.with(|runtime| runtime.block_on(future))
}

/// Reads a header from `bytes` in as few reads as the reader allows; also returns the bytes
/// it left unread.
fn parse(bytes: &[u8]) -> (Outcome, Vec<u8>) {
    let mut reader = bytes;
    let result = block_on(read_header(&mut reader));
    (result, reader.to_vec())
}

/// Reads a header from `bytes` one byte per read, with a `Pending` between reads.
fn parse_trickled(bytes: &[u8]) -> (Outcome, Vec<u8>) {
    let mut reader = Trickle {
        data: bytes.to_vec(),
        pos: 0,
        pending_next: true,
    };
    let result = block_on(read_header(&mut reader));
    (result, reader.data[reader.pos..].to_vec())
}

/// An `AsyncRead` that alternates `Pending` (after waking itself) with one-byte reads.
struct Trickle {
    data: Vec<u8>,
    pos: usize,
    pending_next: bool,
}

impl AsyncRead for Trickle {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.pending_next {
            this.pending_next = false;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        this.pending_next = true;
        if let Some(&byte) = this.data.get(this.pos) {
            if buf.remaining() > 0 {
                buf.put_slice(&[byte]);
                this.pos += 1;
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// An `AsyncRead` whose reads fail.
struct Broken;

impl AsyncRead for Broken {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Poll::Ready(Err(io::Error::new(io::ErrorKind::ConnectionReset, "reset")))
    }
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

/// A v2 header: signature, the two command/family bytes, the length, then `body`.
fn v2(version_command: u8, family_transport: u8, body: &[u8]) -> Vec<u8> {
    let mut out = V2_SIGNATURE.to_vec();
    out.push(version_command);
    out.push(family_transport);
    out.extend_from_slice(&u16::try_from(body.len()).expect("short body").to_be_bytes());
    out.extend_from_slice(body);
    out
}

fn v2_ipv4_body() -> Vec<u8> {
    // 192.0.2.1:56324 -> 198.51.100.2:443
    vec![192, 0, 2, 1, 198, 51, 100, 2, 0xdc, 0x04, 0x01, 0xbb]
}

fn v2_ipv6_body() -> Vec<u8> {
    // [2001:db8::1]:56324 -> [2001:db8::2]:443
    let mut body = Vec::new();
    body.extend_from_slice(&"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
    body.extend_from_slice(&"2001:db8::2".parse::<Ipv6Addr>().unwrap().octets());
    body.extend_from_slice(&[0xdc, 0x04, 0x01, 0xbb]);
    body
}

/// Every valid sample, with the header it must give.
fn valid_samples() -> Vec<(Vec<u8>, Header)> {
    let v4 = proxied("192.0.2.1:56324", "198.51.100.2:443");
    let v6 = proxied("[2001:db8::1]:56324", "[2001:db8::2]:443");
    let mut with_tlvs = v2_ipv4_body();
    with_tlvs.extend_from_slice(&[0x01, 0, 2, b'h', b'2']); // ALPN "h2"
    with_tlvs.extend_from_slice(&[0x04, 0, 3, 0, 0, 0]); // NOOP
    let worst_v1 = "PROXY UNKNOWN ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff \
                    ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
    assert_eq!(worst_v1.len(), 107, "the spec's longest line");
    let longest_v6 = "PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff \
                      ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
    let all_ones = "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535";
    vec![
        (
            b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\n".to_vec(),
            v4,
        ),
        (
            b"PROXY TCP6 2001:db8::1 2001:db8::2 56324 443\r\n".to_vec(),
            v6,
        ),
        (
            b"PROXY TCP6 ::ffff:192.0.2.1 2001:db8::2 56324 443\r\n".to_vec(),
            proxied("[::ffff:192.0.2.1]:56324", "[2001:db8::2]:443"),
        ),
        (longest_v6.as_bytes().to_vec(), proxied(all_ones, all_ones)),
        (b"PROXY UNKNOWN\r\n".to_vec(), Header::Local),
        (worst_v1.as_bytes().to_vec(), Header::Local),
        (v2(0x21, 0x11, &v2_ipv4_body()), v4),
        (v2(0x21, 0x12, &v2_ipv4_body()), v4),
        (v2(0x21, 0x21, &v2_ipv6_body()), v6),
        (v2(0x21, 0x22, &v2_ipv6_body()), v6),
        (v2(0x21, 0x11, &with_tlvs), v4),
        // LOCAL, bare and with an address block the receiver must ignore.
        (v2(0x20, 0x00, &[]), Header::Local),
        (v2(0x20, 0x11, &v2_ipv4_body()), Header::Local),
        // PROXY with UNSPEC family: use the connection's addresses.
        (v2(0x21, 0x00, &[]), Header::Local),
        // AF_UNIX: valid, but no socket address to give: falls back to UNSPEC.
        (v2(0x21, 0x31, &[0; 216]), Header::Local),
        // The largest body we accept.
        (v2(0x21, 0x11, &padded(v2_ipv4_body(), 1024)), v4),
    ]
}

/// `body` followed by one NOOP TLV that brings it to `len` bytes.
fn padded(mut body: Vec<u8>, len: usize) -> Vec<u8> {
    let value = len - body.len() - 3;
    body.push(0x04);
    body.extend_from_slice(&u16::try_from(value).unwrap().to_be_bytes());
    body.resize(len, 0);
    body
}

#[test]
fn valid_headers_decode() {
    for (bytes, expected) in valid_samples() {
        let (result, rest) = parse(&bytes);
        let (header, leftover) =
            result.unwrap_or_else(|e| panic!("{:?}: {e}", bytes.escape_ascii().to_string()));
        assert_eq!(header, expected, "{}", bytes.escape_ascii());
        assert!(leftover.is_empty() && rest.is_empty());
    }
}

#[test]
fn payload_after_the_header_is_returned_exactly() {
    let payload = b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n";
    for (mut bytes, expected) in valid_samples() {
        let is_v1 = bytes.starts_with(b"PROXY ");
        bytes.extend_from_slice(payload);
        let (result, rest) = parse(&bytes);
        let (header, leftover) = result.expect("valid");
        assert_eq!(header, expected);
        if !is_v1 {
            // v2 is read exactly: the payload stays in the stream.
            assert!(leftover.is_empty());
        }
        // v1 may read past its CRLF: what it read comes back, the rest is still unread.
        assert_eq!(
            [leftover, rest].concat(),
            payload,
            "{}",
            bytes.escape_ascii()
        );
    }
}

#[test]
fn a_header_in_one_byte_pieces_gives_the_same_result() {
    let payload = b"\x16\x03\x01 hello";
    for (mut bytes, expected) in valid_samples() {
        bytes.extend_from_slice(payload);
        let (result, rest) = parse_trickled(&bytes);
        let (header, mut leftover) = result.expect("valid");
        assert_eq!(header, expected, "{}", bytes.escape_ascii());
        leftover.extend_from_slice(&rest);
        assert_eq!(leftover, payload);
    }
}

#[test]
fn a_stream_that_ends_mid_header_is_truncated_with_the_count() {
    let cases: Vec<(Vec<u8>, usize)> = vec![
        (Vec::new(), 0),
        (b"PRO".to_vec(), 3),
        (b"PROXY TCP4 192.0.2.1".to_vec(), 20),
        (b"PROXY UNKNOWN\r".to_vec(), 14),
        (V2_SIGNATURE[..7].to_vec(), 7),
        (v2(0x21, 0x11, &v2_ipv4_body())[..15].to_vec(), 15),
        (v2(0x21, 0x11, &v2_ipv4_body())[..21].to_vec(), 21),
    ];
    for (bytes, read) in cases {
        for (result, _) in [parse(&bytes), parse_trickled(&bytes)] {
            match result {
                Err(HeaderError::Truncated { read: got }) => assert_eq!(got, read),
                other => panic!("{}: {other:?}", bytes.escape_ascii()),
            }
        }
    }
    let error = parse(b"PROXY TCP4").0.unwrap_err();
    assert!(error.to_string().contains("after 10 bytes"), "{error}");
}

#[test]
fn other_protocols_are_not_proxy() {
    let cases: [&[u8]; 7] = [
        b"GET / HTTP/1.1\r\n\r\n",
        b"SSH-2.0-OpenSSH_9.6\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
        b"PROXX TCP4",
        b"proxy TCP4 192.0.2.1 198.51.100.2 56324 443\r\n",
        b"PROXYTCP4",
        b"\r\n\r\n\0\r\nQUIX\n",
    ];
    for bytes in cases {
        let error = parse(bytes).0.unwrap_err();
        assert!(
            matches!(error, HeaderError::NotProxy),
            "{}: {error:?}",
            bytes.escape_ascii()
        );
    }
}

#[test]
fn headers_over_the_limits_are_too_long() {
    let mut no_crlf = b"PROXY UNKNOWN ".to_vec();
    no_crlf.resize(300, b'a');
    // One byte over: the CRLF ends at byte 108.
    let mut line_108 = b"PROXY UNKNOWN ".to_vec();
    line_108.resize(106, b'a');
    line_108.extend_from_slice(b"\r\n");
    let cases = [
        (no_crlf, 107),
        (line_108, 107),
        (v2(0x21, 0x11, &padded(v2_ipv4_body(), 1025)), 16 + 1025),
        (v2(0x21, 0x11, &padded(v2_ipv4_body(), 65535)), 16 + 65535),
    ];
    for (bytes, length) in cases {
        for (result, _) in [parse(&bytes), parse_trickled(&bytes)] {
            match result {
                Err(HeaderError::TooLong { length: got }) => assert_eq!(got, length),
                other => panic!("{}: {other:?}", bytes.escape_ascii()),
            }
        }
    }
    // The cap is checked before the body is read: the announced length alone decides.
    let announced = &v2(0x21, 0x11, &padded(v2_ipv4_body(), 2000))[..16];
    assert!(matches!(
        parse(announced).0,
        Err(HeaderError::TooLong { length: 2016 })
    ));
}

#[test]
fn malformed_headers_are_invalid_and_say_why() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            b"PROXY TCP4 192.0.2.256 198.51.100.2 56324 443\r\n".to_vec(),
            "192.0.2.256",
        ),
        (
            b"PROXY TCP4 192.0.2.1 198.51.100.2 99999 443\r\n".to_vec(),
            "99999",
        ),
        (
            b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 0443\r\n".to_vec(),
            "0443",
        ),
        (
            b"PROXY TCP4 2001:db8::1 2001:db8::2 1 2\r\n".to_vec(),
            "TCP4",
        ),
        (b"PROXY TCP4 192.0.2.1 198.51.100.2 1\r\n".to_vec(), "TCP4"),
        (
            b"PROXY TCP4 192.0.2.1 198.51.100.2 1 2 3\r\n".to_vec(),
            "TCP4",
        ),
        (
            b"PROXY TCP5 192.0.2.1 198.51.100.2 1 2\r\n".to_vec(),
            "TCP5",
        ),
        (
            b"PROXY tcp4 192.0.2.1 198.51.100.2 1 2\r\n".to_vec(),
            "tcp4",
        ),
        (b"PROXY \r\n".to_vec(), "PROXY"),
        (
            b"PROXY TCP4 192.0.2.1 198.51.100.2 1 2\rX\r\n".to_vec(),
            "CR not followed by LF",
        ),
        (b"PROXY TCP4 \xff\xfe 1 2\r\n".to_vec(), "\\xff"),
        // Version nibble 1, then 3.
        (v2(0x11, 0x11, &v2_ipv4_body()), "0x11"),
        (v2(0x31, 0x11, &v2_ipv4_body()), "0x31"),
        // Commands other than LOCAL (0) and PROXY (1).
        (v2(0x22, 0x11, &v2_ipv4_body()), "0x22"),
        (v2(0x2f, 0x11, &v2_ipv4_body()), "0x2f"),
        // Family 4 and transport 3 do not exist.
        (v2(0x21, 0x41, &v2_ipv4_body()), "0x41"),
        (v2(0x21, 0x13, &v2_ipv4_body()), "0x13"),
        // Combinations the spec does not list.
        (v2(0x21, 0x10, &v2_ipv4_body()), "0x10"),
        (v2(0x21, 0x01, &v2_ipv4_body()), "0x01"),
        // An INET body too short for its addresses.
        (v2(0x21, 0x11, &v2_ipv4_body()[..8]), "length 8"),
        (v2(0x21, 0x21, &v2_ipv4_body()), "length 12"),
    ];
    for (bytes, named) in cases {
        for (result, _) in [parse(&bytes), parse_trickled(&bytes)] {
            match result {
                Err(error @ HeaderError::Invalid(_)) => {
                    let message = error.to_string();
                    assert!(message.contains(named), "{message} should name {named}");
                }
                other => panic!("{}: {other:?}", bytes.escape_ascii()),
            }
        }
    }
}

#[test]
fn read_errors_are_io() {
    let error = block_on(read_header(&mut Broken)).unwrap_err();
    assert!(matches!(&error, HeaderError::Io(e) if e.kind() == io::ErrorKind::ConnectionReset));
    assert!(std::error::Error::source(&error).is_some());
}

#[test]
fn encoders_write_what_the_spec_shows() {
    let (s4, d4) = (addr("192.0.2.1:56324"), addr("198.51.100.2:443"));
    let (s6, d6) = (addr("[2001:db8::1]:56324"), addr("[2001:db8::2]:443"));
    assert_eq!(
        encode_v1(s4, d4),
        b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\n"
    );
    assert_eq!(
        encode_v1(s6, d6),
        b"PROXY TCP6 2001:db8::1 2001:db8::2 56324 443\r\n"
    );
    assert_eq!(
        encode_v1(s4, d6),
        b"PROXY TCP6 ::ffff:192.0.2.1 2001:db8::2 56324 443\r\n"
    );
    assert_eq!(
        encode_v2(s4, d4, V2Transport::Stream),
        v2(0x21, 0x11, &v2_ipv4_body())
    );
    assert_eq!(
        encode_v2(s4, d4, V2Transport::Datagram),
        v2(0x21, 0x12, &v2_ipv4_body())
    );
    assert_eq!(
        encode_v2(s6, d6, V2Transport::Stream),
        v2(0x21, 0x21, &v2_ipv6_body())
    );
    assert_eq!(
        encode_v2(s6, d6, V2Transport::Datagram),
        v2(0x21, 0x22, &v2_ipv6_body())
    );
    let mixed = encode_v2(d6, s4, V2Transport::Stream);
    assert_eq!(mixed[13], 0x21);
    assert_eq!(
        mixed[16 + 16..16 + 32],
        Ipv4Addr::new(192, 0, 2, 1).to_ipv6_mapped().octets()
    );
}

#[test]
fn looks_like_header_accepts_every_signature_prefix() {
    let (source, destination) = (addr("192.0.2.1:1"), addr("[2001:db8::2]:2"));
    let mut whole: Vec<Vec<u8>> = valid_samples()
        .into_iter()
        .map(|(bytes, _)| bytes)
        .collect();
    whole.push(encode_v1(source, destination));
    whole.push(encode_v2(source, destination, V2Transport::Datagram));
    for bytes in &whole {
        for end in 1..=bytes.len() {
            assert!(
                looks_like_header(&bytes[..end]),
                "{}",
                bytes[..end].escape_ascii()
            );
        }
    }
    for signature in [&b"PROXY "[..], V2_SIGNATURE] {
        for end in 1..=signature.len() {
            assert!(looks_like_header(&signature[..end]));
        }
    }
}

#[test]
fn looks_like_header_refuses_other_protocols_and_nothing() {
    let cases: [&[u8]; 8] = [
        b"",
        b"GET / HTTP/1.1\r\n",
        b"POST /",
        b"SSH-2.0-OpenSSH_9.6\r\n",
        b"\x16\x03\x01\x02\x00\x01",
        b"PROXYTCP4",
        b"\r\n\r\nGET",
        b"\r\n\r\n\0\r\nQUIT\r",
    ];
    for bytes in cases {
        assert!(!looks_like_header(bytes), "{}", bytes.escape_ascii());
    }
}

/// IPv4 and IPv6 socket addresses, with IPv6 ones often holding zero runs (written `::`)
/// or IPv4-mapped.
fn socket_addr() -> impl Strategy<Value = SocketAddr> {
    let ipv6_groups = prop::array::uniform8(prop_oneof![Just(0u16), any::<u16>()]);
    prop_oneof![
        (any::<[u8; 4]>(), any::<u16>())
            .prop_map(|(ip, port)| SocketAddr::from((Ipv4Addr::from(ip), port))),
        (any::<[u8; 16]>(), any::<u16>())
            .prop_map(|(ip, port)| SocketAddr::from((Ipv6Addr::from(ip), port))),
        (ipv6_groups, any::<u16>())
            .prop_map(|(ip, port)| SocketAddr::from((Ipv6Addr::from(ip), port))),
        (any::<[u8; 4]>(), any::<u16>())
            .prop_map(|(ip, port)| SocketAddr::from((Ipv4Addr::from(ip).to_ipv6_mapped(), port))),
    ]
}

/// What a header for `source` -> `destination` says: IPv4 stays IPv4 only if both are.
fn expected(source: SocketAddr, destination: SocketAddr) -> Header {
    let as_v6 = |a: SocketAddr| match a {
        SocketAddr::V4(v4) => SocketAddr::from((v4.ip().to_ipv6_mapped(), v4.port())),
        v6 => v6,
    };
    if source.is_ipv4() && destination.is_ipv4() {
        Header::Proxied {
            source,
            destination,
        }
    } else {
        Header::Proxied {
            source: as_v6(source),
            destination: as_v6(destination),
        }
    }
}

/// Input that reaches every stage: no signature, either signature, v2 with a valid
/// version byte, each followed by arbitrary bytes.
fn arbitrary_input() -> impl Strategy<Value = Vec<u8>> {
    let start = prop_oneof![
        Just(Vec::new()),
        Just(b"PROXY ".to_vec()),
        Just(b"PROXY TCP4 ".to_vec()),
        Just(V2_SIGNATURE.to_vec()),
        Just([V2_SIGNATURE, &[0x21]].concat()),
        Just([V2_SIGNATURE, &[0x21, 0x11, 0x00]].concat()),
    ];
    let rest = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..200),
        // Text-like bytes, so v1 lines get past UTF-8 and field splitting.
        prop::collection::vec(
            prop::sample::select(b"0123456789abcdef.: \r\nTCP46UNKOWX".to_vec()),
            0..120
        ),
    ];
    (start, rest).prop_map(|(start, rest)| [start, rest].concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in arbitrary_input(), trickle in any::<bool>()) {
        let (result, rest) = if trickle { parse_trickled(&bytes) } else { parse(&bytes) };
        if let Ok((_, leftover)) = result {
            // What was not the header is handed back or left unread, in order.
            prop_assert!(bytes.ends_with(&[leftover, rest].concat()));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn v1_round_trips(
        source in socket_addr(),
        destination in socket_addr(),
        payload in prop::collection::vec(any::<u8>(), 0..200),
        trickle in any::<bool>(),
    ) {
        let bytes = [encode_v1(source, destination), payload.clone()].concat();
        let (result, rest) = if trickle { parse_trickled(&bytes) } else { parse(&bytes) };
        let (header, leftover) = result.map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(header, expected(source, destination));
        prop_assert_eq!([leftover, rest].concat(), payload);
    }

    #[test]
    fn v2_round_trips(
        source in socket_addr(),
        destination in socket_addr(),
        datagram in any::<bool>(),
        payload in prop::collection::vec(any::<u8>(), 0..200),
        trickle in any::<bool>(),
    ) {
        let transport = if datagram { V2Transport::Datagram } else { V2Transport::Stream };
        let bytes = [encode_v2(source, destination, transport), payload.clone()].concat();
        let (result, rest) = if trickle { parse_trickled(&bytes) } else { parse(&bytes) };
        let (header, leftover) = result.map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(header, expected(source, destination));
        prop_assert!(leftover.is_empty());
        prop_assert_eq!(rest, payload);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn every_truncation_is_truncated(
        source in socket_addr(),
        destination in socket_addr(),
        datagram in any::<bool>(),
    ) {
        let transport = if datagram { V2Transport::Datagram } else { V2Transport::Stream };
        for header in [encode_v1(source, destination), encode_v2(source, destination, transport)] {
            for cut in 0..header.len() {
                match parse(&header[..cut]).0 {
                    Err(HeaderError::Truncated { read }) => prop_assert_eq!(read, cut),
                    other => {
                        return Err(TestCaseError::fail(format!("cut at {cut}: {other:?}")));
                    }
                }
            }
        }
    }
}
