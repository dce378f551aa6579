//! Which proxy (or none) a column of a table measures.

use std::fmt;

use clap::ValueEnum;

/// A column: the proxies compared, and the upstream reached directly as a baseline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, ValueEnum)]
pub enum Kind {
    /// Straight to the upstreams: the baseline.
    Direct,
    /// tollgate, the release binary.
    Tollgate,
    /// HAProxy in `mode tcp`.
    Haproxy,
    /// nginx's `stream` module.
    Nginx,
}

impl Kind {
    /// The column's name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Kind::Direct => "direct",
            Kind::Tollgate => "tollgate",
            Kind::Haproxy => "haproxy",
            Kind::Nginx => "nginx",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
