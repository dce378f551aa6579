//! Prefix lengths per address family, validated once, and the masking they stand for.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// A prefix length for IPv4 (0 to 32 bits) or IPv6 (0 to 128 bits).
///
/// # Examples
/// ```
/// use std::net::Ipv4Addr;
/// use tollgate_filter::Prefix;
/// let slash24 = Prefix::v4(24)?;
/// assert_eq!(slash24.mask_v4(Ipv4Addr::new(203, 0, 113, 77)), Ipv4Addr::new(203, 0, 113, 0));
/// assert!(Prefix::v4(33).is_err());
/// # Ok::<(), tollgate_filter::PrefixError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Prefix {
    /// An IPv4 prefix length, `0..=32`.
    V4(u8),
    /// An IPv6 prefix length, `0..=128`.
    V6(u8),
}

/// A prefix length longer than its family's address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrefixError {
    /// The length given.
    pub len: u32,
    /// The family's address length in bits (32 or 128).
    pub max: u32,
}

impl fmt::Display for PrefixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let family = if self.max == 32 { "IPv4" } else { "IPv6" };
        write!(
            f,
            "prefix length /{} is longer than an {family} address ({} bits)",
            self.len, self.max
        )
    }
}

impl std::error::Error for PrefixError {}

impl Prefix {
    /// An IPv4 prefix length.
    ///
    /// # Errors
    /// [`PrefixError`] if `len` is over 32.
    pub fn v4(len: u32) -> Result<Prefix, PrefixError> {
        u8::try_from(len)
            .ok()
            .filter(|&len| len <= 32)
            .map(Prefix::V4)
            .ok_or(PrefixError { len, max: 32 })
    }

    /// An IPv6 prefix length.
    ///
    /// # Errors
    /// [`PrefixError`] if `len` is over 128.
    pub fn v6(len: u32) -> Result<Prefix, PrefixError> {
        u8::try_from(len)
            .ok()
            .filter(|&len| len <= 128)
            .map(Prefix::V6)
            .ok_or(PrefixError { len, max: 128 })
    }

    /// The length in bits.
    #[must_use]
    pub fn len(self) -> u8 {
        match self {
            Prefix::V4(len) | Prefix::V6(len) => len,
        }
    }

    /// Whether this is a zero-length prefix (the whole family).
    #[must_use]
    pub fn is_empty(self) -> bool {
        self.len() == 0
    }

    /// `addr` with every bit past the prefix cleared (an IPv6 length applied to IPv4 is taken
    /// as `/32`, the whole address).
    #[must_use]
    pub fn mask_v4(self, addr: Ipv4Addr) -> Ipv4Addr {
        let len = match self {
            Prefix::V4(len) => u32::from(len),
            Prefix::V6(_) => 32,
        };
        Ipv4Addr::from(mask_u32(u32::from(addr), len))
    }

    /// `addr` with every bit past the prefix cleared (an IPv4 length applied to IPv6 is taken
    /// as `/128`, the whole address).
    #[must_use]
    pub fn mask_v6(self, addr: Ipv6Addr) -> Ipv6Addr {
        let len = match self {
            Prefix::V6(len) => u32::from(len),
            Prefix::V4(_) => 128,
        };
        Ipv6Addr::from(mask_u128(u128::from(addr), len))
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Prefix::V4(len) => write!(f, "IPv4 /{len}"),
            Prefix::V6(len) => write!(f, "IPv6 /{len}"),
        }
    }
}

/// The top `len` bits of `bits` (`len` <= 32).
pub(crate) fn mask_u32(bits: u32, len: u32) -> u32 {
    // checked_shl: a shift by 32 (a /0 prefix) is the empty mask, not an overflow.
    bits & u32::MAX.checked_shl(32 - len).unwrap_or(0)
}

/// The top `len` bits of `bits` (`len` <= 128).
pub(crate) fn mask_u128(bits: u128, len: u32) -> u128 {
    // As in `mask_u32`.
    bits & u128::MAX.checked_shl(128 - len).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_are_checked_per_family() {
        assert_eq!(Prefix::v4(32), Ok(Prefix::V4(32)));
        assert_eq!(Prefix::v4(33), Err(PrefixError { len: 33, max: 32 }));
        assert_eq!(Prefix::v6(128), Ok(Prefix::V6(128)));
        assert_eq!(Prefix::v6(129), Err(PrefixError { len: 129, max: 128 }));
        assert_eq!(Prefix::v6(300), Err(PrefixError { len: 300, max: 128 }));
        assert_eq!(
            PrefixError { len: 33, max: 32 }.to_string(),
            "prefix length /33 is longer than an IPv4 address (32 bits)"
        );
    }

    #[test]
    fn the_edges_mask_nothing_or_everything() {
        assert_eq!(mask_u32(0xFFFF_FFFF, 0), 0);
        assert_eq!(mask_u32(0xFFFF_FFFF, 32), 0xFFFF_FFFF);
        assert_eq!(mask_u32(0xC0A8_0101, 16), 0xC0A8_0000);
        assert_eq!(mask_u128(u128::MAX, 0), 0);
        assert_eq!(mask_u128(u128::MAX, 128), u128::MAX);
        assert_eq!(mask_u128(u128::MAX, 64), u128::MAX << 64);
    }

    #[test]
    fn only_a_zero_length_is_empty_and_the_family_is_printed() {
        assert!(Prefix::V4(0).is_empty());
        assert!(Prefix::V6(0).is_empty());
        assert!(!Prefix::V4(24).is_empty());
        assert!(!Prefix::V6(64).is_empty());
        // Printed in rule shapes and messages: the family tells a v4 /32 from a v6 /32.
        assert_eq!(Prefix::V4(24).to_string(), "IPv4 /24");
        assert_eq!(Prefix::V6(32).to_string(), "IPv6 /32");
        assert_eq!(
            PrefixError { len: 129, max: 128 }.to_string(),
            "prefix length /129 is longer than an IPv6 address (128 bits)"
        );
    }
}
