//! UDP listeners: every datagram is decided on (weighted by its size under `weight =
//! "bytes"`); allowed ones are forwarded through a per-client session, a socket connected to
//! one upstream, so replies find their way back to the right client. Over-limit datagrams are
//! dropped and counted, whatever the rule's action (a datagram cannot be reset or replied to
//! without helping reflection attacks).
//!
//! A session costs a descriptor, so a spoofed source, whose first datagram is under every
//! limit, must not be able to take the descriptors the rest of the process needs. Sessions are
//! capped per source (IPv4 address, IPv6 /64), per prefix (IPv4 /24, IPv6 /48) and per
//! listener ([`Caps`]; the listener's default derives from the open-file limit, see
//! [`crate::listeners::descriptors`]). A datagram from a client without a session that would
//! exceed a cap is dropped and counted as `refused{reason=...}` (`source_sessions`, `prefix_sessions`,
//! `sessions_full`; `session_socket` when the socket itself cannot be opened), and logged
//! within the rejection log budget; established clients keep their sessions. At the
//! listener's cap a new client may take the place of the oldest session that has seen a
//! single datagram (what spoofed sources leave; see `table.rs`), counted as evicted.
//!
//! With `send_proxy = "v2"` each datagram to the upstream starts with a PROXY v2 header
//! (command PROXY, transport DGRAM) naming the client and the listener's bound address, as
//! PROXY-aware UDP servers (dnsdist, PowerDNS) read it; replies are relayed as they come.
//!
//! Parts: `table` (who holds what, every cap in O(1)), `session` (a session and its reply
//! task, which also expires it), `buffer` (the reply buffer, one per worker thread).

mod buffer;
mod session;
mod table;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::net::UdpSocket;
use tokio::sync::watch;
use tokio::time::Instant;
use tollgate_filter::{Source, Transport, Verdict};

use crate::config::{Listener, SendProxy};
use crate::gate::Gate;
use crate::listener_metrics::{ListenerMetrics, Refusal};
use crate::listeners::proxy_protocol::{V2Transport, encode_v2};
use crate::listeners::upstream::Pool;
use session::{HEADER_ROOM, Session};
use table::SessionTable;

pub(crate) use table::Caps;

/// One UDP listener's fixed parts and its session table.
#[derive(Debug)]
pub(crate) struct UdpFrontend {
    /// Its config.
    pub(crate) config: Listener,
    /// Its counters.
    pub(crate) metrics: ListenerMetrics,
    caps: Caps,
    /// The address it is bound to: the destination its PROXY headers name.
    local: SocketAddr,
    pool: Pool,
    table: Mutex<SessionTable<Session>>,
    /// The sessions' clock starts here. Tokio's `Instant` (std's outside tests), the clock the
    /// sessions' timers run on, so a test on a paused runtime moves both together.
    start: Instant,
}

/// Why a datagram got no session.
enum NoSession {
    /// A cap: the source's, its prefix's or the listener's.
    Cap(Refusal),
    /// The socket could not be opened.
    Socket(std::io::Error),
}

impl UdpFrontend {
    /// The fixed parts of listener `config`, bound to `local`, holding at most `max_sessions`
    /// sessions (the config's own, or the default the descriptor budget gives it).
    #[must_use]
    pub(crate) fn new(
        config: Listener,
        local: SocketAddr,
        gate: &Gate,
        max_sessions: usize,
    ) -> UdpFrontend {
        let caps = Caps {
            total: max_sessions,
            per_source: config.max_sessions_per_source,
            per_prefix: config.max_sessions_per_prefix,
        };
        let metrics = gate.metrics().listeners.listener(&config.name);
        metrics
            .session_limit
            .set(i64::try_from(max_sessions).unwrap_or(i64::MAX));
        UdpFrontend {
            metrics,
            caps,
            local,
            pool: Pool::new(&config),
            table: Mutex::new(SessionTable::new(caps)),
            start: Instant::now(),
            config,
        }
    }

    /// The caps this listener enforces.
    #[must_use]
    pub(crate) fn caps(&self) -> Caps {
        self.caps
    }

    /// Sessions held now.
    #[must_use]
    pub(crate) fn sessions(&self) -> usize {
        self.table().len()
    }

    fn table(&self) -> MutexGuard<'_, SessionTable<Session>> {
        // A panic while holding the lock leaves the table consistent (each method updates it
        // whole or not at all), so a poisoned lock is taken as it is.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Milliseconds since the frontend's start: the sessions' clock.
    fn millis(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The session of `client`, opening one (and starting its reply task on `socket`) if
    /// every cap allows.
    fn session(
        self: &Arc<Self>,
        socket: &Arc<UdpSocket>,
        client: SocketAddr,
    ) -> Result<Arc<Session>, NoSession> {
        {
            let mut table = self.table();
            if let Some(session) = table.again(client) {
                return Ok(Arc::clone(session));
            }
            table.admits(client).map_err(NoSession::Cap)?;
        }
        // The socket is opened outside the lock; only this listener's receive loop inserts,
        // so the caps checked above still hold (expiry only frees places).
        let header = (self.config.send_proxy == SendProxy::V2)
            .then(|| encode_v2(client, self.local, V2Transport::Datagram).into_boxed_slice());
        let session = Session::open(client, self.pool.pick(), self.millis(), header)
            .map(Arc::new)
            .map_err(NoSession::Socket)?;
        let evicted = {
            let mut table = self.table();
            let evicted = table
                .insert(client, Arc::clone(&session))
                .map_err(NoSession::Cap)?;
            self.metrics.sessions.set(gauge(table.len()));
            evicted
        };
        if let Some(evicted) = evicted {
            evicted.end();
            self.metrics.evicted.inc();
        }
        tokio::spawn(session::relay(
            Arc::clone(self),
            Arc::clone(socket),
            Arc::clone(&session),
        ));
        Ok(session)
    }

    /// Removes `session` from the table (its socket closes when its last holder lets go).
    fn close(&self, session: &Arc<Session>) {
        let mut table = self.table();
        table.remove(session.client(), session);
        self.metrics.sessions.set(gauge(table.len()));
    }
}

fn gauge(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// Receives datagrams until `stop` says so.
pub(crate) async fn serve(
    gate: Arc<Gate>,
    frontend: Arc<UdpFrontend>,
    socket: Arc<UdpSocket>,
    mut stop: watch::Receiver<bool>,
) {
    // The listener's own receive buffer: one per listener, whatever the sessions; datagrams
    // are read past room for a PROXY header, so one is sent with it without a copy.
    let mut buf = vec![0u8; HEADER_ROOM + buffer::MAX_DATAGRAM];
    loop {
        let received = tokio::select! {
            biased;
            _ = stop.changed() => return,
            received = socket.recv_from(&mut buf[HEADER_ROOM..]) => received,
        };
        let (len, client) = match received {
            Ok(received) => received,
            Err(err) => {
                // An ICMP error from an earlier send, or a signal: nothing to back off from.
                // Per datagram, so at trace level only.
                tracing::trace!(listener = %frontend.config.name, %err, "recv failed");
                continue;
            }
        };
        let source = Source::new(client.ip());
        let decided = gate.pass(&frontend.metrics, source, Transport::Udp, len as u64);
        if decided.decision.verdict != Verdict::Allow {
            continue;
        }
        match frontend.session(&socket, client) {
            Ok(session) => {
                session.touch(frontend.millis());
                if let Err(err) = session.forward(&mut buf, HEADER_ROOM, len).await {
                    // Per datagram (an ICMP port unreachable from a down upstream), so at
                    // trace level only; the session stays until idle.
                    tracing::trace!(listener = %frontend.config.name, %err, "send upstream failed");
                }
            }
            Err(NoSession::Cap(refusal)) => {
                let _counted_only = gate.refuse(&frontend.metrics, refusal, client.ip());
            }
            Err(NoSession::Socket(err)) => {
                if gate.refuse(&frontend.metrics, Refusal::SessionSocket, client.ip()) {
                    tracing::warn!(
                        listener = %frontend.config.name,
                        %client,
                        %err,
                        "cannot open an upstream socket for a new session; datagram dropped"
                    );
                }
            }
        }
    }
}
