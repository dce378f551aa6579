//! The workload: requests of three descriptors each (an API key; the same key and a path; the
//! key's user), the rules they are decided by, the streams of them, and the exact tally of
//! what each contender let through.
//!
//! A request is held as ids ([`Call`]) and written out as text when a contender decides it,
//! into strings it reuses (ours) or builds (limitador's context, the Redis keys), as each
//! would receive them from the gRPC message.

use std::fmt::Write as _;

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Zipf};

use crate::workload::scramble;

/// The paths a key's second descriptor names, one per request.
pub(crate) const PATHS: [&str; 4] = ["/v1/orders", "/v1/users", "/v1/search", "/v1/items"];
/// API keys per user: key `id` belongs to user `id / KEYS_PER_USER`.
pub(crate) const KEYS_PER_USER: u32 = 4;
/// The window of every rule, in seconds: an hour, so a whole run falls in one window and what
/// each contender let through per key can be checked against the limit with no window oracle.
pub(crate) const WINDOW_SECONDS: u64 = 3600;
/// Requests per hour per API key.
pub(crate) const LIMIT_KEY: u32 = 1000;
/// Requests per hour per API key and path.
pub(crate) const LIMIT_KEY_PATH: u32 = 100;
/// Requests per hour per user.
pub(crate) const LIMIT_USER: u32 = 2000;
/// The domain of the rules.
pub(crate) const DOMAIN: &str = "api";

/// The rules in envoyproxy/ratelimit's format, as Tollgate reads them.
pub(crate) const CONFIG: &str = "\
domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 1000}
    descriptors:
      - key: path
        rate_limit: {unit: hour, requests_per_unit: 100}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2000}
";

/// One request: the API key's id and the path's index.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Call {
    pub(crate) key: u32,
    pub(crate) path: u8,
}

impl Call {
    pub(crate) fn user(self) -> u32 {
        self.key / KEYS_PER_USER
    }

    pub(crate) fn path(self) -> &'static str {
        PATHS[usize::from(self.path) % PATHS.len()]
    }
}

/// Writes the API key of id `key` into `out`: 16 hex digits, scrambled so that frequent keys
/// are not small numbers.
pub(crate) fn write_key(key: u32, out: &mut String) {
    out.clear();
    let _ = write!(out, "{:016x}", scramble(u64::from(key)));
}

/// Writes the id of user `user` into `out`.
pub(crate) fn write_user(user: u32, out: &mut String) {
    out.clear();
    let _ = write!(out, "u{:012x}", scramble(u64::from(user) | 1 << 40) >> 16);
}

/// Each of `keys` keys once, paths in turn: every key is in the limiter before it is timed.
pub(crate) fn fill(keys: u32) -> Vec<Call> {
    (0..keys)
        .map(|key| Call {
            key,
            path: (key % 4) as u8,
        })
        .collect()
}

/// `len` requests of keys drawn from Zipf(1.1) over `keys` (key 0 the most frequent).
pub(crate) fn zipf(keys: u32, len: usize, seed: u64) -> Vec<Call> {
    let zipf = Zipf::new(f64::from(keys), 1.1).expect("valid Zipf parameters");
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..len)
        .map(|_| {
            // Zipf draws 1..=keys.
            let rank = zipf.sample(&mut rng) as u32;
            Call {
                key: rank.saturating_sub(1).min(keys - 1),
                path: rng.random_range(0..4),
            }
        })
        .collect()
}

/// `len` requests of keys drawn uniformly from `keys`.
pub(crate) fn uniform(keys: u32, len: usize, seed: u64) -> Vec<Call> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..len)
        .map(|_| Call {
            key: rng.random_range(0..keys),
            path: rng.random_range(0..4),
        })
        .collect()
}

/// The requests each key (per descriptor) was let through, exactly: in one window a limiter
/// must let no key through more than its limit.
#[derive(Debug)]
pub(crate) struct Allowed {
    key: Vec<u32>,
    key_path: Vec<u32>,
    user: Vec<u32>,
}

/// What a contender let through past the limits.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Excess {
    /// Requests let through beyond their key's limit, summed over the three descriptors.
    pub(crate) requests: u64,
    /// Descriptor keys let through more than their limit.
    pub(crate) keys: u64,
}

impl Allowed {
    pub(crate) fn new(keys: u32) -> Allowed {
        let keys = keys as usize;
        Allowed {
            key: vec![0; keys],
            key_path: vec![0; keys * PATHS.len()],
            user: vec![0; keys.div_ceil(KEYS_PER_USER as usize)],
        }
    }

    /// Counts `call` as let through.
    pub(crate) fn add(&mut self, call: Call) {
        let key = call.key as usize;
        self.key[key] += 1;
        self.key_path[key * PATHS.len() + usize::from(call.path)] += 1;
        self.user[call.user() as usize] += 1;
    }

    /// What was let through beyond the limits.
    pub(crate) fn excess(&self) -> Excess {
        let mut excess = Excess::default();
        for (counts, limit) in [
            (&self.key, LIMIT_KEY),
            (&self.key_path, LIMIT_KEY_PATH),
            (&self.user, LIMIT_USER),
        ] {
            for &count in counts {
                if count > limit {
                    excess.requests += u64::from(count - limit);
                    excess.keys += 1;
                }
            }
        }
        excess
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excess_counts_what_passed_each_limit() {
        let mut allowed = Allowed::new(8);
        let call = Call { key: 5, path: 2 };
        for _ in 0..LIMIT_KEY_PATH + 3 {
            allowed.add(call);
        }
        assert_eq!(
            allowed.excess(),
            Excess {
                requests: 3,
                keys: 1
            }
        );
        for _ in 0..LIMIT_KEY {
            allowed.add(Call { key: 5, path: 1 });
        }
        // Key 5: 1103 > 1000; (5, 2): 103 > 100; (5, 1): 1000 > 100; user 1: 1103.
        assert_eq!(
            allowed.excess(),
            Excess {
                requests: 103 + 3 + 900,
                keys: 3
            }
        );
    }

    #[test]
    fn streams_stay_inside_the_key_set() {
        assert!(zipf(10, 1000, 1).iter().all(|c| c.key < 10 && c.path < 4));
        assert!(uniform(10, 1000, 1).iter().all(|c| c.key < 10));
        let mut text = String::new();
        write_key(7, &mut text);
        assert_eq!(text.len(), 16);
    }
}
