//! The service's bounds on its callers, so that one caller's flood leaves room for everyone
//! else: connections in all, per source address and per /24 (IPv4) or /64 (IPv6) prefix,
//! counted at accept, where one over a bound is closed before HTTP/2 starts; requests in
//! flight in all, per address and per prefix, counted from their headers to their answer,
//! where one over a bound is answered `RESOURCE_EXHAUSTED` at once, and each ended
//! (`CANCELLED`) at `request_timeout`; and two clocks per connection: its first request's
//! headers within `header_timeout`, then a new request within `idle_timeout`, else it is
//! closed (see `service.rs`: with an HTTP/2 GOAWAY), so an idle or slow connection holds no
//! slot for long.
//!
//! tonic has knobs for none of these: the accepted sockets pass through [`Admitted`], which
//! hands out each connection that fits as a [`Guarded`] (giving its slot back when dropped),
//! its [`Caller`] tells when the connection's deadline has passed, and the gRPC service is
//! wrapped per connection in [`Bounded`], which counts the requests in flight.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tonic::codegen::http;

use super::metrics::RlsMetrics;
use crate::config::CallerBounds;

/// How long an accepted connection may stay silent before the kernel probes it (TCP
/// keepalive): a peer that vanished without a FIN is found without waiting for the idle
/// timeout's request clock.
const TCP_KEEPALIVE: Duration = Duration::from_secs(60);

/// The callers' counts against their bounds; shared by the accept stream, every connection
/// and every request.
#[derive(Debug)]
pub(crate) struct Callers {
    bounds: CallerBounds,
    table: Mutex<Table>,
    /// Requests in flight from every caller.
    in_flight: AtomicUsize,
    metrics: RlsMetrics,
    /// The origin of the connections' deadlines, held as milliseconds after it.
    epoch: Instant,
}

/// Open connections: in all, per address and per prefix. An address or prefix is held only
/// while it has a connection open, so the table holds at most `max_connections` of each.
#[derive(Debug, Default)]
struct Table {
    total: usize,
    addresses: HashMap<IpAddr, Holder>,
    prefixes: HashMap<IpAddr, Holder>,
}

/// An address's or a prefix's open connections and requests in flight.
#[derive(Debug, Default)]
struct Holder {
    connections: usize,
    /// Requests in flight from this address or prefix, shared with its connections'
    /// [`Caller`]s.
    in_flight: Arc<AtomicUsize>,
}

impl Holder {
    /// Counts one more connection; its share of the requests in flight.
    fn open(&mut self) -> Arc<AtomicUsize> {
        self.connections += 1;
        Arc::clone(&self.in_flight)
    }
}

/// Counts a connection of `key` closed, forgetting `key` after its last.
fn close(holders: &mut HashMap<IpAddr, Holder>, key: IpAddr) {
    if let Some(holder) = holders.get_mut(&key) {
        holder.connections -= 1;
        if holder.connections == 0 {
            holders.remove(&key);
        }
    }
}

/// Which bound refused a connection or a request: the metric's `reason` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bound {
    /// `max_connections` or `max_requests_in_flight`: every caller's together.
    Total,
    /// `max_connections_per_address` or `max_requests_in_flight_per_address`.
    Address,
    /// `max_connections_per_prefix` or `max_requests_in_flight_per_prefix`.
    Prefix,
}

impl Bound {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Bound::Total => "total",
            Bound::Address => "address",
            Bound::Prefix => "prefix",
        }
    }
}

/// The /24 of an IPv4 address or the /64 of an IPv6 one (an IPv4-mapped IPv6 address is
/// its IPv4 address).
fn prefix(address: IpAddr) -> IpAddr {
    match address.to_canonical() {
        IpAddr::V4(v4) => IpAddr::V4(Ipv4Addr::from(v4.to_bits() & !0xff)),
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(v6.to_bits() & !u128::from(u64::MAX))),
    }
}

impl Callers {
    pub(crate) fn new(bounds: CallerBounds, metrics: RlsMetrics) -> Callers {
        Callers {
            bounds,
            table: Mutex::new(Table::default()),
            in_flight: AtomicUsize::new(0),
            metrics,
            epoch: Instant::now(),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        // Every update of the table completes under the lock: one a panic interrupted
        // cannot have left it half done.
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A slot for a connection from `address`, or the bound it is over.
    fn open(self: &Arc<Self>, address: IpAddr) -> Result<Slot, Bound> {
        let address = address.to_canonical();
        let prefix = prefix(address);
        let bounds = &self.bounds;
        let mut table = self.table();
        let from_address = table.addresses.get(&address).map_or(0, |a| a.connections);
        let from_prefix = table.prefixes.get(&prefix).map_or(0, |p| p.connections);
        if table.total >= bounds.max_connections {
            return Err(Bound::Total);
        }
        if from_address >= bounds.max_connections_per_address {
            return Err(Bound::Address);
        }
        if from_prefix >= bounds.max_connections_per_prefix {
            return Err(Bound::Prefix);
        }
        table.total += 1;
        let prefix_in_flight = table.prefixes.entry(prefix).or_default().open();
        let address_in_flight = table.addresses.entry(address).or_default().open();
        drop(table);
        self.metrics.connections.inc();
        Ok(Slot {
            callers: Arc::clone(self),
            address,
            address_in_flight,
            prefix_in_flight,
        })
    }

    /// Milliseconds from the epoch to `duration` after now.
    fn deadline_after(&self, duration: Duration) -> u64 {
        let at = self.epoch.elapsed() + duration;
        u64::try_from(at.as_millis()).unwrap_or(u64::MAX)
    }

    /// A request from `caller` enters, or the bound it is over (then nothing is counted).
    fn enter(self: &Arc<Self>, caller: &Caller) -> Result<Ticket, Bound> {
        caller.requested();
        let bounds = &self.bounds;
        let counts = [
            (&self.in_flight, bounds.max_requests_in_flight, Bound::Total),
            (
                &*caller.address_in_flight,
                bounds.max_requests_in_flight_per_address,
                Bound::Address,
            ),
            (
                &*caller.prefix_in_flight,
                bounds.max_requests_in_flight_per_prefix,
                Bound::Prefix,
            ),
        ];
        for (at, (count, max, bound)) in counts.iter().enumerate() {
            // Relaxed: a count compared with its bound; the request's data travels by the
            // service, not through these counters.
            if count.fetch_add(1, Ordering::Relaxed) >= *max {
                for (count, _, _) in &counts[..=at] {
                    count.fetch_sub(1, Ordering::Relaxed);
                }
                return Err(*bound);
            }
        }
        self.metrics.requests_in_flight.inc();
        Ok(Ticket {
            callers: Arc::clone(self),
            address: Arc::clone(&caller.address_in_flight),
            prefix: Arc::clone(&caller.prefix_in_flight),
        })
    }
}

/// A connection's place in the table, given back when the connection is dropped.
#[derive(Debug)]
struct Slot {
    callers: Arc<Callers>,
    address: IpAddr,
    address_in_flight: Arc<AtomicUsize>,
    prefix_in_flight: Arc<AtomicUsize>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut table = self.callers.table();
        table.total -= 1;
        close(&mut table.prefixes, prefix(self.address));
        close(&mut table.addresses, self.address);
        drop(table);
        self.callers.metrics.connections.dec();
    }
}

/// A request's place among those in flight, given back when its answer is ready.
#[derive(Debug)]
struct Ticket {
    callers: Arc<Callers>,
    address: Arc<AtomicUsize>,
    prefix: Arc<AtomicUsize>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        // Relaxed: see `Callers::enter`.
        self.callers.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.address.fetch_sub(1, Ordering::Relaxed);
        self.prefix.fetch_sub(1, Ordering::Relaxed);
        self.callers.metrics.requests_in_flight.dec();
    }
}

/// What a connection's requests share: its address's and its prefix's counts of requests
/// in flight, and the connection's deadline.
#[derive(Clone, Debug)]
pub(crate) struct Caller {
    address_in_flight: Arc<AtomicUsize>,
    prefix_in_flight: Arc<AtomicUsize>,
    clock: Arc<Clock>,
}

/// A connection's deadline: milliseconds after [`Callers::epoch`] by which it must send its
/// next request, pushed on by each request's arrival.
#[derive(Debug)]
struct Clock {
    callers: Arc<Callers>,
    deadline: AtomicU64,
    /// Whether a request arrived: which timeout a close counts under.
    requested: AtomicBool,
}

impl Caller {
    fn requested(&self) {
        let clock = &self.clock;
        let deadline = clock
            .callers
            .deadline_after(clock.callers.bounds.idle_timeout);
        // Relaxed: the connection's deadline task loads it and re-arms its timer; a late
        // view only closes a connection on the next request's deadline instead of this one's.
        clock.deadline.fetch_max(deadline, Ordering::Relaxed);
        clock.requested.store(true, Ordering::Relaxed);
    }

    /// Returns once the connection's deadline has passed (its first request's by
    /// `header_timeout`, each next one's by `idle_timeout` after the last), counting it as
    /// closed under the one that passed. Cancel-safe: it only reads the clock.
    pub(crate) async fn deadline(&self) {
        let clock = &self.clock;
        loop {
            // Relaxed: see `Caller::requested`.
            let deadline = clock.deadline.load(Ordering::Relaxed);
            let at = clock.callers.epoch + Duration::from_millis(deadline);
            if at <= Instant::now() {
                break;
            }
            tokio::time::sleep_until(at.into()).await;
        }
        let idle = clock.requested.load(Ordering::Relaxed);
        clock.callers.metrics.closed(idle);
    }

    /// The longest a request of this connection may take (`request_timeout`).
    pub(crate) fn request_timeout(&self) -> Duration {
        self.clock.callers.bounds.request_timeout
    }
}

/// An accepted connection holding its slot, given back when it is dropped.
#[derive(Debug)]
pub(crate) struct Guarded {
    stream: TcpStream,
    caller: Caller,
    _slot: Slot,
}

impl Guarded {
    /// What its requests share (see [`Caller`]).
    pub(crate) fn caller(&self) -> &Caller {
        &self.caller
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// The listener's connections that fit the bounds; one that does not is closed at once
/// (and counted), before a byte of HTTP/2.
#[derive(Debug)]
pub(crate) struct Admitted {
    listener: TcpListener,
    callers: Arc<Callers>,
}

impl Admitted {
    pub(crate) fn new(listener: TcpListener, callers: Arc<Callers>) -> Admitted {
        Admitted { listener, callers }
    }

    fn admit(&self, stream: TcpStream, peer: SocketAddr) -> Option<Guarded> {
        let slot = match self.callers.open(peer.ip()) {
            Ok(slot) => slot,
            Err(bound) => {
                self.callers.metrics.refused_connection(bound);
                return None;
            }
        };
        // Small answers, each wanted at once; a failure only costs latency or probes.
        let _ = stream.set_nodelay(true);
        let keepalive = socket2::TcpKeepalive::new().with_time(TCP_KEEPALIVE);
        let _ = socket2::SockRef::from(&stream).set_tcp_keepalive(&keepalive);
        let callers = &self.callers;
        let deadline = callers.deadline_after(callers.bounds.header_timeout);
        let clock = Arc::new(Clock {
            callers: Arc::clone(callers),
            deadline: AtomicU64::new(deadline),
            requested: AtomicBool::new(false),
        });
        Some(Guarded {
            stream,
            caller: Caller {
                address_in_flight: Arc::clone(&slot.address_in_flight),
                prefix_in_flight: Arc::clone(&slot.prefix_in_flight),
                clock,
            },
            _slot: slot,
        })
    }

    /// The next connection that fits the bounds. Cancel-safe, as `TcpListener::accept`.
    ///
    /// # Errors
    /// The listener's, as `accept` returns them (a full file table, say).
    pub(crate) async fn accept(&self) -> io::Result<Guarded> {
        loop {
            let (stream, peer) = self.listener.accept().await?;
            if let Some(guarded) = self.admit(stream, peer) {
                return Ok(guarded);
            }
        }
    }
}

/// The gRPC service of one connection behind the bounds on requests in flight: a request
/// over one is answered `RESOURCE_EXHAUSTED` without reaching the service, and one still
/// unanswered at `request_timeout` is answered `CANCELLED`.
#[derive(Clone, Debug)]
pub(crate) struct Bounded<S> {
    inner: S,
    caller: Caller,
}

impl<S> Bounded<S> {
    pub(crate) fn new(inner: S, caller: Caller) -> Bounded<S> {
        Bounded { inner, caller }
    }
}

type Answer = http::Response<tonic::body::Body>;

impl<S, B> tonic::codegen::Service<http::Request<B>> for Bounded<S>
where
    S: tonic::codegen::Service<http::Request<B>, Response = Answer, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = Answer;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Answer, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let callers = &self.caller.clock.callers;
        match callers.enter(&self.caller) {
            Ok(ticket) => {
                let timeout = callers.bounds.request_timeout;
                let answer = tokio::time::timeout(timeout, self.inner.call(request));
                Box::pin(async move {
                    let answer = match answer.await {
                        Ok(answer) => answer,
                        // As tonic's own request timeout answers.
                        Err(_) => Ok(tonic::Status::cancelled("Timeout expired").into_http()),
                    };
                    drop(ticket);
                    answer
                })
            }
            Err(bound) => {
                callers.metrics.refused_request(bound);
                let bounds = &callers.bounds;
                let (name, max) = match bound {
                    Bound::Total => ("max_requests_in_flight", bounds.max_requests_in_flight),
                    Bound::Address => (
                        "max_requests_in_flight_per_address",
                        bounds.max_requests_in_flight_per_address,
                    ),
                    Bound::Prefix => (
                        "max_requests_in_flight_per_prefix",
                        bounds.max_requests_in_flight_per_prefix,
                    ),
                };
                let status = tonic::Status::resource_exhausted(format!(
                    "{name}: {max} requests in flight; try again"
                ));
                Box::pin(std::future::ready(Ok(status.into_http())))
            }
        }
    }
}
