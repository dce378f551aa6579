//! Relaying bytes both ways between a client and an upstream, with an idle timeout: a
//! connection that moves no byte in either direction for `idle` is cut, so connections held
//! open and silent cannot keep their slots (and two descriptors each) forever.
//!
//! Activity is a counter of reads and writes that made progress, bumped by the copy and read
//! by a watchdog every quarter of `idle`; no clock is read per read. A connection is cut after
//! four quiet checks in a row: between `idle` and `1.25 * idle` after its last byte.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Quiet checks in a row that make a connection idle.
const CHECKS: u32 = 4;

/// How a relay ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// Both directions finished (or one failed).
    Finished,
    /// No byte moved either way for the idle timeout.
    Idle,
}

/// Copies both ways until both directions end (a half-close is passed on) or nothing moves for
/// `idle`. `buffer` is the size of each direction's buffer.
pub async fn relay<A, B>(client: &mut A, upstream: &mut B, buffer: usize, idle: Duration) -> Ended
where
    A: AsyncRead + AsyncWrite + Unpin + ?Sized,
    B: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    let moved = AtomicU64::new(0);
    let mut client = Counted {
        inner: client,
        moved: &moved,
    };
    let mut upstream = Counted {
        inner: upstream,
        moved: &moved,
    };
    let copy = tokio::io::copy_bidirectional_with_sizes(&mut client, &mut upstream, buffer, buffer);
    until_idle(copy, idle, &moved).await
}

/// Runs `work` until it ends, or until `moved` (bumped by [`Counted`] streams that `work`
/// drives) stays the same at four checks in a row, one every quarter of `idle`.
pub async fn until_idle<F: Future>(work: F, idle: Duration, moved: &AtomicU64) -> Ended {
    let step = (idle / CHECKS).max(Duration::from_millis(1));
    tokio::pin!(work);
    let mut seen = 0;
    let mut quiet_checks = 0;
    loop {
        tokio::select! {
            _ = &mut work => return Ended::Finished,
            () = tokio::time::sleep(step) => {
                // Relaxed: the counter is only compared with its own earlier value; the
                // streams that bump it are driven by `work`, in this same task.
                let now = moved.load(Ordering::Relaxed);
                let quiet = now == seen;
                seen = now;
                if quiet {
                    quiet_checks += 1;
                    if quiet_checks >= CHECKS {
                        return Ended::Idle;
                    }
                } else {
                    quiet_checks = 0;
                }
            }
        }
    }
}

/// A stream whose reads and writes that move bytes are counted in `moved`.
#[derive(Debug)]
pub struct Counted<'a, S: ?Sized> {
    inner: &'a mut S,
    moved: &'a AtomicU64,
}

impl<'a, S: ?Sized> Counted<'a, S> {
    /// `inner`, its progress counted in `moved`.
    pub fn new(inner: &'a mut S, moved: &'a AtomicU64) -> Counted<'a, S> {
        Counted { inner, moved }
    }

    fn bump(&self) {
        // Relaxed: a tally for the idle watchdog in the same task; nothing else is ordered by it.
        self.moved.fetch_add(1, Ordering::Relaxed);
    }
}

impl<S: AsyncRead + Unpin + ?Sized> AsyncRead for Counted<'_, S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut *this.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.bump();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin + ?Sized> AsyncWrite for Counted<'_, S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut *this.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            this.bump();
        }
        polled
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_quiet_relay_ends_idle_and_a_busy_one_does_not() {
        let (mut a, mut b) = tokio::io::duplex(64);
        let (mut c, mut d) = tokio::io::duplex(64);
        // Paused time: the runtime advances the clock when every task waits, so the idle timeout
        // passes without sleeping for real.
        let ended = relay(&mut b, &mut c, 64, Duration::from_secs(300));
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
            relay(&mut b, &mut c, 64, Duration::from_secs(300)).await,
            Ended::Finished
        );
        busy.await.unwrap();
    }
}
