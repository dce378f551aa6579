//! Reaching an upstream: round-robin over the listener's pool, a connect timeout per attempt,
//! and retries on the next upstream after an exponential backoff with jitter (so a pool that
//! comes back is not hit by every waiting client at the same instant).
//!
//! A connect carries the client's first bytes when they are known: they are sent as soon as
//! the `connect` call returns, on the plain socket, before it is registered with the event
//! loop. On loopback (and whenever the handshake completes within the call) they go at once;
//! a socket still connecting refuses them with `EAGAIN` and they wait for it as before.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rand::RngExt;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpStream;

use crate::config::Listener;
use crate::listener_metrics::{ListenerMetrics, ListenerSeries};

/// A listener's upstream pool.
#[derive(Debug)]
pub(crate) struct Pool {
    upstreams: Vec<SocketAddr>,
    next: AtomicUsize,
    connect_timeout: Duration,
    retries: u32,
    backoff: Duration,
}

impl Pool {
    /// The pool `config` names.
    #[must_use]
    pub(crate) fn new(config: &Listener) -> Pool {
        Pool {
            upstreams: config.upstreams.clone(),
            next: AtomicUsize::new(0),
            connect_timeout: config.connect_timeout,
            retries: config.retries,
            backoff: config.backoff,
        }
    }

    /// The upstream the next session starts at (round-robin).
    pub(crate) fn pick(&self) -> SocketAddr {
        // Relaxed: only spreads load; no ordering with anything else.
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        self.upstreams[start % self.upstreams.len()]
    }

    /// The wait before retry `attempt` (1-based): `backoff * 2^(attempt-1)`, times a random
    /// factor in [0.5, 1.5).
    fn backoff(&self, attempt: u32) -> Duration {
        let base = self.backoff.saturating_mul(1 << (attempt - 1).min(16));
        base.mul_f64(rand::rng().random_range(0.5..1.5))
    }

    /// A connection to an upstream, trying up to `1 + retries` of them in turn, with as much
    /// of `first` sent on it as the kernel took at once (see the module docs); `None` when
    /// every attempt failed (each failure is counted).
    pub(crate) async fn connect(
        &self,
        metrics: &ListenerSeries,
        listener: &ListenerMetrics,
        first: &[u8],
    ) -> Option<(TcpStream, usize)> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        for attempt in 0..=self.retries {
            if attempt > 0 {
                tokio::time::sleep(self.backoff(attempt)).await;
            }
            let upstream = self.upstreams[(start + attempt as usize) % self.upstreams.len()];
            match tokio::time::timeout(self.connect_timeout, open(upstream, first)).await {
                Ok(Ok(connected)) => return Some(connected),
                Ok(Err(err)) => {
                    tracing::debug!(%upstream, %err, attempt, "upstream connect failed");
                    metrics.upstream_error(listener, upstream);
                }
                Err(_) => {
                    tracing::debug!(%upstream, attempt, "upstream connect timed out");
                    metrics.upstream_error(listener, upstream);
                }
            }
        }
        listener.upstream_unavailable.inc();
        None
    }
}

/// Connects to `upstream` and sends what it can of `first` at once: the stream, once
/// connected, and the bytes of `first` sent.
async fn open(upstream: SocketAddr, first: &[u8]) -> io::Result<(TcpStream, usize)> {
    let socket = Socket::new(
        Domain::for_address(upstream),
        Type::STREAM.nonblocking().cloexec(),
        Some(Protocol::TCP),
    )?;
    // Before the connect, so that the first bytes already go without Nagle's delay; a
    // failure leaves Nagle on: slower, still correct.
    let _ = socket.set_tcp_nodelay(true);
    match socket.connect(&upstream.into()) {
        Ok(()) => {}
        Err(err) if err.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(err) => return Err(err),
    }
    let sent = if first.is_empty() {
        0
    } else {
        // A socket still in its handshake refuses with EAGAIN (the kernel does not wait on a
        // non-blocking socket); a connect that failed reports its error here.
        match socket.send_with_flags(first, libc::MSG_NOSIGNAL) {
            Ok(sent) => sent,
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => 0,
            Err(err) => return Err(err),
        }
    };
    let stream = TcpStream::from_std(socket.into())?;
    if sent == 0 {
        // Not known to be connected yet: wait for it, and for its outcome, as
        // `TcpStream::connect` does.
        stream.writable().await?;
        if let Some(err) = stream.take_error()? {
            return Err(err);
        }
    }
    Ok((stream, sent))
}

/// The stalled upstream the tests share with the integration tests (see the file).
#[cfg(test)]
#[path = "../../tests/e2e/support/handshake.rs"]
mod handshake;

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::net::TcpListener;

    use tokio::io::AsyncWriteExt;

    use super::handshake::{stalled_upstream, wait_connecting};
    use super::*;

    /// What one connection to `listener` delivers until it closes.
    fn delivered(listener: &TcpListener) -> Vec<u8> {
        let (mut accepted, _) = listener.accept().unwrap();
        accepted
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut got = Vec::new();
        accepted.read_to_end(&mut got).unwrap();
        got
    }

    #[tokio::test]
    async fn the_first_bytes_arrive_once_whether_sent_at_connect_or_after() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let first = b"PROXY TCP4 192.0.2.1 192.0.2.2 1 2\r\nhello";
        let (mut stream, sent) = open(address, first).await.unwrap();
        assert!(sent <= first.len());
        // The caller writes the rest, as `forward` does.
        stream.write_all(&first[sent..]).await.unwrap();
        stream.write_all(b" world").await.unwrap();
        drop(stream);
        let mut expected = first.to_vec();
        expected.extend_from_slice(b" world");
        assert_eq!(delivered(&listener), expected);
        // Nothing to send: a plain connect, waited for.
        let (stream, sent) = open(address, b"").await.unwrap();
        assert_eq!(sent, 0);
        drop(stream);
        assert_eq!(delivered(&listener), b"");
    }

    #[tokio::test]
    async fn a_refused_connect_is_an_error_with_or_without_first_bytes() {
        let address = {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap()
        };
        // Bounded: a connect that neither fails nor succeeds fails the test, not hang it.
        for first in [&b"hello"[..], b""] {
            let opened = tokio::time::timeout(Duration::from_secs(10), open(address, first)).await;
            assert!(
                matches!(opened, Ok(Err(_))),
                "{:?}",
                opened.map(|r| r.map(|(_, sent)| sent))
            );
        }
    }

    /// The path production takes (an upstream a millisecond or more away): the handshake is
    /// not done when `connect` returns, so the first bytes are refused with EAGAIN. That is not
    /// an error, and the stream comes back only once connected, with the bytes still to send.
    #[tokio::test]
    async fn a_connect_whose_handshake_is_not_done_at_once_waits_for_it() {
        let (listener, queued) = stalled_upstream();
        let address = listener.local_addr().unwrap();
        let upstream = std::thread::spawn(move || {
            wait_connecting(address);
            // Free the queue: the connect's next SYN gets in.
            drop(listener.accept().unwrap());
            drop(queued);
            delivered(&listener)
        });
        let first = b"PROXY TCP4 192.0.2.1 192.0.2.2 1 2\r\nhello";
        let (mut stream, sent) =
            tokio::time::timeout(Duration::from_secs(10), open(address, first))
                .await
                .expect("bounded")
                .expect("connected after its SYN was retransmitted");
        assert_eq!(
            sent, 0,
            "the handshake was done at once: the test missed its path"
        );
        assert_eq!(
            stream.peer_addr().unwrap(),
            address,
            "returned before connected"
        );
        stream.write_all(first).await.unwrap();
        drop(stream);
        assert_eq!(upstream.join().unwrap(), first);
    }

    /// An upstream whose handshake does not finish within the connect timeout is given up and
    /// the next one tried: a stream still connecting must not be handed on as connected (the
    /// connection would then wait on an upstream that never answers, with no retry).
    #[tokio::test]
    async fn a_handshake_that_does_not_finish_in_time_is_retried_on_the_next_upstream() {
        let (stalled, _queued) = stalled_upstream();
        let stalled = stalled.local_addr().unwrap();
        let listening = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listening.local_addr().unwrap();
        let text = format!(
            "[[listener]]\nname = \"l\"\nlisten = \"127.0.0.1:0\"\n\
             upstreams = [\"{stalled}\", \"{address}\"]\nretries = 1\nbackoff = \"1ms\"\n\
             connect_timeout = \"200ms\"\n"
        );
        let pool = Pool::new(&crate::config::ProxyConfig::parse(&text).unwrap().listeners[0]);
        let metrics = ListenerSeries::default();
        let listener = metrics.listener("l");
        let (stream, _) = tokio::time::timeout(
            Duration::from_secs(10),
            pool.connect(&metrics, &listener, b"hello"),
        )
        .await
        .expect("bounded")
        .expect("the second upstream");
        assert_eq!(stream.peer_addr().ok(), Some(address));
    }

    fn pool(upstreams: &str) -> Pool {
        let text = format!(
            "[[listener]]\nname = \"l\"\nlisten = \"127.0.0.1:0\"\nupstreams = [{upstreams}]\n\
             backoff = \"100ms\"\n"
        );
        Pool::new(&crate::config::ProxyConfig::parse(&text).unwrap().listeners[0])
    }

    #[test]
    fn sessions_go_round_the_pool_and_retries_back_off_exponentially_with_jitter() {
        let pool = pool("\"127.0.0.1:1\", \"127.0.0.1:2\", \"127.0.0.1:3\"");
        let ports: Vec<u16> = (0..7).map(|_| pool.pick().port()).collect();
        assert_eq!(ports, [1, 2, 3, 1, 2, 3, 1]);
        // backoff * 2^(attempt - 1), the exponent capped at 16, times [0.5, 1.5).
        for (attempt, base) in [(1, 100u32), (3, 400), (20, 100 << 16)] {
            for _ in 0..20 {
                let wait = pool.backoff(attempt).as_secs_f64() * 1000.0;
                let base = f64::from(base);
                assert!(
                    wait >= 0.5 * base && wait < 1.5 * base,
                    "{attempt}: {wait} ms"
                );
            }
        }
    }

    /// A failed attempt is retried on the next upstream of the pool, not the same one, and only
    /// after its backoff: without the wait, every failing upstream would be hit again at once by
    /// each session (a retry storm against an upstream already failing).
    #[tokio::test]
    async fn a_retry_waits_its_backoff_and_goes_to_the_next_upstream() {
        let refused = {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap()
        };
        let listening = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listening.local_addr().unwrap();
        let text = format!(
            "[[listener]]\nname = \"l\"\nlisten = \"127.0.0.1:0\"\n\
             upstreams = [\"{refused}\", \"{address}\"]\nretries = 1\nbackoff = \"200ms\"\n"
        );
        let pool = Pool::new(&crate::config::ProxyConfig::parse(&text).unwrap().listeners[0]);
        let metrics = ListenerSeries::default();
        let listener = metrics.listener("l");
        // A fresh pool starts at its first upstream: refused, then the second after a wait of
        // at least half the backoff (its jitter's lowest factor).
        let started = std::time::Instant::now();
        let (stream, sent) = tokio::time::timeout(
            Duration::from_secs(10),
            pool.connect(&metrics, &listener, b""),
        )
        .await
        .expect("bounded")
        .expect("the second upstream");
        assert!(
            started.elapsed() >= Duration::from_millis(100),
            "{:?}",
            started.elapsed()
        );
        assert_eq!((stream.peer_addr().unwrap(), sent), (address, 0));
    }
}
