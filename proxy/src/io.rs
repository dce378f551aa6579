//! I/O helpers more than one part uses: a stream whose progress is counted ([`Counted`]) and
//! a watchdog that ends work once that count stops moving ([`until_idle`]). The TCP relay
//! counts its own copy; the admin endpoint wraps its connections in [`Counted`].

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Quiet checks in a row that make a connection idle.
const CHECKS: u32 = 4;

/// How watched work ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Watched {
    /// The work finished.
    Finished,
    /// Nothing moved for the idle timeout.
    Idle,
}

/// Runs `work` until it ends, or until `moved` (bumped by [`Counted`] streams that `work`
/// drives) stays the same at four checks in a row, one every quarter of `idle`.
pub(crate) async fn until_idle<F: Future>(work: F, idle: Duration, moved: &AtomicU64) -> Watched {
    let step = (idle / CHECKS).max(Duration::from_millis(1));
    tokio::pin!(work);
    let mut seen = 0;
    let mut quiet_checks = 0;
    loop {
        tokio::select! {
            _ = &mut work => return Watched::Finished,
            () = tokio::time::sleep(step) => {
                // Relaxed: the counter is only compared with its own earlier value; the
                // streams that bump it are driven by `work`, in this same task.
                let now = moved.load(Ordering::Relaxed);
                let quiet = now == seen;
                seen = now;
                if quiet {
                    quiet_checks += 1;
                    if quiet_checks >= CHECKS {
                        return Watched::Idle;
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
pub(crate) struct Counted<'a, S: ?Sized> {
    inner: &'a mut S,
    moved: &'a AtomicU64,
}

impl<'a, S: ?Sized> Counted<'a, S> {
    /// `inner`, its progress counted in `moved`.
    pub(crate) fn new(inner: &'a mut S, moved: &'a AtomicU64) -> Counted<'a, S> {
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

    /// The idle watchdog of the admin endpoint sees only what [`Counted`] counts: a read or
    /// write that moved bytes. A wake-up that moved nothing must not count (a connection that
    /// is polled but silent would never be idle), and flush and shutdown must reach the stream
    /// (a shutdown kept back would leave the peer waiting for an end that never comes).
    #[tokio::test]
    async fn counted_counts_only_reads_and_writes_that_move_bytes_and_passes_the_rest_on() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut near, mut far) = tokio::io::duplex(64);
        let moved = AtomicU64::new(0);
        let mut counted = Counted::new(&mut near, &moved);
        let count = |moved: &AtomicU64| moved.load(Ordering::Relaxed);
        // Nothing to read: pending, and nothing counted.
        let mut buf = [0u8; 8];
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut read = ReadBuf::new(&mut buf);
        assert!(
            Pin::new(&mut counted)
                .poll_read(&mut cx, &mut read)
                .is_pending()
        );
        assert_eq!(count(&moved), 0, "a read that moved nothing");
        // A read that moves bytes, a write that moves bytes: one each.
        far.write_all(b"abc").await.unwrap();
        let mut got = [0u8; 3];
        counted.read_exact(&mut got).await.unwrap();
        assert_eq!((&got, count(&moved)), (b"abc", 1));
        counted.write_all(b"de").await.unwrap();
        assert_eq!(count(&moved), 2);
        // A write of nothing moves nothing.
        assert_eq!(counted.write(b"").await.unwrap(), 0);
        assert_eq!(count(&moved), 2, "a write that moved nothing");
        // Flushed and shut down through to the stream: the far side reads the bytes, then
        // the end.
        counted.flush().await.unwrap();
        counted.shutdown().await.unwrap();
        let mut rest = Vec::new();
        // Bounded: a shutdown kept back fails the test instead of hanging it.
        tokio::time::timeout(Duration::from_secs(10), far.read_to_end(&mut rest))
            .await
            .expect("the end reached the far side")
            .unwrap();
        assert_eq!(rest, b"de");
        // The end of the stream moves nothing.
        drop(far);
        assert_eq!(counted.read(&mut buf).await.unwrap(), 0);
        assert_eq!(count(&moved), 2, "an end of stream");
    }
}
