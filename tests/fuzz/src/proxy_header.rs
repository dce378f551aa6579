//! PROXY protocol headers: [`read_header`] on any bytes, read whole and one byte per read,
//! and [`encode_v1`] / [`encode_v2`] round-tripped through it.

use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::pin::{Pin, pin};
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, ReadBuf};
use tollgate::listeners::proxy_protocol::{
    Header, HeaderError, MAX_V1_LEN, MAX_V2_LEN, V2Transport, encode_v1, encode_v2, read_header,
};

/// What one read of a header gave, and how many bytes it took from the stream.
struct Read {
    outcome: Result<(Header, Vec<u8>), HeaderError>,
    consumed: usize,
}

/// Reads a header from `data`, handing the reader at most `chunk` bytes per read.
fn read(data: &[u8], chunk: usize) -> Read {
    let mut reader = Chunked {
        data,
        pos: 0,
        chunk,
    };
    let outcome = ready(read_header(&mut reader));
    Read {
        outcome,
        consumed: reader.pos,
    }
}

/// Runs `future` to its end with no runtime: every reader here is always ready, so one poll
/// must finish it.
fn ready<F: Future>(future: F) -> F::Output {
    let mut context = Context::from_waker(Waker::noop());
    match pin!(future).poll(&mut context) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("read_header is pending on a reader that is always ready"),
    }
}

/// A stream over `data` that returns at most `chunk` bytes per read and is always ready.
struct Chunked<'a> {
    data: &'a [u8],
    pos: usize,
    chunk: usize,
}

impl AsyncRead for Chunked<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let n = self
            .chunk
            .min(buf.remaining())
            .min(self.data.len() - self.pos);
        buf.put_slice(&self.data[self.pos..self.pos + n]);
        self.pos += n;
        Poll::Ready(Ok(()))
    }
}

/// The header a peer would send for `source` and `destination` reads back as: the same
/// addresses if both are IPv4, else both IPv6 with IPv4 addresses mapped.
fn expected(source: SocketAddr, destination: SocketAddr) -> Header {
    let v6 = |address: SocketAddr| -> SocketAddr {
        let ip = match address.ip() {
            IpAddr::V4(ip) => ip.to_ipv6_mapped(),
            IpAddr::V6(ip) => ip,
        };
        SocketAddrV6::new(ip, address.port(), 0, 0).into()
    };
    match (source, destination) {
        (SocketAddr::V4(_), SocketAddr::V4(_)) => Header::Proxied {
            source,
            destination,
        },
        _ => Header::Proxied {
            source: v6(source),
            destination: v6(destination),
        },
    }
}

/// Encodes the pair in v1 and both v2 transports and parses each back, whole and trickled.
///
/// # Panics
/// When a header we encoded does not read back as the pair it was made from, or leaves bytes
/// behind.
fn round_trip(source: SocketAddr, destination: SocketAddr) {
    let want = expected(source, destination);
    let encoded = [
        encode_v1(source, destination),
        encode_v2(source, destination, V2Transport::Stream),
        encode_v2(source, destination, V2Transport::Datagram),
    ];
    for bytes in encoded {
        for chunk in [usize::MAX, 1] {
            let got = read(&bytes, chunk);
            match got.outcome {
                Ok((header, leftover)) => {
                    assert_eq!(header, want, "encoded {:?}", bytes.escape_ascii());
                    assert!(
                        leftover.is_empty(),
                        "leftover after {:?}",
                        bytes.escape_ascii()
                    );
                    assert_eq!(got.consumed, bytes.len(), "{:?}", bytes.escape_ascii());
                }
                Err(err) => panic!(
                    "our own header {:?} for {source} -> {destination} is refused: {err}",
                    bytes.escape_ascii()
                ),
            }
        }
    }
}

/// Addresses made from the first bytes of `data` (zero-padded): the first byte picks the
/// families, then addresses and ports follow in network order.
fn addresses(data: &[u8]) -> (SocketAddr, SocketAddr) {
    let mut bytes = [0u8; 37];
    let n = data.len().min(bytes.len());
    bytes[..n].copy_from_slice(&data[..n]);
    let word = |at: usize| u16::from_be_bytes([bytes[at], bytes[at + 1]]);
    let v4 = |at: usize| {
        IpAddr::V4(Ipv4Addr::new(
            bytes[at],
            bytes[at + 1],
            bytes[at + 2],
            bytes[at + 3],
        ))
    };
    let v6 = |at: usize| {
        let mut octets = [0u8; 16];
        octets.copy_from_slice(&bytes[at..at + 16]);
        IpAddr::V6(Ipv6Addr::from(octets))
    };
    let source = if bytes[0] & 1 == 0 { v4(1) } else { v6(1) };
    let destination = if bytes[0] & 2 == 0 { v4(17) } else { v6(17) };
    (
        SocketAddr::new(source, word(33)),
        SocketAddr::new(destination, word(35)),
    )
}

/// Reads `data` as the start of a relayed connection, and round-trips addresses.
///
/// # Panics
/// When an invariant breaks: the reader takes more than [`MAX_V2_LEN`] bytes, the leftover
/// is not the bytes read past the header, a v1 line is longer than [`MAX_V1_LEN`], reading
/// one byte at a time gives another answer than reading whole, or a header (the one parsed,
/// or one made from the input's first bytes) does not survive [`encode_v1`] / [`encode_v2`]
/// and a parse back.
pub fn check(data: &[u8]) {
    let whole = read(data, usize::MAX);
    let trickled = read(data, 1);
    for got in [&whole, &trickled] {
        assert!(got.consumed <= MAX_V2_LEN, "read {} bytes", got.consumed);
        if let Ok((_, leftover)) = &got.outcome {
            let end = got.consumed;
            let start = end
                .checked_sub(leftover.len())
                .expect("the leftover was read from the stream");
            assert_eq!(
                leftover[..],
                data[start..end],
                "leftover is not what followed"
            );
            if data.starts_with(b"PROXY ") {
                assert!(start <= MAX_V1_LEN, "a v1 line of {start} bytes");
            }
        }
    }
    match (&whole.outcome, &trickled.outcome) {
        (Ok((a, _)), Ok((b, leftover))) => {
            assert_eq!(a, b, "whole and trickled reads differ");
            assert!(
                leftover.is_empty(),
                "a byte-at-a-time read overshot the header"
            );
        }
        (Err(a), Err(b)) => assert_eq!(
            format!("{a:?}"),
            format!("{b:?}"),
            "whole and trickled reads fail differently"
        ),
        (a, b) => panic!("whole read {a:?}, trickled read {b:?}"),
    }
    if let Ok((
        Header::Proxied {
            source,
            destination,
        },
        _,
    )) = whole.outcome
    {
        round_trip(source, destination);
    }
    let (source, destination) = addresses(data);
    round_trip(source, destination);
}
