//! The kernel sketch's layout, hash and window arithmetic: the Rust half of one definition
//! whose C half is `proxy/bpf/layout.h`. Both are checked against the same golden vectors
//! ([`GOLDEN`]): the unit tests here compute them in Rust, and `xdp::tests` runs the program
//! through `BPF_PROG_TEST_RUN` and finds the same cells raised in the kernel's map.
//!
//! ```text
//! cells map (BPF_F_MMAPABLE array of u32, 8 bytes apart), blocks of 512 cells (one page):
//!   index = block * 512 + (slice * DEPTH + row) * COLUMNS + column
//!   block = reduce(h, blocks)             (h's high bits)
//!   column = low 32 bits of (h + row * step(h)), reduced to 0..COLUMNS
//!   block b: slice 0 row 0 | slice 0 row 1 | slice 1 row 0 | ... | slice 2 row 1 | 2 unused
//!   window k counts in slice k % 3 and reads slice (k - 1) % 3; user space clears slice
//!   (k + 1) % 3 during window k (`slice_cells`), so the kernel never clears and never races
//!   a clear
//! ```
//!
//! A key's cells in every row and slice lie in one block, one page: counting a level touches
//! one page. On a random source each page touched is a TLB miss, which on this virtual
//! machine costs about as much as the cache miss (`xdp::tests::cost`, benches/README.md).
//!
//! A key is an address masked to a level's prefix (4 bytes for IPv4, 16 for IPv6), hashed by
//! xxh3 with the sketch's seed xored with the prefix length (one address at two levels makes
//! two keys). Rows come from that one hash by double hashing and Lemire's multiply-shift, as in
//! tollgate-sketch's `KeyHash`. Time is counted in ticks of 1,024 ns (the coarse clock shifted
//! right by [`TICK_SHIFT`]); the sliding estimate is the two-window interpolation
//! tollgate-sketch uses (HAProxy's and Cloudflare's): `current + ceil(previous * remaining /
//! window)`, never below the exact formula. Cells are 32 bits (BPF's atomics are 32 or 64
//! bits): one key's 2^32 attempts in one window would wrap.

use std::net::IpAddr;

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Rows of the Count-Min sketch.
pub(crate) const DEPTH: u32 = 2;
/// Slices of the window ring: current, previous and the one user space clears next.
pub(crate) const SLICES: u32 = 3;
/// Nanoseconds to ticks: a right shift by this.
pub(crate) const TICK_SHIFT: u32 = 10;
/// The longest window in ticks: counts (below 2^32) times remainders stay in 64 bits.
pub(crate) const MAX_WINDOW: u64 = 1 << 32;
/// Bytes a cell takes in the map: a u32 value, which the kernel's array map lays 8 bytes apart.
pub(crate) const CELL_BYTES: u64 = 8;
/// Columns of each (slice, row) pair in a block.
pub(crate) const COLUMNS: u32 = 85;
/// Cells per block: one page of 4 KiB (`SLICES * DEPTH * COLUMNS` = 510 of them used).
pub(crate) const BLOCK_CELLS: u32 = 512;
/// Banks of the `rules` map: a reload writes the one not in force, then flips
/// [`Config::bank`].
pub(crate) const BANKS: u32 = 2;
/// Words of 32 bits in the `skipped_ports` bitmap (one bit per port).
pub(crate) const PORT_WORDS: u32 = 2048;

/// Golden-ratio multiplier of the second hash (tollgate-sketch's `MIX`).
const MIX: u64 = 0x9E37_79B9_7F4A_7C15;

/// A prefix level the kernel counts at; the order is the `rules` map's index (`LEVEL_*` in
/// layout.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Level {
    /// One IPv4 address.
    V4Host,
    /// An IPv4 /24.
    V4Net24,
    /// One IPv6 address.
    V6Host,
    /// An IPv6 /64 (one subscriber's LAN).
    V6Net64,
    /// An IPv6 /48 (one site).
    V6Net48,
}

impl Level {
    /// Every level, in the `rules` map's order.
    pub(crate) const ALL: [Level; 5] = [
        Level::V4Host,
        Level::V4Net24,
        Level::V6Host,
        Level::V6Net64,
        Level::V6Net48,
    ];

    /// The level's index in the `rules` map.
    pub(crate) fn index(self) -> u32 {
        self as u32
    }

    /// The level as the logs and answers write it: `/32`, `/64`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Level::V4Host => "/32",
            Level::V4Net24 => "/24",
            Level::V6Host => "/128",
            Level::V6Net64 => "/64",
            Level::V6Net48 => "/48",
        }
    }

    /// The prefix length.
    pub(crate) fn prefix(self) -> u32 {
        match self {
            Level::V4Host => 32,
            Level::V4Net24 => 24,
            Level::V6Host => 128,
            Level::V6Net64 => 64,
            Level::V6Net48 => 48,
        }
    }

    /// Whether the level counts addresses of `addr`'s family.
    pub(crate) fn covers(self, addr: IpAddr) -> bool {
        matches!(
            (self, addr),
            (Level::V4Host | Level::V4Net24, IpAddr::V4(_))
                | (
                    Level::V6Host | Level::V6Net64 | Level::V6Net48,
                    IpAddr::V6(_)
                )
        )
    }
}

/// The hash of `addr`'s key at `level` under `seed`; `None` if the level is of the other
/// family.
pub(crate) fn hash(seed: u64, level: Level, addr: IpAddr) -> Option<u64> {
    let seed = seed ^ u64::from(level.prefix());
    match addr {
        IpAddr::V4(v4) if level.covers(addr) => {
            let mask = u32::MAX << (32 - level.prefix());
            Some(xxh3_64_with_seed(
                &(v4.to_bits() & mask).to_be_bytes(),
                seed,
            ))
        }
        IpAddr::V6(v6) if level.covers(addr) => {
            let mask = u128::MAX << (128 - level.prefix());
            Some(xxh3_64_with_seed(
                &(v6.to_bits() & mask).to_be_bytes(),
                seed,
            ))
        }
        _ => None,
    }
}

/// The second hash of double hashing; odd, so rows never repeat.
fn step(h: u64) -> u64 {
    (h ^ (h >> 29)).wrapping_mul(MIX) | 1
}

/// Maps a uniform 64-bit value onto `0..n` (Lemire's multiply-shift).
fn reduce(value: u64, n: u32) -> u64 {
    // The high half of a product with a 32-bit factor is below that factor: it fits.
    ((u128::from(value) * u128::from(n)) >> 64) as u64
}

/// Blocks of a sketch `width` columns wide: whole blocks, at least one.
pub(crate) fn blocks(width: u32) -> u32 {
    width.div_ceil(COLUMNS).max(1)
}

/// The index in the `cells` map of `row`'s cell for hash `h` in `slice`.
pub(crate) fn cell(h: u64, row: u32, slice: u32, width: u32) -> u32 {
    let g = h.wrapping_add(u64::from(row).wrapping_mul(step(h)));
    let column = ((g & 0xffff_ffff) * u64::from(COLUMNS)) >> 32;
    let index = reduce(h, blocks(width)) * u64::from(BLOCK_CELLS)
        + (u64::from(slice) * u64::from(DEPTH) + u64::from(row)) * u64::from(COLUMNS)
        + column;
    // Below `Geometry::entries`, which `Geometry` keeps within u32.
    u32::try_from(index).unwrap_or(u32::MAX)
}

/// The cells of hash `h` in `slice`, one per row.
pub(crate) fn cells(h: u64, slice: u32, width: u32) -> [u32; DEPTH as usize] {
    std::array::from_fn(|row| cell(h, row as u32, slice, width))
}

/// Every cell of `slice` in a sketch `width` columns wide, in the map's order: a run of
/// `DEPTH * COLUMNS` cells per block. What the clearing program zeroes (`proxy/bpf/clear.h`,
/// which walks the same runs); the tests check it against this.
#[cfg(test)]
pub(crate) fn slice_cells(slice: u32, width: u32) -> impl Iterator<Item = u32> {
    let run = DEPTH * COLUMNS;
    (0..blocks(width)).flat_map(move |block| {
        let first = block * BLOCK_CELLS + slice * run;
        first..first + run
    })
}

/// How many cells a memory budget buys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    /// Columns per row (the layout rounds it up to whole blocks).
    pub(crate) width: u32,
}

impl Geometry {
    /// The widest rows `bytes` holds: whole blocks, at least one.
    pub(crate) fn of_memory(bytes: u64) -> Geometry {
        let block_bytes = CELL_BYTES * u64::from(BLOCK_CELLS);
        let most = u64::from(u32::MAX) / u64::from(BLOCK_CELLS);
        let blocks = (bytes / block_bytes).clamp(1, most);
        Geometry {
            width: u32::try_from(blocks * u64::from(COLUMNS)).unwrap_or(u32::MAX),
        }
    }

    /// Entries of the `cells` map.
    pub(crate) fn entries(self) -> u32 {
        blocks(self.width) * BLOCK_CELLS
    }
}

/// Where a tick falls: the slices to count in and read from, and the ticks left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Position {
    /// The window index `k = tick / window`.
    pub(crate) index: u64,
    /// The slice counting window `k`.
    pub(crate) current: u32,
    /// The slice that counted window `k - 1`.
    pub(crate) previous: u32,
    /// Ticks until the window ends, in `1..=window`.
    pub(crate) remaining: u64,
}

/// Where `tick` falls in windows of `window` ticks (non-zero).
pub(crate) fn position(tick: u64, window: u64) -> Position {
    let index = tick / window;
    let slices = u64::from(SLICES);
    Position {
        index,
        // Both below SLICES.
        current: (index % slices) as u32,
        previous: ((index + slices - 1) % slices) as u32,
        remaining: window - (tick - index * window),
    }
}

/// The slice user space clears during window `index`: the one window `index + 1` counts in.
pub(crate) fn slice_to_clear(index: u64) -> u32 {
    // Below SLICES.
    ((index + 1) % u64::from(SLICES)) as u32
}

/// `ceil(previous * remaining / window)`: the previous window's part still inside the
/// sliding window. `previous` below 2^32 and `remaining <= window <= MAX_WINDOW`.
pub(crate) fn share(previous: u64, remaining: u64, window: u64) -> u64 {
    (previous * remaining).div_ceil(window)
}

/// The sliding estimate from the minimum cells of the current and previous slices.
pub(crate) fn estimate(current: u64, previous: u64, at: Position, window: u64) -> u64 {
    current + share(previous, at.remaining, window)
}

/// Bytes of the ring of drop events (`EVENT_RING_BYTES` in layout.h): about 5,400 events.
pub(crate) const EVENT_RING_BYTES: u32 = 262_144;

/// Slots of the `sampled` map (`SAMPLE_SLOTS` in layout.h): a key reports in the slot of the
/// bits 32 to 43 of its hash.
#[cfg(test)]
pub(crate) const SAMPLE_SLOTS: u32 = 4096;

/// Bytes of the `config` map's value.
pub(crate) const CONFIG_BYTES: usize = 48;

/// [`Config::lists`]: the IPv4 allow trie holds entries (sources are looked up in it).
pub(crate) const LISTS_V4: u64 = 1;
/// [`Config::lists`]: the IPv6 allow trie holds entries.
pub(crate) const LISTS_V6: u64 = 2;
/// [`Config::lists`]: the IPv4 lists did not fit the trie: IPv4 is counted, never dropped.
pub(crate) const LISTS_KEEP_V4: u64 = 4;
/// [`Config::lists`]: the IPv6 lists did not fit the trie: IPv6 is counted, never dropped.
pub(crate) const LISTS_KEEP_V6: u64 = 8;

/// The `config` map's value (`struct config` in layout.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Config {
    /// The hash seed.
    pub(crate) seed: u64,
    /// The window in ticks, `1..=MAX_WINDOW`.
    pub(crate) window: u64,
    /// Cells per row.
    pub(crate) width: u32,
    /// When non-zero, the time in ticks the program uses instead of its clock (tests).
    pub(crate) fixed_tick: u64,
    /// The bank of the `rules` map in force (0 or 1).
    pub(crate) bank: u32,
    /// `LISTS_*` bits: which allow tries the program looks sources up in, and which family it
    /// never drops (see `xdp::lists`).
    pub(crate) lists: u64,
}

impl Config {
    /// The value's bytes, as the program reads them.
    pub(crate) fn to_bytes(self) -> [u8; CONFIG_BYTES] {
        let mut out = [0; CONFIG_BYTES];
        let words = [
            self.seed,
            self.window,
            u64::from(self.width),
            self.fixed_tick,
            u64::from(self.bank),
            self.lists,
        ];
        for (chunk, word) in out.chunks_exact_mut(8).zip(words) {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        out
    }
}

/// One golden vector: an address, a level, its hash and cells in slice 0, under
/// [`GOLDEN_SEED`] and [`GOLDEN_WIDTH`].
#[cfg(test)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Golden {
    pub(crate) addr: &'static str,
    pub(crate) level: Level,
    pub(crate) hash: u64,
    pub(crate) cells: [u32; DEPTH as usize],
}

/// The golden vectors' seed.
#[cfg(test)]
pub(crate) const GOLDEN_SEED: u64 = 0x0123_4567_89ab_cdef;
/// The golden vectors' width: not a multiple of [`COLUMNS`] (rounded up to 12 blocks), and 12
/// is no power of two, so the block's reduction is a multiply-shift.
#[cfg(test)]
pub(crate) const GOLDEN_WIDTH: u32 = 1000;

/// Hash and cells of a few keys at every level of their family, computed once with
/// xxhash-rust and written down: the C side must find the same.
#[cfg(test)]
pub(crate) const GOLDEN: [Golden; 10] = [
    Golden {
        addr: "192.0.2.1",
        level: Level::V4Host,
        hash: 0x4a8e010db739279d,
        cells: [1596, 1683],
    },
    Golden {
        addr: "192.0.2.1",
        level: Level::V4Net24,
        hash: 0xee2751e3a58ad53a,
        cells: [5686, 5795],
    },
    Golden {
        addr: "10.1.2.3",
        level: Level::V4Host,
        hash: 0x1c6da1858e91ae1d,
        cells: [559, 608],
    },
    Golden {
        addr: "10.1.2.3",
        level: Level::V4Net24,
        hash: 0x9532f0b67e0cdddb,
        cells: [3113, 3205],
    },
    Golden {
        addr: "2001:db8:1:2:3:4:5:6",
        level: Level::V6Host,
        hash: 0x81dc475f78c66995,
        cells: [3112, 3194],
    },
    Golden {
        addr: "2001:db8:1:2:3:4:5:6",
        level: Level::V6Net64,
        hash: 0xe4f809f758adf6c1,
        cells: [5149, 5254],
    },
    Golden {
        addr: "2001:db8:1:2:3:4:5:6",
        level: Level::V6Net48,
        hash: 0xb7340056ea5f9d86,
        cells: [4173, 4261],
    },
    Golden {
        addr: "2001:db8:ffff:eeee::1",
        level: Level::V6Host,
        hash: 0x23161030eab3043c,
        cells: [589, 673],
    },
    Golden {
        addr: "2001:db8:ffff:eeee::1",
        level: Level::V6Net64,
        hash: 0xa8e79d446419d1ad,
        cells: [3617, 3751],
    },
    Golden {
        addr: "2001:db8:ffff:eeee::1",
        level: Level::V6Net48,
        hash: 0xef57771d08fd3b59,
        cells: [5634, 5754],
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_vectors_hold() {
        for golden in GOLDEN {
            let addr: IpAddr = golden.addr.parse().unwrap();
            let h = hash(GOLDEN_SEED, golden.level, addr).unwrap();
            assert_eq!(h, golden.hash, "{golden:?}");
            assert_eq!(cells(h, 0, GOLDEN_WIDTH), golden.cells, "{golden:?}");
        }
    }

    #[test]
    fn windows_turn_through_three_slices() {
        let at = position(3250, 1000);
        assert_eq!(
            (at.index, at.current, at.previous, at.remaining),
            (3, 0, 2, 750)
        );
        assert_eq!(position(3999, 1000).remaining, 1);
        let next = position(4000, 1000);
        assert_eq!((next.current, next.previous, next.remaining), (1, 0, 1000));
        // The slice cleared during window k is neither k's nor k-1's, and is k+1's.
        for index in 0..9 {
            let at = position(index * 1000, 1000);
            let cleared = slice_to_clear(index);
            assert_ne!(cleared, at.current);
            assert_ne!(cleared, at.previous);
            assert_eq!(cleared, position((index + 1) * 1000, 1000).current);
        }
    }

    #[test]
    fn share_rounds_up_and_fades_out() {
        // (previous, remaining, window) -> share: the same vectors as the sketch's.
        for (previous, remaining, window, expected) in [
            (7, 10, 10, 7),
            (7, 5, 10, 4),
            (7, 1, 10, 1),
            (0, 10, 10, 0),
            (8, 750, 1000, 6),
            (
                u64::from(u32::MAX),
                MAX_WINDOW,
                MAX_WINDOW,
                u64::from(u32::MAX),
            ),
        ] {
            assert_eq!(
                share(previous, remaining, window),
                expected,
                "{previous} {remaining}"
            );
        }
        assert_eq!(estimate(3, 8, position(3250, 1000), 1000), 9);
    }

    #[test]
    fn levels_mask_their_prefix() {
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.200".parse().unwrap();
        assert_eq!(hash(1, Level::V4Net24, a), hash(1, Level::V4Net24, b));
        assert_ne!(hash(1, Level::V4Host, a), hash(1, Level::V4Host, b));
        let c: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let d: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(hash(1, Level::V6Net48, c), hash(1, Level::V6Net48, d));
        assert_ne!(hash(1, Level::V6Net64, c), hash(1, Level::V6Net64, d));
        assert_eq!(hash(1, Level::V6Host, a), None);
        // One address at two levels: two keys (the prefix length is in the seed).
        let e: IpAddr = "192.0.2.0".parse().unwrap();
        assert_ne!(hash(1, Level::V4Host, e), hash(1, Level::V4Net24, e));
    }

    #[test]
    fn geometry_fills_the_budget() {
        let geometry = Geometry::of_memory(8 << 20);
        // 2,048 blocks of one page.
        assert_eq!(geometry.width, 2048 * COLUMNS);
        assert_eq!(u64::from(geometry.entries()) * CELL_BYTES, 8 << 20);
        assert_eq!(Geometry::of_memory(0).entries(), BLOCK_CELLS);
        assert_eq!(Geometry { width: 1 }.entries(), BLOCK_CELLS);
        assert_eq!(Geometry { width: 86 }.entries(), 2 * BLOCK_CELLS);
        assert_eq!(SLICES * DEPTH * COLUMNS, 510);
        // The last slice's last row reaches into the last block, short of its unused cells.
        let last = (0..100_000u64)
            .map(|h| cell(h.wrapping_mul(MIX), DEPTH - 1, SLICES - 1, geometry.width))
            .max()
            .unwrap();
        assert!(last <= geometry.entries() - 3 && last >= geometry.entries() - BLOCK_CELLS);
    }

    #[test]
    fn a_keys_cells_share_one_page() {
        let width = Geometry::of_memory(8 << 20).width;
        let mut x = 1u64;
        for _ in 0..1000 {
            x = x.wrapping_mul(MIX).wrapping_add(1);
            let cells: Vec<u32> = (0..SLICES)
                .flat_map(|slice| cells(x, slice, width))
                .collect();
            let page = |index: u32| u64::from(index) * CELL_BYTES / 4096;
            assert!(
                cells.iter().all(|&c| page(c) == page(cells[0])),
                "{cells:?}"
            );
        }
    }

    #[test]
    fn slices_partition_the_used_cells() {
        let width = 200;
        let mut seen = vec![None; Geometry { width }.entries() as usize];
        for slice in 0..SLICES {
            for index in slice_cells(slice, width) {
                assert_eq!(seen[index as usize], None, "cell {index}");
                seen[index as usize] = Some(slice);
            }
        }
        // Every cell a key can hit belongs to the slice it was hit in.
        let mut x = 7u64;
        for _ in 0..10_000 {
            x = x.wrapping_mul(MIX).wrapping_add(3);
            for slice in 0..SLICES {
                for index in cells(x, slice, width) {
                    assert_eq!(seen[index as usize], Some(slice));
                }
            }
        }
        // Two unused cells per block.
        assert_eq!(
            seen.iter().filter(|s| s.is_none()).count() as u32,
            blocks(width) * (BLOCK_CELLS - SLICES * DEPTH * COLUMNS)
        );
    }

    /// A `#define NAME 0x...ULL` (or a decimal) of layout.h.
    fn constant(header: &str, name: &str) -> u64 {
        let line = header
            .lines()
            .find(|line| line.starts_with(&format!("#define {name} ")))
            .unwrap_or_else(|| panic!("layout.h lacks {name}"));
        let value = line
            .split_whitespace()
            .nth(2)
            .unwrap()
            .trim_end_matches("ULL");
        match value.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).unwrap(),
            None => value.parse().unwrap(),
        }
    }

    #[test]
    fn layout_h_has_the_same_shape() {
        let header = include_str!("../../bpf/layout.h");
        for (name, value) in [
            ("DEPTH", u64::from(DEPTH)),
            ("SLICES", u64::from(SLICES)),
            ("TICK_SHIFT", u64::from(TICK_SHIFT)),
            ("LEVELS", Level::ALL.len() as u64),
            ("CELL_BYTES", CELL_BYTES),
            ("COLUMNS", u64::from(COLUMNS)),
            ("BLOCK_CELLS", u64::from(BLOCK_CELLS)),
            ("BANKS", u64::from(BANKS)),
            ("PORT_WORDS", u64::from(PORT_WORDS)),
            ("LEVEL_V4_32", u64::from(Level::V4Host.index())),
            ("LEVEL_V4_24", u64::from(Level::V4Net24.index())),
            ("LEVEL_V6_128", u64::from(Level::V6Host.index())),
            ("LEVEL_V6_64", u64::from(Level::V6Net64.index())),
            ("LEVEL_V6_48", u64::from(Level::V6Net48.index())),
            ("LISTS_V4", LISTS_V4),
            ("LISTS_V6", LISTS_V6),
            ("LISTS_KEEP_V4", LISTS_KEEP_V4),
            ("LISTS_KEEP_V6", LISTS_KEEP_V6),
            ("ALLOW_ENTRIES", crate::xdp::lists::ALLOW_ENTRIES as u64),
            ("LIST_COUNTED", 0),
            ("LIST_ALLOWED", 1),
            ("SAMPLE_SLOTS", u64::from(SAMPLE_SLOTS)),
            ("EVENT_RING_BYTES", u64::from(EVENT_RING_BYTES)),
        ] {
            let line = format!("#define {name} {value}");
            assert!(
                header.lines().any(|l| l.trim_end() == line),
                "layout.h lacks `{line}`"
            );
        }
    }

    #[test]
    fn layout_h_counts_blocks_without_dividing() {
        // layout.h's blocks_of, with its constants, against a division, on every width the
        // geometry can make and around each multiple of COLUMNS.
        let header = include_str!("../../bpf/layout.h");
        let magic = constant(header, "BLOCKS_MAGIC");
        let shift = constant(header, "BLOCKS_SHIFT");
        let blocks_of = |width: u64| ((width + u64::from(COLUMNS) - 1) * magic) >> shift;
        let most = u64::from(u32::MAX / BLOCK_CELLS) * u64::from(COLUMNS);
        let widths = (1..100_000u64)
            .chain(
                (1..=u64::from(u32::MAX / BLOCK_CELLS))
                    .step_by(97)
                    .flat_map(|b| {
                        let w = b * u64::from(COLUMNS);
                        [w - 1, w, w + 1]
                    }),
            )
            .chain([most, u64::from(u32::MAX) - u64::from(COLUMNS)]);
        for width in widths {
            assert_eq!(
                blocks_of(width),
                width.div_ceil(u64::from(COLUMNS)),
                "width {width}"
            );
        }
    }

    #[test]
    fn layout_h_computes_xxh3() {
        // layout.h's xxh3_4 and xxh3_16, line for line, with its constants: equal to
        // xxhash-rust on the same keys, so the C side hashes as the Rust side does.
        let header = include_str!("../../bpf/layout.h");
        let [s8, s24, s40, mx2, p3] = [
            "XXH_SECRET_8_16",
            "XXH_SECRET_24_32",
            "XXH_SECRET_40_48",
            "XXH_PRIME_MX2",
            "XXH_PRIME64_3",
        ]
        .map(|name| constant(header, name));
        let xxh3_4 = |word: u32, seed: u64| {
            let seed = seed ^ (u64::from((seed as u32).swap_bytes()) << 32);
            let mut h = (u64::from(word) + (u64::from(word) << 32)) ^ s8.wrapping_sub(seed);
            h ^= h.rotate_left(49) ^ h.rotate_left(24);
            h = h.wrapping_mul(mx2);
            h ^= (h >> 35) + 4;
            h = h.wrapping_mul(mx2);
            h ^ (h >> 28)
        };
        let xxh3_16 = |lo: u64, hi: u64, seed: u64| {
            let lo = lo ^ s24.wrapping_add(seed);
            let hi = hi ^ s40.wrapping_sub(seed);
            let product = u128::from(lo) * u128::from(hi);
            let fold = (product as u64) ^ ((product >> 64) as u64);
            let mut acc = 16u64
                .wrapping_add(lo.swap_bytes())
                .wrapping_add(hi)
                .wrapping_add(fold);
            acc ^= acc >> 37;
            acc = acc.wrapping_mul(p3);
            acc ^ (acc >> 32)
        };
        let mut x = 0x1234_5678_9abc_def0u64;
        for _ in 0..1000 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let bytes = x.to_le_bytes();
            let word = u32::from_le_bytes(bytes[..4].try_into().unwrap());
            assert_eq!(xxh3_4(word, x >> 7), xxh3_64_with_seed(&bytes[..4], x >> 7));
            let hi = x.rotate_left(17) ^ 0xdead_beef;
            let mut key = [0; 16];
            key[..8].copy_from_slice(&bytes);
            key[8..].copy_from_slice(&hi.to_le_bytes());
            assert_eq!(xxh3_16(x, hi, x >> 3), xxh3_64_with_seed(&key, x >> 3));
        }
    }
}
