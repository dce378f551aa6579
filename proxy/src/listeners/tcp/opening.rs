//! A forwarded client's opening bytes, read at accept on the plain socket, as HAProxy does:
//! they usually arrived with or just after the handshake, and reading them before the upstream
//! is reached lets the connect carry them at once (see `upstream::Pool::connect`) instead of
//! after another turn of the event loop. One exchange at a time, that turn let the proxy
//! clean up the previous connection (two closes) between the upstream's connect and the
//! request, and then sleep once more waiting for the answer (perf sched, load tool).
//!
//! The read moves the relay's first client read here; it does not add one unless the client
//! has sent nothing yet (a server-first protocol, or a client slower than the accept).

use std::io::Read;

use crate::listeners::proxy_protocol;

/// The most read at accept: a short exchange's request fits; anything longer is left in the
/// socket for the relay.
pub(crate) const OPENING: usize = 2 << 10;
/// The opening bytes screened for a PROXY header (a v2 signature is 12 bytes, v1's `PROXY `
/// 6): the relay's screen, applied here because these bytes never reach it.
const SCREENED: usize = 16;

/// What the client sent before it was handed to the relay.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Opening {
    /// Nothing yet (or it closed or failed: the relay sees that again and ends).
    Nothing,
    /// These bytes, which passed the screen.
    Bytes(Vec<u8>),
    /// The start of a PROXY header from a peer that may not send one: not forwarded.
    ProxyHeader,
}

/// Reads what `client` (non-blocking) has sent so far, at most [`OPENING`] bytes, and screens
/// it for a PROXY header.
pub(crate) fn read(client: &mut impl Read) -> Opening {
    let mut buf = [0u8; OPENING];
    match client.read(&mut buf) {
        Ok(0) | Err(_) => Opening::Nothing,
        Ok(n) => screen(&buf[..n]),
    }
}

/// `bytes`, the first a client sent, unless they open a PROXY header.
fn screen(bytes: &[u8]) -> Opening {
    if proxy_protocol::looks_like_header(&bytes[..bytes.len().min(SCREENED)]) {
        Opening::ProxyHeader
    } else {
        Opening::Bytes(bytes.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    /// A reader that hands out fixed chunks, then would block.
    struct Chunks(Vec<io::Result<Vec<u8>>>);

    impl Read for Chunks {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let chunk = self.0.remove(0)?;
            let n = chunk.len().min(buf.len());
            buf[..n].copy_from_slice(&chunk[..n]);
            Ok(n)
        }
    }

    #[test]
    fn what_arrived_is_taken_and_headers_are_refused() {
        let read_one = |chunk: io::Result<Vec<u8>>| read(&mut Chunks(vec![chunk]));
        assert_eq!(
            read_one(Ok(b"GET / HTTP/1.1\r\n\r\n".to_vec())),
            Opening::Bytes(b"GET / HTTP/1.1\r\n\r\n".to_vec())
        );
        assert_eq!(
            read_one(Ok(b"PROXY TCP4 192.0.2.1 192.0.2.2 1 2\r\nhello".to_vec())),
            Opening::ProxyHeader
        );
        // A prefix of a signature is refused, as the relay's screen does.
        assert_eq!(read_one(Ok(b"\r\n\r\n".to_vec())), Opening::ProxyHeader);
        assert_eq!(read_one(Ok(Vec::new())), Opening::Nothing);
        assert_eq!(
            read_one(Err(io::ErrorKind::ConnectionReset.into())),
            Opening::Nothing
        );
        assert_eq!(read(&mut Chunks(Vec::new())), Opening::Nothing);
        // At most OPENING bytes: the rest stays for the relay.
        let long = vec![b'x'; OPENING + 100];
        assert_eq!(read_one(Ok(long)), Opening::Bytes(vec![b'x'; OPENING]));
    }

    #[test]
    fn an_accepted_socket_gives_what_its_client_sent_and_does_not_wait() {
        use std::io::Write;
        use std::net::{TcpListener, TcpStream};

        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        // Sent before the accept: on loopback the bytes are in the accepted socket by then.
        let mut talker = TcpStream::connect(address).unwrap();
        talker.write_all(b"hello").unwrap();
        let (mut accepted, _) = listener.accept().unwrap();
        accepted.set_nonblocking(true).unwrap();
        assert_eq!(read(&mut accepted), Opening::Bytes(b"hello".to_vec()));
        // Nothing more has come: no wait, nothing read.
        assert_eq!(read(&mut accepted), Opening::Nothing);
        // A client that sends nothing (a server-first protocol).
        let _silent = TcpStream::connect(address).unwrap();
        let (mut accepted, _) = listener.accept().unwrap();
        accepted.set_nonblocking(true).unwrap();
        assert_eq!(read(&mut accepted), Opening::Nothing);
    }
}
