//! One element of the kernel's sets: a network (an address and a prefix length) held for a
//! time.

use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

/// The table's sets, each with the `timeout` flag: interval sets for prefixes, hash sets for
/// single addresses (a hash set loads 100k addresses 3-4x faster than an interval set: see
/// the README).
pub(crate) const SETS: [&str; 4] = ["v4", "v4_hosts", "v6", "v6_hosts"];

/// The set of [`SETS`] that holds `network` / `len`.
#[must_use]
pub(crate) fn set_of(network: IpAddr, len: u8) -> &'static str {
    match (network, len) {
        (IpAddr::V4(_), 32) => "v4_hosts",
        (IpAddr::V4(_), _) => "v4",
        (IpAddr::V6(_), 128) => "v6_hosts",
        (IpAddr::V6(_), _) => "v6",
    }
}

/// A network to hold in the kernel, and for how long.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Element {
    /// The network's address, masked to `len`.
    pub network: IpAddr,
    /// The prefix length (32 or 128 for one address).
    pub len: u8,
    /// How long the kernel holds it.
    pub timeout: Duration,
    /// How far over its limit the source is (estimate / limit; penalties count as 1); the
    /// heaviest go in first.
    pub weight: f64,
}

impl Element {
    /// The set it belongs in (one of [`SETS`]): single addresses go into the hash sets
    /// (`v4_hosts`, `v6_hosts`), shorter prefixes into the interval sets (`v4`, `v6`).
    #[must_use]
    pub(crate) fn set(&self) -> &'static str {
        set_of(self.network, self.len)
    }

    /// Whether the two networks share an address (the kernel refuses overlapping intervals
    /// in one set).
    #[must_use]
    pub(crate) fn overlaps(&self, network: IpAddr, len: u8) -> bool {
        let shorter = self.len.min(len);
        match (self.network, network) {
            (IpAddr::V4(a), IpAddr::V4(b)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(shorter)).unwrap_or(0);
                u32::from(a) & mask == u32::from(b) & mask
            }
            (IpAddr::V6(a), IpAddr::V6(b)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(shorter)).unwrap_or(0);
                u128::from(a) & mask == u128::from(b) & mask
            }
            _ => false,
        }
    }
}

/// The element as nft's input writes it: `192.0.2.0/24 timeout 1500ms`, or
/// `192.0.2.1 timeout 1500ms` for one address.
impl fmt::Display for Element {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // nft's smallest timeout unit is the millisecond; round up so none is zero.
        let ms = self.timeout.as_nanos().div_ceil(1_000_000).max(1);
        write!(f, "{} timeout {ms}ms", Written(self.network, self.len))
    }
}

/// A network as nft's input writes it, with no timeout: `192.0.2.0/24`, or `192.0.2.1` for
/// one address (the hash sets take no prefix length).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Written(pub(crate) IpAddr, pub(crate) u8);

impl fmt::Display for Written {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if set_of(self.0, self.1).ends_with("_hosts") {
            write!(f, "{}", self.0)
        } else {
            write!(f, "{}/{}", self.0, self.1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn element(network: &str, len: u8) -> Element {
        Element {
            network: network.parse().unwrap(),
            len,
            timeout: Duration::from_micros(1500),
            weight: 1.0,
        }
    }

    #[test]
    fn overlap_is_shared_addresses() {
        let net = element("192.0.2.0", 24);
        assert!(net.overlaps("192.0.2.77".parse().unwrap(), 32));
        assert!(net.overlaps("192.0.0.0".parse().unwrap(), 16));
        assert!(!net.overlaps("192.0.3.0".parse().unwrap(), 24));
        assert!(!net.overlaps("::".parse().unwrap(), 0));
        let v6 = element("2001:db8:1::", 48);
        assert!(v6.overlaps("2001:db8:1:2::9".parse().unwrap(), 128));
        assert!(!v6.overlaps("2001:db8:2::".parse().unwrap(), 48));
        assert!(element("0.0.0.0", 0).overlaps("203.0.113.1".parse().unwrap(), 32));
    }

    #[test]
    fn written_as_nft_reads_it_in_whole_milliseconds() {
        assert_eq!(
            element("192.0.2.0", 24).to_string(),
            "192.0.2.0/24 timeout 2ms"
        );
        assert_eq!(element("2001:db8::", 64).set(), "v6");
        assert_eq!(
            element("192.0.2.1", 32).to_string(),
            "192.0.2.1 timeout 2ms"
        );
        assert_eq!(element("192.0.2.1", 32).set(), "v4_hosts");
        assert_eq!(element("2001:db8::1", 128).set(), "v6_hosts");
    }
}
