//! Streams shared by the benchmarks and the accuracy tool: seeded, so every run and every
//! peer sees the same keys in the same order.

#![allow(dead_code)] // each bench target uses a different part of this module

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Zipf};

/// `len` key ids drawn from Zipf(`exponent`) over `distinct` ids (id 1 the most frequent),
/// scrambled so that frequent ids are not small numbers.
pub(crate) fn zipf_stream(distinct: u64, exponent: f64, len: usize, seed: u64) -> Vec<u64> {
    let zipf = Zipf::new(distinct as f64, exponent).expect("valid Zipf parameters");
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..len)
        .map(|_| scramble(zipf.sample(&mut rng) as u64))
        .collect()
}

/// `len` ids that are (with overwhelming probability) all distinct.
pub(crate) fn distinct_stream(len: usize, seed: u64) -> Vec<u64> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..len).map(|_| rng.random::<u64>()).collect()
}

/// A bijection on u64 (SplitMix64's finaliser): spreads ids without colliding them.
pub(crate) fn scramble(id: u64) -> u64 {
    let mut z = id.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
