//! What one request may hold: every bound checked before any lookup or count, so a huge or
//! deep request costs its reading and a refusal, never a panic or an unbounded walk.
//!
//! The defaults leave room for what Envoy sends (a few descriptors of a few entries: a
//! header's value, a path, an address) many times over, and bound one request's work to a
//! few hundred lookups and tens of KiB hashed. The gRPC server bounds the message's size
//! before it is decoded; these bound what a decoded one may ask.

use std::fmt;

/// The most descriptors in one request, by default.
pub const MAX_DESCRIPTORS: usize = 64;
/// The most entries in one descriptor, by default.
pub const MAX_ENTRIES: usize = 32;
/// The longest domain, in bytes, by default.
pub const MAX_DOMAIN_BYTES: usize = 256;
/// The longest entry key, in bytes, by default.
pub const MAX_KEY_BYTES: usize = 256;
/// The longest entry value, in bytes, by default (paths and tokens fit).
pub const MAX_VALUE_BYTES: usize = 4_096;
/// The most bytes of domain, keys and values together in one request, by default.
pub const MAX_REQUEST_BYTES: usize = 64 << 10;

/// The bounds one request is checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// See [`MAX_DESCRIPTORS`].
    pub descriptors: usize,
    /// See [`MAX_ENTRIES`].
    pub entries: usize,
    /// See [`MAX_DOMAIN_BYTES`].
    pub domain_bytes: usize,
    /// See [`MAX_KEY_BYTES`].
    pub key_bytes: usize,
    /// See [`MAX_VALUE_BYTES`].
    pub value_bytes: usize,
    /// See [`MAX_REQUEST_BYTES`].
    pub request_bytes: usize,
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds {
            descriptors: MAX_DESCRIPTORS,
            entries: MAX_ENTRIES,
            domain_bytes: MAX_DOMAIN_BYTES,
            key_bytes: MAX_KEY_BYTES,
            value_bytes: MAX_VALUE_BYTES,
            request_bytes: MAX_REQUEST_BYTES,
        }
    }
}

/// Why a request is refused before any lookup: the reference's two request errors, or the
/// bound it passed (descriptor and entry indexes from 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// An empty domain (the reference: "rate limit domain must not be empty").
    EmptyDomain,
    /// No descriptors (the reference: "rate limit descriptor list must not be empty").
    NoDescriptors,
    /// The domain is longer than [`Bounds::domain_bytes`].
    DomainTooLong {
        /// Its length.
        bytes: usize,
        /// The bound.
        max: usize,
    },
    /// More descriptors than [`Bounds::descriptors`].
    TooManyDescriptors {
        /// How many.
        count: usize,
        /// The bound.
        max: usize,
    },
    /// A descriptor with more entries than [`Bounds::entries`].
    TooManyEntries {
        /// Which descriptor.
        descriptor: usize,
        /// How many entries.
        count: usize,
        /// The bound.
        max: usize,
    },
    /// An entry key longer than [`Bounds::key_bytes`].
    KeyTooLong {
        /// Which descriptor.
        descriptor: usize,
        /// Which entry.
        entry: usize,
        /// Its length.
        bytes: usize,
        /// The bound.
        max: usize,
    },
    /// An entry value longer than [`Bounds::value_bytes`].
    ValueTooLong {
        /// Which descriptor.
        descriptor: usize,
        /// Which entry.
        entry: usize,
        /// Its length.
        bytes: usize,
        /// The bound.
        max: usize,
    },
    /// More than [`Bounds::request_bytes`] of domain, keys and values together.
    RequestTooLarge {
        /// At least this many (counting stops at the bound).
        bytes: usize,
        /// The bound.
        max: usize,
    },
}

impl Refusal {
    /// The bound's name, as a metric label: `empty_domain`, `too_many_descriptors`, ...
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Refusal::EmptyDomain => "empty_domain",
            Refusal::NoDescriptors => "no_descriptors",
            Refusal::DomainTooLong { .. } => "domain_too_long",
            Refusal::TooManyDescriptors { .. } => "too_many_descriptors",
            Refusal::TooManyEntries { .. } => "too_many_entries",
            Refusal::KeyTooLong { .. } => "key_too_long",
            Refusal::ValueTooLong { .. } => "value_too_long",
            Refusal::RequestTooLarge { .. } => "request_too_large",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::EmptyDomain => write!(f, "rate limit domain must not be empty"),
            Refusal::NoDescriptors => write!(f, "rate limit descriptor list must not be empty"),
            Refusal::DomainTooLong { bytes, max } => {
                write!(f, "domain of {bytes} bytes, more than {max}")
            }
            Refusal::TooManyDescriptors { count, max } => {
                write!(f, "{count} descriptors, more than {max}")
            }
            Refusal::TooManyEntries {
                descriptor,
                count,
                max,
            } => write!(
                f,
                "descriptor {descriptor}: {count} entries, more than {max}"
            ),
            Refusal::KeyTooLong {
                descriptor,
                entry,
                bytes,
                max,
            } => write!(
                f,
                "descriptor {descriptor} entry {entry}: key of {bytes} bytes, more than {max}"
            ),
            Refusal::ValueTooLong {
                descriptor,
                entry,
                bytes,
                max,
            } => write!(
                f,
                "descriptor {descriptor} entry {entry}: value of {bytes} bytes, more than {max}"
            ),
            Refusal::RequestTooLarge { bytes, max } => {
                write!(f, "request of at least {bytes} bytes, more than {max}")
            }
        }
    }
}

impl std::error::Error for Refusal {}

impl Bounds {
    /// `Ok` if `request` is within every bound, else the first one it passes.
    ///
    /// # Errors
    /// The [`Refusal`] naming the bound.
    ///
    /// # Examples
    /// ```
    /// use tollgate_filter::{Bounds, Descriptor, Refusal, Request};
    /// let request = Request {
    ///     domain: "api".into(),
    ///     descriptors: vec![Descriptor::of(&[("k", "v")]); 65],
    ///     hits_addend: 1,
    /// };
    /// assert_eq!(
    ///     Bounds::default().check(&request),
    ///     Err(Refusal::TooManyDescriptors { count: 65, max: 64 })
    /// );
    /// ```
    pub fn check(&self, request: &super::Request) -> Result<(), Refusal> {
        if request.domain.is_empty() {
            return Err(Refusal::EmptyDomain);
        }
        if request.descriptors.is_empty() {
            return Err(Refusal::NoDescriptors);
        }
        if request.domain.len() > self.domain_bytes {
            return Err(Refusal::DomainTooLong {
                bytes: request.domain.len(),
                max: self.domain_bytes,
            });
        }
        if request.descriptors.len() > self.descriptors {
            return Err(Refusal::TooManyDescriptors {
                count: request.descriptors.len(),
                max: self.descriptors,
            });
        }
        let mut total = request.domain.len();
        for (d, descriptor) in request.descriptors.iter().enumerate() {
            if descriptor.entries.len() > self.entries {
                return Err(Refusal::TooManyEntries {
                    descriptor: d,
                    count: descriptor.entries.len(),
                    max: self.entries,
                });
            }
            for (e, entry) in descriptor.entries.iter().enumerate() {
                if entry.key.len() > self.key_bytes {
                    return Err(Refusal::KeyTooLong {
                        descriptor: d,
                        entry: e,
                        bytes: entry.key.len(),
                        max: self.key_bytes,
                    });
                }
                if entry.value.len() > self.value_bytes {
                    return Err(Refusal::ValueTooLong {
                        descriptor: d,
                        entry: e,
                        bytes: entry.value.len(),
                        max: self.value_bytes,
                    });
                }
                total += entry.key.len() + entry.value.len();
                if total > self.request_bytes {
                    return Err(Refusal::RequestTooLarge {
                        bytes: total,
                        max: self.request_bytes,
                    });
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Descriptor, Request};
    use super::*;

    fn request(descriptors: Vec<Descriptor>) -> Request {
        Request {
            domain: "d".into(),
            descriptors,
            hits_addend: 0,
        }
    }

    /// Each bound refuses one past it and passes at it, naming itself.
    #[test]
    fn each_bound_names_itself_one_past_it_and_passes_at_it() {
        let bounds = Bounds::default();
        let at = |n: usize| "x".repeat(n);
        let ok = request(vec![Descriptor::of(&[(
            &at(MAX_KEY_BYTES),
            &at(MAX_VALUE_BYTES),
        )])]);
        assert_eq!(bounds.check(&ok), Ok(()));
        let key = request(vec![Descriptor::of(&[(&at(MAX_KEY_BYTES + 1), "v")])]);
        assert_eq!(bounds.check(&key).unwrap_err().name(), "key_too_long");
        let value = request(vec![Descriptor::of(&[("k", &at(MAX_VALUE_BYTES + 1))])]);
        assert_eq!(bounds.check(&value).unwrap_err().name(), "value_too_long");
        let entries = vec![("k", "v"); MAX_ENTRIES + 1];
        let many = request(vec![Descriptor::of(&entries)]);
        assert_eq!(bounds.check(&many).unwrap_err().name(), "too_many_entries");
        let entries = vec![("k", "v"); MAX_ENTRIES];
        assert_eq!(
            bounds.check(&request(vec![Descriptor::of(&entries)])),
            Ok(())
        );
        // Every value at its bound, in descriptors at theirs: the total refuses it.
        let big = at(MAX_VALUE_BYTES);
        let wide = vec![("k", big.as_str()); MAX_ENTRIES];
        let huge = request(vec![Descriptor::of(&wide); MAX_DESCRIPTORS]);
        assert_eq!(bounds.check(&huge).unwrap_err().name(), "request_too_large");
        let mut empty = request(vec![Descriptor::default()]);
        assert_eq!(bounds.check(&empty), Ok(()));
        empty.domain.clear();
        assert_eq!(bounds.check(&empty), Err(Refusal::EmptyDomain));
        assert_eq!(bounds.check(&request(vec![])), Err(Refusal::NoDescriptors));
        let mut long = request(vec![Descriptor::default()]);
        long.domain = at(MAX_DOMAIN_BYTES + 1);
        assert_eq!(bounds.check(&long).unwrap_err().name(), "domain_too_long");
    }
}
