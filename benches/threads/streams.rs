//! The workloads, built once before anything is timed: a Zipf stream of 16-byte IPv6-like keys
//! (shared by every thread, or made disjoint per thread) and a Zipf capture of frames.

use crate::workload;

/// A 16-byte key, an IPv6 address in 2001:db8::/32.
pub(crate) type Key = [u8; 16];

/// The Zipf exponent of every workload (the realistic skew of sources).
pub(crate) const EXPONENT: f64 = 1.1;

/// The key of source `id` seen by thread `lane`: 2001:db8:LANE::/48, the id in the low 64
/// bits. Lane 0 for every thread is the shared stream; each thread its own lane makes the
/// threads' keys disjoint with the stream's shape unchanged.
fn key(id: u64, lane: usize) -> Key {
    let mut key = [0; 16];
    key[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    let lane = u16::try_from(lane).expect("fewer than 65536 threads");
    key[4..6].copy_from_slice(&lane.to_be_bytes());
    key[8..].copy_from_slice(&id.to_le_bytes());
    key
}

/// Which keys the threads see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sharing {
    /// Every thread a slice of the one stream: all of them meet the same hot keys.
    Shared,
    /// The same slices, each key moved to its thread's lane: same shape, no key shared.
    Disjoint,
}

impl Sharing {
    /// Its `--workloads` name.
    pub(crate) fn key(self) -> &'static str {
        match self {
            Sharing::Shared => "shared",
            Sharing::Disjoint => "disjoint",
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Sharing::Shared => "shared hot keys",
            Sharing::Disjoint => "disjoint keys",
        }
    }
}

/// The Zipf stream's source ids, drawn once.
pub(crate) struct Stream {
    ids: Vec<u64>,
}

impl Stream {
    /// `events` ids drawn from Zipf([`EXPONENT`]) over `distinct` ids, fixed seed.
    pub(crate) fn zipf(distinct: u64, events: usize) -> Stream {
        Stream {
            ids: workload::zipf_stream(distinct, EXPONENT, events, 0x7472_6561_6473),
        }
    }

    /// The keys for `threads` threads under `sharing`, one equal contiguous slice each (the
    /// remainder of the division left out).
    pub(crate) fn keys(&self, threads: usize, sharing: Sharing) -> Vec<Vec<Key>> {
        slices(&self.ids, threads)
            .enumerate()
            .map(|(lane, ids)| {
                let lane = if sharing == Sharing::Shared { 0 } else { lane };
                ids.iter().map(|&id| key(id, lane)).collect()
            })
            .collect()
    }
}

/// `items` cut into `parts` equal contiguous slices, the remainder left out.
pub(crate) fn slices<T>(items: &[T], parts: usize) -> impl Iterator<Item = &[T]> {
    let len = items.len() / parts.max(1);
    items.chunks_exact(len.max(1)).take(parts)
}

/// A capture of `frames` synthetic frames ([`workload::synthetic_frame`]) from sources drawn
/// from Zipf([`EXPONENT`]) over `sources` ids, in one buffer.
pub(crate) struct Capture {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Capture {
    pub(crate) fn zipf(sources: u64, frames: usize) -> Capture {
        let mut bytes = Vec::new();
        let mut ends = Vec::with_capacity(frames);
        for id in workload::zipf_stream(sources, EXPONENT, frames, 0x6672_616d_6573) {
            bytes.extend_from_slice(&workload::synthetic_frame(id));
            ends.push(bytes.len());
        }
        Capture { bytes, ends }
    }

    /// Every frame, in order.
    pub(crate) fn frames(&self) -> Vec<&[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(&self.ends)
            .map(|(start, &end)| &self.bytes[start..end])
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disjoint_keys_share_nothing_and_keep_the_shape() {
        let stream = Stream::zipf(1000, 4000);
        let shared = stream.keys(4, Sharing::Shared);
        let disjoint = stream.keys(4, Sharing::Disjoint);
        assert_eq!(shared.len(), 4);
        assert!(shared.iter().all(|slice| slice.len() == 1000));
        assert_eq!(shared[0], disjoint[0]);
        for (lane, (a, b)) in shared.iter().zip(&disjoint).enumerate() {
            for (a, b) in a.iter().zip(b) {
                assert_eq!(a[8..], b[8..]);
                assert_eq!(usize::from(u16::from_be_bytes([b[4], b[5]])), lane);
            }
        }
    }

    #[test]
    fn slices_are_equal_and_contiguous() {
        let items: Vec<u32> = (0..10).collect();
        let parts: Vec<&[u32]> = slices(&items, 3).collect();
        assert_eq!(parts, [&[0, 1, 2][..], &[3, 4, 5], &[6, 7, 8]]);
    }
}
