//! Relaying bytes both ways between a client and an upstream, with an idle timeout: a
//! connection that moves no byte in either direction for `idle` is cut, so connections held
//! open and silent cannot keep their slots (and two descriptors each) forever.
//!
//! Activity is a counter of reads and writes that made progress, bumped by the copy and read
//! by a watchdog every quarter of `idle`; no clock is read per read. A connection is cut after
//! four quiet checks in a row: between `idle` and `1.25 * idle` after its last byte.
//!
//! The copy is this module's own rather than tokio's `copy_bidirectional`, for what a short
//! connection costs (strace and perf, load tool): each direction's buffer starts at
//! [`FIRST_BUFFER`] and grows to the full size only once a read fills it (tokio zeroes both
//! full buffers for every connection); the direction that ends second does not shut its
//! writer down, since the close that follows sends the same FIN (tokio shuts down both: one
//! `shutdown` per connection more, and each FIN runs the loopback peer's receive path in the
//! sender's system call); and an untrusted client's opening bytes are screened for a PROXY
//! header on the first read itself, instead of by a `MSG_PEEK` read and a timer before it.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

use crate::io::{Watched, until_idle};
use crate::listeners::proxy_protocol;

/// The size a direction's buffer starts at: a short exchange's reads fit, and zeroing it is
/// cheap; a read that fills it grows it to the relay's full size.
pub(crate) const FIRST_BUFFER: usize = 2 << 10;
/// The opening bytes an untrusted client's first read is screened on (a PROXY v2 signature
/// is 12 bytes, v1's `PROXY ` 6).
const SCREENED: usize = 16;

/// How a relay ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Both directions finished (or one failed).
    Finished,
    /// No byte moved either way for the idle timeout.
    Idle,
    /// The client opened with a PROXY header (with [`Screen::ProxyHeader`]); it was not
    /// forwarded.
    ProxyHeader,
}

/// What the client's first bytes are checked for before they are forwarded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Screen {
    /// Nothing.
    Nothing,
    /// A PROXY header from a client that may not send one: checked on the client's first read
    /// unless the upstream spoke (or ended) first, as a server-first protocol does.
    ProxyHeader,
}

/// Copies both ways until both directions end (a half-close is passed on) or nothing moves for
/// `idle`. `buffer` is the most each direction's buffer grows to; `screen` what the client's
/// first bytes are checked for.
pub(crate) async fn relay<A, B>(
    client: &mut A,
    upstream: &mut B,
    buffer: usize,
    idle: Duration,
    screen: Screen,
) -> Ended
where
    A: AsyncRead + AsyncWrite + Unpin + ?Sized,
    B: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    let moved = AtomicU64::new(0);
    let mut both = Both {
        client,
        upstream,
        up: Direction::new(buffer),
        down: Direction::new(buffer),
        screen,
        moved: &moved,
    };
    let copy = std::future::poll_fn(|cx| both.poll(cx));
    match until_idle(copy, idle, &moved).await {
        Watched::Finished if both.up.refused => Ended::ProxyHeader,
        Watched::Finished => Ended::Finished,
        Watched::Idle => Ended::Idle,
    }
}

/// One direction's copy: a buffer that holds what was read and not yet written.
#[derive(Debug)]
struct Direction {
    /// Its capacity is the buffer's size; its length what the last read filled.
    buf: Vec<u8>,
    /// The most `buf`'s capacity grows to.
    max: usize,
    start: usize,
    end: usize,
    /// Bytes read so far.
    read: u64,
    /// The last read filled the buffer: the next one gets the full size. A read that has not
    /// completed (pending) filled nothing.
    filled: bool,
    /// The reader ended (EOF).
    eof: bool,
    /// Written since the last flush.
    unflushed: bool,
    /// Everything read was written and the writer was shut down (or did not need to be).
    done: bool,
    /// The opening bytes were refused by the screen (client to upstream only).
    refused: bool,
}

impl Direction {
    fn new(max: usize) -> Direction {
        Direction {
            buf: Vec::new(),
            max: max.max(1),
            start: 0,
            end: 0,
            read: 0,
            filled: false,
            eof: false,
            unflushed: false,
            done: false,
            refused: false,
        }
    }

    /// Copies from `reader` to `writer` until the reader ends and everything read is written:
    /// `Ready(Ok)` then (the writer is not shut down: the caller decides). `screen` is checked
    /// on the first bytes read, before any is written: false refuses them.
    fn poll_copy<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        reader: &mut R,
        writer: &mut W,
        moved: &AtomicU64,
        screen: impl Fn(&[u8]) -> bool,
    ) -> Poll<io::Result<()>>
    where
        R: AsyncRead + Unpin + ?Sized,
        W: AsyncWrite + Unpin + ?Sized,
    {
        loop {
            if self.start == self.end && !self.eof {
                // The first read gets the small buffer; one that a read filled grows, once, to
                // the full size (it is empty here: nothing is copied over). A read that was
                // pending does not: the small buffer waits for the first bytes (it grew on
                // every poll after a pending first read, so each direction of a short
                // connection zeroed 16 KiB more: 59% of the proxy's user instructions per
                // connection, callgrind).
                // The buffer is reserved, not zeroed: a read fills its spare capacity and its
                // length is only ever what reads filled (`read_buf`), so nothing unread is
                // initialised (two zeroed 2 KiB buffers were 19% of the proxy's user
                // instructions per short connection, callgrind).
                if self.buf.capacity() == 0 || (self.filled && self.buf.capacity() < self.max) {
                    let size = if self.buf.capacity() == 0 {
                        FIRST_BUFFER.min(self.max)
                    } else {
                        self.max
                    };
                    self.buf = Vec::with_capacity(size);
                    self.filled = false;
                }
                self.buf.clear();
                let read = std::pin::pin!(reader.read_buf(&mut self.buf));
                match read.poll(cx) {
                    Poll::Pending => {
                        if self.unflushed {
                            ready!(Pin::new(&mut *writer).poll_flush(cx))?;
                            self.unflushed = false;
                        }
                        return Poll::Pending;
                    }
                    Poll::Ready(result) => result?,
                };
                let n = self.buf.len();
                if n == 0 {
                    self.eof = true;
                } else {
                    if self.read == 0 && !screen(&self.buf[..n]) {
                        self.refused = true;
                        return Poll::Ready(Ok(()));
                    }
                    self.read += n as u64;
                    self.filled = n == self.buf.capacity();
                    (self.start, self.end) = (0, n);
                    bump(moved);
                }
            }
            if self.start < self.end {
                let written =
                    ready!(Pin::new(&mut *writer).poll_write(cx, &self.buf[self.start..self.end]))?;
                if written == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                self.start += written;
                self.unflushed = true;
                bump(moved);
                continue;
            }
            if self.eof {
                if self.unflushed {
                    ready!(Pin::new(&mut *writer).poll_flush(cx))?;
                    self.unflushed = false;
                }
                return Poll::Ready(Ok(()));
            }
        }
    }
}

fn bump(moved: &AtomicU64) {
    // Relaxed: a tally for the idle watchdog in the same task; nothing else is ordered by it.
    moved.fetch_add(1, Ordering::Relaxed);
}

/// Both directions of one relay.
struct Both<'a, A: ?Sized, B: ?Sized> {
    client: &'a mut A,
    upstream: &'a mut B,
    /// Client to upstream.
    up: Direction,
    /// Upstream to client.
    down: Direction,
    screen: Screen,
    moved: &'a AtomicU64,
}

impl<A, B> Both<'_, A, B>
where
    A: AsyncRead + AsyncWrite + Unpin + ?Sized,
    B: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    /// Ready when both directions are done, one failed, or the screen refused the client.
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let up = self.poll_up(cx);
        if self.up.refused {
            return Poll::Ready(());
        }
        let down = self.poll_down(cx);
        match (up, down) {
            (Poll::Ready(Err(_)), _) | (_, Poll::Ready(Err(_))) => Poll::Ready(()),
            (Poll::Ready(Ok(())), Poll::Ready(Ok(()))) => Poll::Ready(()),
            _ => Poll::Pending,
        }
    }

    fn poll_up(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.up.done {
            return Poll::Ready(Ok(()));
        }
        // The upstream spoke (or ended) first: a server-first protocol; nothing to screen.
        let screened = self.screen == Screen::ProxyHeader && self.down.read == 0 && !self.down.eof;
        ready!(
            self.up
                .poll_copy(cx, self.client, self.upstream, self.moved, |first| {
                    !(screened
                        && proxy_protocol::looks_like_header(&first[..first.len().min(SCREENED)]))
                })
        )?;
        if !self.up.refused {
            ready!(finish(cx, &mut self.up, &self.down, self.upstream))?;
        }
        Poll::Ready(Ok(()))
    }

    fn poll_down(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.down.done {
            return Poll::Ready(Ok(()));
        }
        ready!(
            self.down
                .poll_copy(cx, self.upstream, self.client, self.moved, |_| true)
        )?;
        ready!(finish(cx, &mut self.down, &self.up, self.client))?;
        Poll::Ready(Ok(()))
    }
}

/// Passes a direction's end on: its writer is shut down (a FIN) if the other direction is
/// still going; if that one is done, the close after the relay sends the FIN, and its reader
/// ended, so nothing unread turns the close into a reset.
fn finish<W: AsyncWrite + Unpin + ?Sized>(
    cx: &mut Context<'_>,
    this: &mut Direction,
    other: &Direction,
    writer: &mut W,
) -> Poll<io::Result<()>> {
    if !other.done {
        ready!(Pin::new(writer).poll_shutdown(cx))?;
    }
    this.done = true;
    Poll::Ready(Ok(()))
}

#[cfg(test)]
mod tests {
    use tokio::io::ReadBuf;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_quiet_relay_ends_idle_and_a_busy_one_does_not() {
        let (mut a, mut b) = tokio::io::duplex(64);
        let (mut c, mut d) = tokio::io::duplex(64);
        // Paused time: the runtime advances the clock when every task waits, so the idle timeout
        // passes without sleeping for real.
        let ended = relay(
            &mut b,
            &mut c,
            64,
            Duration::from_secs(300),
            Screen::Nothing,
        );
        // Bounded (in paused time too): a relay that never ends fails instead of hanging.
        let ended = tokio::time::timeout(Duration::from_secs(3600), ended).await;
        assert_eq!(ended, Ok(Ended::Idle));
        // A byte every 100 s keeps a 300 s relay alive until both sides close.
        let busy = tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_secs(100)).await;
                a.write_all(b"x").await.unwrap();
                let mut one = [0u8; 1];
                d.read_exact(&mut one).await.unwrap();
            }
            drop((a, d));
        });
        assert_eq!(
            relay(
                &mut b,
                &mut c,
                64,
                Duration::from_secs(300),
                Screen::Nothing
            )
            .await,
            Ended::Finished
        );
        busy.await.unwrap();
    }

    /// A stream that counts its shutdowns.
    struct Shutdowns<S> {
        inner: S,
        count: usize,
    }

    impl<S: AsyncRead + Unpin> AsyncRead for Shutdowns<S> {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_read(cx, buf)
        }
    }

    impl<S: AsyncWrite + Unpin> AsyncWrite for Shutdowns<S> {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            Pin::new(&mut self.inner).poll_write(cx, buf)
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.inner).poll_flush(cx)
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.count += 1;
            Pin::new(&mut self.inner).poll_shutdown(cx)
        }
    }

    /// A client that sends `request` and half-closes, against an upstream that reads to the
    /// end, answers `answer` and closes; what each got, and the relay's shutdowns of each.
    async fn exchange(
        request: Vec<u8>,
        answer: Vec<u8>,
        buffer: usize,
        screen: Screen,
        server_first: bool,
    ) -> (Ended, Vec<u8>, Vec<u8>, usize, usize) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        // Pipes of different sizes: reads fill the relay's buffer on one side, and writes on
        // the other side are cut short.
        let (mut client, near) = tokio::io::duplex(64 << 10);
        let (far, mut server) = tokio::io::duplex(1000);
        let mut near = Shutdowns {
            inner: near,
            count: 0,
        };
        let mut far = Shutdowns {
            inner: far,
            count: 0,
        };
        let request_len = request.len() as u64;
        let answer_len = answer.len() as u64;
        let client_side = tokio::spawn(async move {
            let mut got = Vec::new();
            if server_first {
                let mut one = [0u8; 1];
                client.read_exact(&mut one).await.unwrap();
                got.push(one[0]);
            }
            let _ = client.write_all(&request).await;
            let _ = client.shutdown().await;
            let _ = (&mut client)
                .take(answer_len + 2)
                .read_to_end(&mut got)
                .await;
            got
        });
        let server_side = tokio::spawn(async move {
            if server_first {
                server.write_all(b"!").await.unwrap();
            }
            // At most one byte more than was sent: a relay that repeats itself is seen, not
            // read forever.
            let mut got = Vec::new();
            (&mut server)
                .take(request_len + 1)
                .read_to_end(&mut got)
                .await
                .unwrap();
            let _ = server.write_all(&answer).await;
            drop(server);
            got
        });
        let ended = tokio::time::timeout(
            Duration::from_secs(3600),
            relay(
                &mut near,
                &mut far,
                buffer,
                Duration::from_secs(300),
                screen,
            ),
        )
        .await
        .unwrap();
        let (near_shutdowns, far_shutdowns) = (near.count, far.count);
        // The relay's caller drops (closes) both streams when it returns.
        drop((near, far));
        let client_got = client_side.await.unwrap();
        let server_got = server_side.await.unwrap();
        (ended, client_got, server_got, near_shutdowns, far_shutdowns)
    }

    #[tokio::test(start_paused = true)]
    async fn a_short_exchange_shuts_down_only_the_first_side_to_end() {
        let (ended, client, server, near, far) = exchange(
            b"ping".to_vec(),
            b"pong".to_vec(),
            64,
            Screen::Nothing,
            false,
        )
        .await;
        assert_eq!(ended, Ended::Finished);
        assert_eq!((client, server), (b"pong".to_vec(), b"ping".to_vec()));
        // The client ended first: its end goes on to the upstream as a shutdown; the upstream's
        // end goes on to the client by the close.
        assert_eq!((near, far), (0, 1));
    }

    #[tokio::test]
    async fn a_direction_keeps_its_small_buffer_until_a_read_fills_it() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut client, mut near) = tokio::io::duplex(64 << 10);
        let (mut far, mut server) = tokio::io::duplex(64 << 10);
        let moved = AtomicU64::new(0);
        let mut up = Direction::new(16 << 10);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut poll = |up: &mut Direction| {
            up.poll_copy(&mut cx, &mut near, &mut far, &moved, |_| true)
                .is_pending()
        };
        // Nothing sent yet: pending, polled again and again (other wake-ups of its task).
        for _ in 0..3 {
            assert!(poll(&mut up));
        }
        assert_eq!(up.buf.capacity(), FIRST_BUFFER, "grew before any read");
        assert_eq!(up.buf.len(), 0, "initialised bytes no read filled");
        client.write_all(b"hello").await.unwrap();
        assert!(poll(&mut up));
        assert_eq!(up.buf.capacity(), FIRST_BUFFER, "grew after a short read");
        // What was read was written and the next read is waiting: nothing is held, and no
        // byte beyond what a read filled was ever initialised (the length of a `Vec` is
        // what it initialised; the buffer was zeroed whole before).
        assert!(up.buf.len() <= 5, "{} bytes initialised", up.buf.len());
        let mut got = [0u8; 5];
        server.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hello");
        // A read that fills the buffer: the next one gets the full size.
        client.write_all(&[7u8; FIRST_BUFFER]).await.unwrap();
        assert!(poll(&mut up));
        client.write_all(b"more").await.unwrap();
        assert!(poll(&mut up));
        assert_eq!(up.buf.capacity(), 16 << 10);
        assert!(up.buf.len() <= 4, "{} bytes initialised", up.buf.len());
        // Full size, it stays the same buffer when a read fills it again: no allocation per
        // read of a bulk transfer.
        let full = up.buf.as_ptr();
        client.write_all(&[7u8; 16 << 10]).await.unwrap();
        assert!(poll(&mut up));
        client.write_all(b"more").await.unwrap();
        assert!(poll(&mut up));
        assert_eq!(up.buf.as_ptr(), full, "a full-size buffer allocated again");
    }

    #[tokio::test(start_paused = true)]
    async fn more_than_the_first_buffer_goes_through_whole_both_ways() {
        let request: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let answer: Vec<u8> = (0..70_000u32).map(|i| (i % 241) as u8).collect();
        let (ended, client, server, _, _) = exchange(
            request.clone(),
            answer.clone(),
            16 << 10,
            Screen::Nothing,
            false,
        )
        .await;
        assert_eq!(ended, Ended::Finished);
        assert!(
            client == answer,
            "the answer arrived altered ({} bytes)",
            client.len()
        );
        assert!(
            server == request,
            "the request arrived altered ({} bytes)",
            server.len()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_proxy_header_from_a_screened_client_is_not_forwarded() {
        let header = b"PROXY TCP4 192.0.2.1 192.0.2.2 1 2\r\nhello".to_vec();
        let (ended, _, server, _, _) =
            exchange(header.clone(), Vec::new(), 64, Screen::ProxyHeader, false).await;
        assert_eq!(ended, Ended::ProxyHeader);
        assert!(server.is_empty(), "forwarded: {server:?}");
        // Not screened, or the upstream spoke first: forwarded as payload.
        let (ended, _, server, _, _) =
            exchange(header.clone(), Vec::new(), 64, Screen::Nothing, false).await;
        assert_eq!((ended, &server), (Ended::Finished, &header));
        let (ended, _, server, _, _) =
            exchange(header.clone(), Vec::new(), 64, Screen::ProxyHeader, true).await;
        assert_eq!((ended, &server), (Ended::Finished, &header));
        // Ordinary payload passes the screen.
        let (ended, _, server, _, _) = exchange(
            b"GET / HTTP/1.1\r\n\r\n".to_vec(),
            Vec::new(),
            64,
            Screen::ProxyHeader,
            false,
        )
        .await;
        assert_eq!(
            (ended, server),
            (Ended::Finished, b"GET / HTTP/1.1\r\n\r\n".to_vec())
        );
    }

    /// A stream whose reads fail (a client that reset) and whose writes go nowhere.
    struct Failing;

    impl AsyncRead for Failing {
        fn poll_read(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            _: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()))
        }
    }

    impl AsyncWrite for Failing {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            Poll::Ready(Ok(buf.len()))
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// One direction failing ends the relay at once: waiting for the other (an upstream that
    /// says nothing) would hold the connection's slot and both descriptors until the idle
    /// timeout.
    #[tokio::test(start_paused = true)]
    async fn a_failed_direction_ends_the_relay_at_once() {
        let (mut upstream, _silent) = tokio::io::duplex(64);
        let started = tokio::time::Instant::now();
        let ended = relay(
            &mut Failing,
            &mut upstream,
            64,
            Duration::from_secs(300),
            Screen::Nothing,
        )
        .await;
        assert_eq!(ended, Ended::Finished);
        assert_eq!(
            started.elapsed(),
            Duration::ZERO,
            "waited for the idle timeout"
        );
    }
}
