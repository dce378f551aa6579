//! UDP listeners: every datagram is decided on (weighted by its size under `weight =
//! "bytes"`); allowed ones are forwarded through a per-client session, a socket connected to
//! one upstream, so replies find their way back to the right client. Over-limit datagrams are
//! dropped and counted, whatever the rule's action (a datagram cannot be reset or replied to
//! without helping reflection attacks).
//!
//! The session table is bounded (`max_sessions`). Sessions expire after `session_timeout`
//! without traffic in either direction. When the table is full, idle sessions are swept; if it
//! is still full, datagrams from new clients are dropped and counted as
//! `refused{reason="sessions_full"}` while established clients keep their sessions: under a
//! flood of new sources, existing conversations survive.

use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::UdpSocket;
use tokio::sync::watch;
use tollgate_filter::{Source, Transport, Verdict};

use crate::config::Listener;
use crate::metrics::{ListenerMetrics, Refusal};
use crate::shared::Shared;
use crate::upstream::Pool;

/// The largest datagram relayed.
const MAX_DATAGRAM: usize = 65_535;

/// One UDP listener's fixed parts and its session table.
#[derive(Debug)]
pub struct UdpFrontend {
    /// Its config.
    pub config: Listener,
    /// Its counters.
    pub metrics: ListenerMetrics,
    pool: Pool,
    sessions: Mutex<HashMap<SocketAddr, Arc<Session>>>,
    start: Instant,
}

#[derive(Debug)]
struct Session {
    upstream: UdpSocket,
    /// Milliseconds since the frontend's start at the last datagram either way.
    last: AtomicU64,
}

impl UdpFrontend {
    /// The fixed parts of listener `config`.
    #[must_use]
    pub fn new(config: Listener, shared: &Shared) -> UdpFrontend {
        UdpFrontend {
            metrics: shared.metrics.listener(&config.name),
            pool: Pool::new(&config),
            sessions: Mutex::new(HashMap::new()),
            start: Instant::now(),
            config,
        }
    }

    fn millis(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn touch(&self, session: &Session) {
        // Relaxed: an idle timestamp; a slightly stale read only delays an expiry.
        session.last.store(self.millis(), Ordering::Relaxed);
    }

    fn idle(&self, session: &Session) -> Duration {
        Duration::from_millis(
            self.millis()
                .saturating_sub(session.last.load(Ordering::Relaxed)),
        )
    }

    /// Sessions held now.
    #[must_use]
    pub fn sessions(&self) -> usize {
        self.sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// The session of `client`, opening one if there is room: `Ok(None)` means the table is
    /// full. A new session's reply task is started on `socket`.
    fn session(
        self: &Arc<Self>,
        socket: &Arc<UdpSocket>,
        client: SocketAddr,
    ) -> std::io::Result<Option<Arc<Session>>> {
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(session) = sessions.get(&client) {
            return Ok(Some(Arc::clone(session)));
        }
        if sessions.len() >= self.config.max_sessions {
            let timeout = self.config.session_timeout;
            sessions.retain(|_, s| self.idle(s) < timeout);
            self.metrics.sessions.set(sessions.len() as i64);
            if sessions.len() >= self.config.max_sessions {
                return Ok(None);
            }
        }
        let upstream = self.pool.pick();
        let local: SocketAddr = if upstream.is_ipv4() {
            (Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let std_socket = std::net::UdpSocket::bind(local)?;
        std_socket.connect(upstream)?;
        std_socket.set_nonblocking(true)?;
        let session = Arc::new(Session {
            upstream: UdpSocket::from_std(std_socket)?,
            last: AtomicU64::new(self.millis()),
        });
        sessions.insert(client, Arc::clone(&session));
        self.metrics.sessions.set(sessions.len() as i64);
        tokio::spawn(replies(
            Arc::clone(self),
            Arc::clone(socket),
            Arc::clone(&session),
            client,
        ));
        Ok(Some(session))
    }
}

/// Receives datagrams until `stop` says so.
pub async fn serve(
    shared: Arc<Shared>,
    frontend: Arc<UdpFrontend>,
    socket: Arc<UdpSocket>,
    mut stop: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        let received = tokio::select! {
            biased;
            _ = stop.changed() => return,
            received = socket.recv_from(&mut buf) => received,
        };
        let (len, client) = match received {
            Ok(received) => received,
            Err(err) => {
                // An ICMP error from an earlier send, or a signal: nothing to back off from.
                tracing::debug!(listener = %frontend.config.name, %err, "recv failed");
                continue;
            }
        };
        let source = Source::new(client.ip());
        let decided = shared.decide(source, Transport::Udp, len as u64);
        shared.account(&frontend.metrics, &decided, source);
        if decided.decision.verdict != Verdict::Allow {
            continue;
        }
        match frontend.session(&socket, client) {
            Ok(Some(session)) => {
                frontend.touch(&session);
                if let Err(err) = session.upstream.send(&buf[..len]).await {
                    tracing::debug!(listener = %frontend.config.name, %err, "send upstream failed");
                }
            }
            Ok(None) => {
                shared
                    .metrics
                    .refused(&frontend.metrics, Refusal::SessionsFull);
                shared.rejected(&frontend.metrics, client.ip(), "session table full");
            }
            Err(err) => {
                tracing::warn!(listener = %frontend.config.name, %err, "cannot open an upstream socket");
            }
        }
    }
}

/// Relays one session's replies back to its client until it has been idle for the session
/// timeout, then removes it.
async fn replies(
    frontend: Arc<UdpFrontend>,
    socket: Arc<UdpSocket>,
    session: Arc<Session>,
    client: SocketAddr,
) {
    let timeout = frontend.config.session_timeout;
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        let wait = timeout.saturating_sub(frontend.idle(&session));
        if wait.is_zero() {
            break;
        }
        // A timeout loops back to the idle check; an error (an ICMP port unreachable from the
        // upstream) keeps the session until it is idle.
        if let Ok(Ok(len)) = tokio::time::timeout(wait, session.upstream.recv(&mut buf)).await {
            frontend.touch(&session);
            let _ = socket.send_to(&buf[..len], client).await;
        }
    }
    let mut sessions = frontend.sessions.lock().unwrap_or_else(|e| e.into_inner());
    if sessions
        .get(&client)
        .is_some_and(|held| Arc::ptr_eq(held, &session))
    {
        sessions.remove(&client);
    }
    frontend.metrics.sessions.set(sessions.len() as i64);
}
