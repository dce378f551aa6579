//! One client's session: a socket connected to one upstream, so its replies come back to that
//! client, and the task that relays them and ends the session when it falls idle.
//!
//! Expiry is per session, on tokio's timer wheel: each session's task sleeps until its idle
//! deadline, and on waking either finds it was used since (and sleeps again until the new
//! deadline) or removes the session, in O(1). The receive path only stamps the time of the
//! last datagram: it never sweeps the table.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::UdpSocket;
use tokio::sync::Notify;

use super::{UdpFrontend, buffer};

/// Room kept before each datagram for a PROXY v2 header (at most 16 + 36 bytes).
pub(super) const HEADER_ROOM: usize = 64;

/// Replies relayed in one go before the task yields to others.
const BATCH: usize = 32;

/// A client's session. Its memory: this struct (about 100 bytes), its task (the future of
/// [`relay`], a few hundred bytes), its table entries, and the kernel's socket; no buffer.
#[derive(Debug)]
pub(super) struct Session {
    upstream: UdpSocket,
    client: SocketAddr,
    /// Milliseconds since the frontend's start at the last datagram either way.
    last: AtomicU64,
    /// Wakes the reply task to end the session before its time (evicted from the table).
    ended: Notify,
    /// The PROXY v2 header put before each datagram to the upstream (`send_proxy = "v2"`).
    header: Option<Box<[u8]>>,
}

impl Session {
    /// A session of `client` with a new socket connected to `upstream`, last used at `now`
    /// (milliseconds since the frontend's start), writing `header` before each datagram.
    ///
    /// # Errors
    /// The socket call that failed (EMFILE when the process is out of descriptors).
    pub(super) fn open(
        client: SocketAddr,
        upstream: SocketAddr,
        now: u64,
        header: Option<Box<[u8]>>,
    ) -> std::io::Result<Session> {
        // Three system calls per session, the fewest there are: socket (non-blocking and
        // close-on-exec from the start), connect (which binds an ephemeral port), and the
        // runtime's registration. A flood of new sources pays this per datagram.
        let socket = Socket::new(
            Domain::for_address(upstream),
            Type::DGRAM.nonblocking(),
            Some(Protocol::UDP),
        )?;
        socket.connect(&upstream.into())?;
        Ok(Session {
            upstream: UdpSocket::from_std(socket.into())?,
            client,
            last: AtomicU64::new(now),
            ended: Notify::new(),
            header,
        })
    }

    /// The client it serves.
    pub(super) fn client(&self) -> SocketAddr {
        self.client
    }

    /// Ends the session: its reply task stops and its socket closes. (A permit is stored if
    /// the task is not waiting at that moment, so the end is never missed.)
    pub(super) fn end(&self) {
        self.ended.notify_one();
    }

    /// Stamps a datagram either way at `now`.
    pub(super) fn touch(&self, now: u64) {
        // Relaxed: an idle timestamp; a slightly stale read only delays an expiry.
        self.last.store(now, Ordering::Relaxed);
    }

    /// Milliseconds since the last datagram either way, at `now`.
    fn idle(&self, now: u64) -> u64 {
        // Relaxed: see `touch`.
        now.saturating_sub(self.last.load(Ordering::Relaxed))
    }

    /// Sends the datagram at `buffer[at..at + len]` to the upstream, with the session's
    /// PROXY header written into the room before `at` (at least [`HEADER_ROOM`] bytes).
    pub(super) async fn forward(
        &self,
        buffer: &mut [u8],
        at: usize,
        len: usize,
    ) -> std::io::Result<usize> {
        let start = match &self.header {
            Some(header) => {
                // A v2 header is at most 52 bytes (IPv6), within the room.
                let start = at.saturating_sub(header.len());
                buffer[start..at].copy_from_slice(&header[..at - start]);
                start
            }
            None => at,
        };
        self.upstream.send(&buffer[start..at + len]).await
    }
}

/// What one read from the upstream socket came to.
enum Read {
    /// Nothing more to read now.
    Drained,
    /// A reply relayed (or dropped: UDP promises nothing), or an error to skip.
    Done,
    /// A reply the client's socket could not take at once, copied out of the shared buffer.
    Pending(Vec<u8>),
}

/// Relays `session`'s replies to its client through `socket` until the session has been idle
/// for the listener's session timeout, or is ended, then removes it from the table (closing
/// its socket).
pub(super) async fn relay(
    frontend: Arc<UdpFrontend>,
    socket: Arc<UdpSocket>,
    session: Arc<Session>,
) {
    let timeout = frontend.config.session_timeout;
    let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    // One timer for the session's life, re-armed only when it fires: replies do not touch it.
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            ready = session.upstream.readable() => {
                if ready.is_err() {
                    // The socket's registration is gone: nothing more can come.
                    break;
                }
                relay_ready(&frontend, &socket, &session).await;
            }
            () = &mut deadline => {
                let idle = session.idle(frontend.millis());
                if idle >= timeout_ms {
                    break;
                }
                let left = std::time::Duration::from_millis(timeout_ms - idle);
                deadline.as_mut().reset(tokio::time::Instant::now() + left);
            }
            () = session.ended.notified() => break,
        }
    }
    frontend.close(&session);
}

/// Relays the replies waiting on `session`'s socket, at most [`BATCH`].
async fn relay_ready(frontend: &UdpFrontend, socket: &UdpSocket, session: &Session) {
    for _ in 0..BATCH {
        let read = buffer::with(|buffer| match session.upstream.try_recv(buffer) {
            Ok(len) => {
                session.touch(frontend.millis());
                match socket.try_send_to(&buffer[..len], session.client) {
                    Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {
                        Read::Pending(buffer[..len].to_vec())
                    }
                    // Sent, or refused by the kernel (UDP promises nothing).
                    _ => Read::Done,
                }
            }
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => Read::Drained,
            // An ICMP error from the upstream (port unreachable): the session stays until idle.
            Err(_) => Read::Done,
        });
        match read {
            Read::Drained => return,
            Read::Done => {}
            Read::Pending(reply) => {
                let _ = socket.send_to(&reply, session.client).await;
            }
        }
    }
}
