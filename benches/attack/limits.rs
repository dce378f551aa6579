//! The limits, stated once, and what each proxy can make of them. Every proxy gets the same
//! numbers; where one cannot express a limit, [`Limits::unexpressed`] says so and the table's
//! notes carry it.

use std::time::Duration;

use tollgate_benches::kind::Kind;

/// The policy every proxy under attack enforces.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// New connections (or datagrams) per source address (IPv4 /32, IPv6 /64) per `period`.
    pub(crate) per_source: u64,
    /// The same per network (IPv4 /24, IPv6 /48).
    pub(crate) per_network: u64,
    /// The window both rates count over.
    pub(crate) period: Duration,
    /// Connections open at once per source address.
    pub(crate) open_per_source: u64,
    /// Connections open at once per TCP listener.
    pub(crate) open_per_listener: u64,
    /// How long a source over its limit from [`Limits::TARPIT_SOURCES`] is held (tarpit).
    pub(crate) tarpit: Duration,
    /// How long a relayed connection may stay silent.
    pub(crate) idle_timeout: Duration,
    /// How long a trusted balancer may take to send a PROXY header.
    pub(crate) proxy_header_timeout: Duration,
    /// How long an admin (metrics) client may take to send its request head.
    pub(crate) admin_header_timeout: Duration,
    /// A UDP client session ends after this long without traffic.
    pub(crate) udp_session_timeout: Duration,
    /// Entries in a per-key table (HAProxy stick tables); tollgate's sketch is sized in bytes
    /// ([`Limits::SKETCH`]) and nginx's zones too ([`Limits::NGINX_ZONE`]).
    pub(crate) table_entries: u64,
}

impl Limits {
    /// The sources the tarpit (`delay`) rule applies to.
    pub(crate) const TARPIT_SOURCES: &str = "127.66.0.0/16";
    /// The balancers whose PROXY headers are believed.
    pub(crate) const BALANCERS: &str = "127.0.0.200/29";
    /// tollgate's sketch memory.
    pub(crate) const SKETCH: &str = "16MiB";
    /// Each nginx `limit_conn` zone.
    pub(crate) const NGINX_ZONE: &str = "10m";

    /// The limits of every run.
    pub(crate) fn standard() -> Limits {
        Limits {
            per_source: 100,
            per_network: 1_000,
            period: Duration::from_secs(10),
            open_per_source: 20,
            open_per_listener: 500,
            tarpit: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(60),
            proxy_header_timeout: Duration::from_secs(3),
            admin_header_timeout: Duration::from_secs(10),
            udp_session_timeout: Duration::from_secs(30),
            table_entries: 200_000,
        }
    }

    /// What `kind` cannot express of these limits (today's configuration language).
    pub(crate) fn unexpressed(kind: Kind) -> &'static [&'static str] {
        match kind {
            Kind::Tollgate => &[],
            Kind::Haproxy => &[
                "no UDP",
                "PROXY header wait bounded by `timeout client`, not a header timeout",
            ],
            Kind::Nginx => &[
                "no connection or datagram rates (limit_req is HTTP-only): open-connection caps only",
                "no per-/24 or /48 limits",
                "no tarpit: the tarpit source gets the plain caps",
            ],
            Kind::Direct => &["not a proxy"],
        }
    }

    /// One line per limit, for the report.
    pub(crate) fn describe(&self) -> Vec<String> {
        let secs = |d: Duration| d.as_secs_f64();
        vec![
            format!(
                "rate: {} new connections or datagrams per {} s per source (IPv4 /32, IPv6 /64), {} per /24 or /48",
                self.per_source,
                secs(self.period),
                self.per_network
            ),
            format!(
                "open: {} connections per source, {} per TCP listener",
                self.open_per_source, self.open_per_listener
            ),
            format!(
                "tarpit: sources in {} over a rate are held {} s",
                Limits::TARPIT_SOURCES,
                secs(self.tarpit)
            ),
            format!(
                "timeouts: idle {} s, PROXY header {} s (balancers {}), admin request head {} s, UDP session {} s",
                secs(self.idle_timeout),
                secs(self.proxy_header_timeout),
                Limits::BALANCERS,
                secs(self.admin_header_timeout),
                secs(self.udp_session_timeout)
            ),
            format!(
                "state: tollgate sketch {}, HAProxy stick tables {} entries, nginx zones {}",
                Limits::SKETCH,
                self.table_entries,
                Limits::NGINX_ZONE
            ),
        ]
    }
}
