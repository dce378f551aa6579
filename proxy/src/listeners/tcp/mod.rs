//! TCP listeners: accept, learn the source (from a trusted peer's PROXY header, or the peer
//! address), decide, then forward to an upstream or carry out the verdict.

pub(crate) mod actions;
pub(crate) mod budget;
pub(crate) mod opening;
pub(crate) mod relay;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::io::unix::AsyncFd;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tollgate_filter::{Action, DenyReason, PrefixMap, Source, Transport, Verdict};

use crate::config::{Listener, SendProxy};
use crate::gate::{Decided, Gate};
use crate::listener_metrics::{ListenerMetrics, Refusal};
use crate::listeners::proxy_protocol::{self, Header, V2Transport};
use crate::listeners::socket;
use crate::listeners::upstream::Pool;
use actions::ReplyValues;
use budget::{Budget, Ticket, Use};
use opening::Opening;
use relay::{Ended, Screen};

/// The shortest and longest pause after an accept that failed for lack of a resource.
const ACCEPT_BACKOFF: (Duration, Duration) = (Duration::from_millis(5), Duration::from_secs(1));
/// The shortest wait between rechecks of a held connection.
const TARPIT_STEP: Duration = Duration::from_millis(50);
/// Relay buffer per direction. tokio zeroes it for every connection: 64 KiB cost 11-13 us of
/// CPU per short connection in `memset` (perf, load tool); 16 KiB is what HAProxy and nginx
/// use and still moves a bulk transfer well past a gigabyte per second here.
const RELAY_BUFFER: usize = 16 << 10;
/// Connections accepted per readiness wake before other tasks get a turn.
const ACCEPT_BATCH: usize = 64;
/// How often each accept loop wakes by itself: it keeps a timer pending no further away than
/// this. Tokio's timer wakes its driver through an eventfd (a `write`, and one more
/// `epoll_wait` to take it back) whenever a timer is set earlier than the driver's next
/// planned wake-up, which with no timer pending is every timer, so each connection's connect
/// timeout cost that (strace, load tool: 0.70 per short connection, 1.0 per one-at-a-time
/// exchange). With this tick pending, a connect timeout (1 s by default) is later and wakes
/// nothing. It costs an idle proxy ten wake-ups a second per TCP listener.
const TICK: Duration = Duration::from_millis(100);
/// What a TCP connection weighs under `weight = "bytes"` (and `"events"`): its size is not
/// known when it is decided, at accept, so a bytes limit on TCP counts connections, as the
/// README says. (A weight of 0 let every connection through a bytes rule.)
const CONNECTION_WEIGHT: u64 = 1;

/// One TCP listener's fixed parts.
#[derive(Debug)]
pub(crate) struct Frontend {
    /// Its config.
    pub(crate) config: Listener,
    /// Its counters.
    pub(crate) metrics: ListenerMetrics,
    pool: Pool,
    trusted: PrefixMap<()>,
    /// What one source, one network and everyone may hold, forwarded and held apart.
    budget: Budget,
}

impl Frontend {
    /// The fixed parts of listener `config`.
    #[must_use]
    pub(crate) fn new(config: Listener, gate: &Gate) -> Frontend {
        let mut trusted = PrefixMap::new();
        for cidr in &config.trusted_proxies {
            trusted.insert(cidr.addr, cidr.prefix, ());
        }
        let metrics = gate.metrics().listeners.listener(&config.name);
        Frontend {
            pool: Pool::new(&config),
            trusted,
            budget: Budget::new(
                &config,
                metrics.open.clone(),
                metrics.held.clone(),
                metrics.header_waits.clone(),
            ),
            metrics,
            config,
        }
    }

    fn trusts(&self, peer: IpAddr) -> bool {
        !self.trusted.is_empty() && self.trusted.longest_match(Source::new(peer)).is_some()
    }

    /// Connections open now: forwarded, reading a trusted peer's header, and held.
    #[must_use]
    pub(crate) fn open(&self) -> usize {
        self.budget.forwarding() + self.budget.header_waits() + self.budget.held()
    }

    /// Rejections held now (`delay`, `close`, `reply`).
    #[must_use]
    pub(crate) fn held(&self) -> usize {
        self.budget.held()
    }

    /// Counts a connection refused by one of its budgets' caps or for opening with a PROXY
    /// header that it may not send (and, for what is the source's own doing, records it as an
    /// offender: see [`Refusal::offence`]).
    fn refuse(&self, gate: &Gate, refusal: Refusal, source: IpAddr) {
        let _counted_only = gate.refuse(&self.metrics, refusal, source);
    }
}

/// Accepts until `stop` says so. An accept that fails for lack of a resource (the open-file
/// limit, buffers, memory) backs off, doubling from 5 ms to 1 s, instead of spinning; other
/// accept errors concern one connection and are skipped.
///
/// Accepting goes through the plain socket (`AsyncFd` only waits for readiness), so a
/// connection that is reset at once costs accept, setsockopt and close: no task, no epoll
/// registration. Only connections that go on become tokio streams.
pub(crate) async fn serve(
    gate: Arc<Gate>,
    frontend: Arc<Frontend>,
    listener: AsyncFd<std::net::TcpListener>,
    mut stop: watch::Receiver<bool>,
) {
    let mut backoff = ACCEPT_BACKOFF.0;
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // One wait for the stop, kept across the loop: a new one per wake-up registered and
    // dropped a waiter each time (callgrind: 360 instructions per wake-up).
    let stopped = stop.changed();
    tokio::pin!(stopped);
    loop {
        let ready = tokio::select! {
            biased;
            _ = &mut stopped => return,
            ready = listener.readable() => ready,
            // Nothing to do: the tick only keeps a timer pending (see `TICK`).
            _ = tick.tick() => continue,
        };
        let Ok(mut ready) = ready else {
            return;
        };
        // Drain the accept queue, a bounded batch at a time so other tasks get their turn.
        let mut drained = false;
        for _ in 0..ACCEPT_BATCH {
            match ready.try_io(|listener| listener.get_ref().accept()) {
                Ok(Ok((stream, peer))) => {
                    backoff = ACCEPT_BACKOFF.0;
                    arrive(&gate, &frontend, stream, peer);
                }
                Ok(Err(err)) if socket::is_resource_exhaustion(&err) => {
                    frontend.metrics.accept_errors.inc();
                    if gate.logs().allow() {
                        tracing::warn!(listener = %frontend.config.name, %err, ?backoff, "accept failed; backing off");
                    }
                    tokio::select! {
                        _ = &mut stopped => return,
                        () = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(ACCEPT_BACKOFF.1);
                    break;
                }
                Ok(Err(err)) => {
                    frontend.metrics.accept_errors.inc();
                    tracing::debug!(listener = %frontend.config.name, %err, "accept failed");
                }
                // The queue is empty: wait for readiness again.
                Err(_would_block) => {
                    drained = true;
                    break;
                }
            }
        }
        // A full batch yields to the other tasks before the next; a drained queue does not
        // need to: the next wait finds no readiness and parks this task anyway. A
        // yield there cost one more turn of the runtime per wake-up (callgrind, one rejected
        // connection at a time: 1.2 k of its 7.4 k user instructions).
        if !drained {
            tokio::task::yield_now().await;
        }
    }
}

/// A freshly accepted connection. From an untrusted peer the decision is made here, at once,
/// and so is its claim on the listener's budgets: a reset needs nothing more. A connection to
/// forward has its opening bytes read here too (see [`opening`]). Everything else becomes a
/// task.
fn arrive(
    gate: &Arc<Gate>,
    frontend: &Arc<Frontend>,
    mut stream: std::net::TcpStream,
    peer: SocketAddr,
) {
    let (decided, ticket) = if frontend.trusts(peer.ip()) {
        // Its header names the source later; until then it waits in a budget of its own,
        // counted for the peer, so that slow headers cannot take the forwarding slots.
        let peer_source = Some(Source::new(peer.ip()));
        (None, frontend.budget.claim(gate, Use::Header, peer_source))
    } else {
        let source = Source::new(peer.ip());
        let decided = gate.pass(&frontend.metrics, source, Transport::Tcp, CONNECTION_WEIGHT);
        if resets(&decided) {
            socket::reset_on_close(&stream);
            return;
        }
        let ticket = frontend
            .budget
            .claim(gate, budget_for(&decided), Some(source));
        (Some(decided), ticket)
    };
    let ticket = match ticket {
        Ok(ticket) => ticket,
        Err(refusal) => {
            frontend.refuse(gate, refusal, peer.ip());
            socket::reset_on_close(&stream);
            return;
        }
    };
    if let Err(err) = stream.set_nonblocking(true) {
        tracing::debug!(listener = %frontend.config.name, %err, "cannot register a connection");
        return;
    }
    let forwarded = decided
        .as_ref()
        .is_some_and(|decided| decided.decision.verdict == Verdict::Allow);
    let opening = if forwarded {
        opening::read(&mut stream)
    } else {
        Opening::Nothing
    };
    if opening == Opening::ProxyHeader {
        frontend.refuse(gate, Refusal::UntrustedHeader, peer.ip());
        socket::reset_on_close(&stream);
        return;
    }
    let stream = match TcpStream::from_std(stream) {
        Ok(stream) => stream,
        Err(err) => {
            tracing::debug!(listener = %frontend.config.name, %err, "cannot register a connection");
            return;
        }
    };
    // Boxed where it is made: tokio moves a spawned future by value a few times before it
    // reaches its task (callgrind: `memcpy` of it was 17% of the user instructions per short
    // connection); a box moves as a pointer.
    tokio::spawn(Box::pin(connection(
        Arc::clone(gate),
        Arc::clone(frontend),
        stream,
        peer,
        ticket,
        decided,
        opening,
    )));
}

/// The budget a decision that is not a reset draws on: forwarding for an allowed connection,
/// held for a rejection that keeps its connection a while.
fn budget_for(decided: &Decided) -> Use {
    if decided.decision.verdict == Verdict::Allow {
        Use::Forward
    } else {
        Use::Held
    }
}

/// Whether a decision is carried out by a plain reset.
fn resets(decided: &Decided) -> bool {
    match decided.decision.verdict {
        Verdict::Allow => false,
        Verdict::Throttle(throttle) => throttle.action == Action::Reset,
        Verdict::Deny(DenyReason::Penalty { .. }) => {
            decided.rule().map(|rule| rule.action) == Some(Action::Reset)
        }
        Verdict::Deny(_) => true,
    }
}

/// Where a connection comes from and was going to.
struct Origin {
    source: SocketAddr,
    /// Where the client connected to; `None` until needed (it costs a getsockname).
    destination: Option<SocketAddr>,
    /// The start of the client's payload, read already: past a trusted peer's PROXY header,
    /// or at accept (screened there).
    early: Vec<u8>,
    /// Whether the client's opening bytes need no more screening for a PROXY header: the peer
    /// is a trusted proxy (and sent one), or they were screened at accept.
    screened: bool,
}

/// A connection's life after accept. `decided` is the decision made at accept for an untrusted
/// peer; a trusted peer's connection is decided here, once its PROXY header is read. `ticket`
/// is its claim on the listener's budgets, kept for its whole life. `opening` is what an
/// untrusted peer's connection to forward sent before accept was done with it.
async fn connection(
    gate: Arc<Gate>,
    frontend: Arc<Frontend>,
    mut client: TcpStream,
    peer: SocketAddr,
    ticket: Ticket,
    decided: Option<Decided>,
    opening: Opening,
) {
    let (origin, decided, ticket) = match decided {
        Some(decided) => {
            let (early, screened) = match opening {
                Opening::Bytes(bytes) => (bytes, true),
                Opening::Nothing | Opening::ProxyHeader => (Vec::new(), false),
            };
            (
                Origin {
                    source: peer,
                    destination: None,
                    early,
                    screened,
                },
                decided,
                ticket,
            )
        }
        None => {
            let Some(origin) = origin(&gate, &frontend, &mut client, peer).await else {
                actions::reset(client);
                return;
            };
            let source = Source::new(origin.source.ip());
            let decided =
                gate.pass_named(&frontend.metrics, source, Transport::Tcp, CONNECTION_WEIGHT);
            if resets(&decided) {
                actions::reset(client);
                return;
            }
            // The header named the source: from the header wait to the budget its decision
            // draws on, where its own caps count.
            drop(ticket);
            let ticket = frontend
                .budget
                .claim(&gate, budget_for(&decided), Some(source));
            match ticket {
                Ok(ticket) => (origin, decided, ticket),
                Err(refusal) => {
                    frontend.refuse(&gate, refusal, origin.source.ip());
                    actions::reset(client);
                    return;
                }
            }
        }
    };
    let source = Source::new(origin.source.ip());
    let _ticket = if let Verdict::Throttle(throttle) = decided.decision.verdict
        && throttle.action == Action::Delay
    {
        let held = tarpit(&gate, &frontend, &decided, throttle.retry_after, source);
        let released = tokio::select! {
            released = held => released,
            () = hung_up(&client) => false,
        };
        if !released {
            actions::close(client).await;
            return;
        }
        // Let through: from the held budget to the forwarding one.
        drop(ticket);
        match frontend.budget.claim(&gate, Use::Forward, Some(source)) {
            Ok(ticket) => ticket,
            Err(refusal) => {
                frontend.refuse(&gate, refusal, origin.source.ip());
                actions::reset(client);
                return;
            }
        }
    } else if decided.decision.verdict != Verdict::Allow {
        enforce(&decided, client).await;
        return;
    } else {
        ticket
    };
    forward(&gate, &frontend, client, origin).await;
}

/// Holds a throttled connection (a timer: no thread, no buffer) until its source is back under
/// its limits, rechecking when the verdict says to retry, for at most the rule's `delay`.
/// True if it may go on.
async fn tarpit(
    gate: &Gate,
    frontend: &Frontend,
    decided: &Decided,
    mut retry_after: Duration,
    source: Source,
) -> bool {
    let Verdict::Throttle(_) = decided.decision.verdict else {
        return true;
    };
    let bound = decided
        .rule()
        .and_then(|rule| rule.delay)
        .unwrap_or(gate.delay());
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        let wake = (tokio::time::Instant::now() + retry_after.max(TARPIT_STEP)).min(deadline);
        tokio::time::sleep_until(wake).await;
        let again = gate.recheck(source, Transport::Tcp);
        match again.decision.verdict {
            Verdict::Allow => {
                frontend.metrics.released.inc();
                return true;
            }
            Verdict::Throttle(t) if tokio::time::Instant::now() < deadline => {
                retry_after = t.retry_after;
            }
            _ => return false,
        }
    }
}

/// Completes when the client closes or fails before sending anything: a held connection whose
/// client left gives its slot back at once. Once the client has sent data, a hang-up cannot be
/// seen without reading, so this waits forever (the hold's own bound ends it).
async fn hung_up(client: &TcpStream) {
    let mut one = [0u8; 1];
    match client.peek(&mut one).await {
        Ok(0) | Err(_) => {}
        Ok(_) => std::future::pending().await,
    }
}

/// The origin a trusted peer's PROXY header names (it must send one in time). `None` if the
/// header is bad or late (counted and logged).
async fn origin(
    gate: &Gate,
    frontend: &Frontend,
    client: &mut TcpStream,
    peer: SocketAddr,
) -> Option<Origin> {
    let read = tokio::time::timeout(
        frontend.config.proxy_header_timeout,
        proxy_protocol::read_header(client),
    )
    .await;
    let why = match read {
        Ok(Ok((header, early))) => {
            let (source, destination) = match header {
                Header::Proxied {
                    source,
                    destination,
                } => (source, Some(destination)),
                Header::Local => (peer, None),
            };
            return Some(Origin {
                source,
                destination,
                early,
                screened: true,
            });
        }
        Ok(Err(err)) => err.to_string(),
        Err(_) => format!(
            "no PROXY header within {:?}",
            frontend.config.proxy_header_timeout
        ),
    };
    if gate.refuse(&frontend.metrics, Refusal::BadHeader, peer.ip()) {
        tracing::warn!(listener = %frontend.config.name, %peer, %why, "bad PROXY header; connection closed");
    }
    None
}

/// Carries out a rejecting verdict: the rule's action for a throttle or a penalty, a reset for
/// a listed source.
async fn enforce(decided: &Decided, client: TcpStream) {
    let rule = decided.rule();
    let (rule, values) = match decided.decision.verdict {
        Verdict::Throttle(t) => {
            let window = rule
                .and_then(|r| r.limits.get(t.at.limit))
                .map_or(Duration::ZERO, |l| l.rate.per);
            (
                rule,
                ReplyValues {
                    rule: rule.map_or("", |r| r.name.as_str()),
                    limit: t.allowed,
                    window,
                    estimate: t.estimate,
                    retry_after: t.retry_after,
                },
            )
        }
        Verdict::Deny(DenyReason::Penalty { .. }) => {
            let first = rule.and_then(|r| r.limits.first());
            (
                rule,
                ReplyValues {
                    rule: rule.map_or("", |r| r.name.as_str()),
                    limit: first.map_or(0, |l| l.rate.count),
                    window: first.map_or(Duration::ZERO, |l| l.rate.per),
                    estimate: 0,
                    retry_after: rule.and_then(|r| r.penalty).unwrap_or_default(),
                },
            )
        }
        _ => return actions::reset(client),
    };
    let Some(rule) = rule else {
        return actions::reset(client);
    };
    match rule.action {
        Action::Reset => actions::reset(client),
        Action::Close | Action::Drop | Action::Delay => actions::close(client).await,
        Action::Reply => {
            let template = rule.reply.as_deref().unwrap_or(actions::DEFAULT_REPLY);
            actions::reply(client, &actions::render(template, &values)).await;
        }
    }
}

/// Relays between the client and an upstream until both directions end (a half-close is passed
/// on: when one side finishes sending, the other side's write half is shut down), or until
/// nothing moves either way for the listener's `idle_timeout`.
async fn forward(gate: &Gate, frontend: &Frontend, mut client: TcpStream, origin: Origin) {
    let destination = || {
        origin
            .destination
            .or_else(|| client.local_addr().ok())
            .unwrap_or(frontend.config.listen)
    };
    let header = match frontend.config.send_proxy {
        SendProxy::None => Vec::new(),
        SendProxy::V1 => proxy_protocol::encode_v1(origin.source, destination()),
        SendProxy::V2 => {
            proxy_protocol::encode_v2(origin.source, destination(), V2Transport::Stream)
        }
    };
    let preamble = if header.is_empty() {
        origin.early
    } else {
        [header, origin.early].concat()
    };
    // The connect sends what it can of the preamble at once (see `upstream`).
    let Some((mut upstream, sent)) = frontend
        .pool
        .connect(&gate.metrics().listeners, &frontend.metrics, &preamble)
        .await
    else {
        actions::close(client).await;
        return;
    };
    let rest = &preamble[sent..];
    // An upstream that does not read must not hold the connection: the header write gets the
    // connect timeout.
    if !rest.is_empty() {
        let written =
            tokio::time::timeout(frontend.config.connect_timeout, upstream.write_all(rest)).await;
        if !matches!(written, Ok(Ok(()))) {
            if let Ok(address) = upstream.peer_addr() {
                gate.metrics()
                    .listeners
                    .upstream_error(&frontend.metrics, address);
            }
            actions::reset(client);
            return;
        }
    }
    // Every peer that is not a trusted proxy is checked, whether or not any peer is trusted:
    // with no `trusted_proxies` a header would otherwise reach the upstream as payload, where a
    // backend that reads PROXY headers would believe it. Its opening bytes were checked at
    // accept if they had arrived by then; if not, the relay checks the client's first read
    // before forwarding it, unless the upstream speaks first (a server-first protocol).
    let screen = if origin.screened {
        Screen::Nothing
    } else {
        Screen::ProxyHeader
    };
    let idle = frontend.config.idle_timeout;
    match relay::relay(&mut client, &mut upstream, RELAY_BUFFER, idle, screen).await {
        Ended::Finished => {}
        Ended::Idle => {
            frontend.metrics.idle_closed.inc();
        }
        Ended::ProxyHeader => {
            frontend.refuse(gate, Refusal::UntrustedHeader, origin.source.ip());
            actions::reset(client);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::task::Poll;

    use super::*;
    use crate::config::ProxyConfig;

    /// The shared state and listener of one rule that holds a source over 1 connection an
    /// hour for at most `delay`: its verdict stays a throttle for the whole hold.
    fn holding(delay: &str) -> (Arc<Gate>, Frontend) {
        let text = format!(
            "[[listener]]\nname = \"l\"\nlisten = \"127.0.0.1:0\"\nupstreams = [\"127.0.0.1:1\"]\n\n\
             [[rule]]\nname = \"r\"\nlimits = [{{ rate = \"1/3600s\" }}]\naction = \"delay\"\n\
             delay = \"{delay}\"\n"
        );
        let config = ProxyConfig::parse(&text).unwrap();
        let listener = config.listeners[0].clone();
        let shared = Arc::clone(crate::server::shared_state(config, None).unwrap().gate());
        let frontend = Frontend::new(listener, &shared);
        (shared, frontend)
    }

    /// A held connection sleeps between its rechecks: on a paused clock it wakes at most once
    /// per `TARPIT_STEP` (plus its first poll and the wake at its bound), and is let go at its
    /// bound. A hold whose next wake lands in the past rechecks in a loop, burning CPU for every
    /// connection an attacker keeps held; on a paused clock no time passes while it spins, so
    /// the count of wakes against the clock stops it here instead of hanging.
    #[tokio::test(start_paused = true)]
    async fn a_held_connection_wakes_once_per_recheck_not_in_a_loop() {
        let (shared, frontend) = holding("2s");
        let source = Source::new("192.0.2.1".parse().unwrap());
        let first = shared.pass(&frontend.metrics, source, Transport::Tcp, CONNECTION_WEIGHT);
        assert_eq!(first.decision.verdict, Verdict::Allow);
        let decided = shared.pass(&frontend.metrics, source, Transport::Tcp, CONNECTION_WEIGHT);
        assert!(
            matches!(decided.decision.verdict, Verdict::Throttle(_)),
            "{:?}",
            decided.decision.verdict
        );
        let start = tokio::time::Instant::now();
        // Held from a verdict that says to retry at once: the step is the floor.
        let mut hold = std::pin::pin!(tarpit(&shared, &frontend, &decided, Duration::ZERO, source));
        let mut wakes = 0_u32;
        let mut most = 0_u32;
        let released = std::future::poll_fn(|cx| {
            wakes += 1;
            let steps = start.elapsed().as_nanos() / TARPIT_STEP.as_nanos();
            most = 2 + u32::try_from(steps).unwrap();
            if wakes > most {
                return Poll::Ready(None);
            }
            hold.as_mut().poll(cx).map(Some)
        })
        .await;
        assert_eq!(
            released,
            Some(false),
            "{wakes} wakes in {:?} (at most {most}): rechecked in a loop",
            start.elapsed()
        );
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(2),
            "let go at its bound"
        );
        assert!(wakes >= 3, "rechecked before its bound: {wakes} wakes");
        assert_eq!(frontend.metrics.released.get(), 0);
    }

    /// A stream that gives `left` bytes to reads, counting them, and takes every write.
    struct Bulk {
        left: usize,
        reads: usize,
    }

    impl tokio::io::AsyncRead for Bulk {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            let n = self.left.min(buf.remaining());
            buf.put_slice(&vec![b'x'; n]);
            self.left -= n;
            self.reads += 1;
            Poll::Ready(Ok(()))
        }
    }

    impl tokio::io::AsyncWrite for Bulk {
        fn poll_write(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// A bulk upload moves in reads of the relay's full buffer: a megabyte in about 64
    /// reads, not a syscall per few bytes (CPU a client could make the proxy spend per byte).
    #[tokio::test]
    async fn a_bulk_transfer_is_relayed_in_full_buffers() {
        const SIZE: usize = 1 << 20;
        let mut client = Bulk {
            left: SIZE,
            reads: 0,
        };
        let mut upstream = Bulk { left: 0, reads: 0 };
        let idle = Duration::from_secs(60);
        let ended = relay::relay(
            &mut client,
            &mut upstream,
            RELAY_BUFFER,
            idle,
            Screen::Nothing,
        );
        assert_eq!(ended.await, Ended::Finished);
        assert_eq!(client.left, 0);
        // The first read's small buffer, the full ones, the end of the stream.
        assert!(
            client.reads <= 1 + SIZE / (16 << 10) + 1,
            "{} reads",
            client.reads
        );
    }
}
