/* The kernel sketch's layout, hash and window arithmetic: the C half of one definition whose
 * Rust half is proxy/src/xdp/layout.rs. Both are checked against the same golden vectors
 * (proxy/src/xdp/tests.rs runs this program through BPF_PROG_TEST_RUN and compares the
 * cells it touched with what layout.rs computes). Change one, change the other.
 *
 * Self-contained: no kernel or libbpf headers, so clang alone builds it.
 */
#ifndef TOLLGATE_LAYOUT_H
#define TOLLGATE_LAYOUT_H

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

/* Rows of the Count-Min sketch: each key adds to one cell per row. */
#define DEPTH 2
/* Slices of the window ring: current, previous, and the next one, which user space clears
 * while the kernel counts in the current one (so the kernel never clears anything). */
#define SLICES 3
/* Prefix levels: IPv4 /32 and /24, IPv6 /128, /64 and /48 (the order of `Level` in Rust). */
#define LEVELS 5
#define LEVEL_V4_32 0
#define LEVEL_V4_24 1
#define LEVEL_V6_128 2
#define LEVEL_V6_64 3
#define LEVEL_V6_48 4
/* Time in ticks of 1024 ns: windows up to 2^32 ticks (73 minutes) keep every product in
 * 64 bits (a count below 2^32 times a remainder below 2^32). */
#define TICK_SHIFT 10
/* Per-CPU counters. */
#define COUNTER_PASSED 0    /* an attempt, counted and under every limit */
#define COUNTER_DROPPED 1   /* an attempt over a limit */
#define COUNTER_MALFORMED 2 /* a frame cut short or with an impossible header: passed */
#define COUNTER_IGNORED 3   /* not an attempt (other protocol, TCP past the SYN, a later fragment) */
#define COUNTER_ALLOWED 4   /* an attempt from an allowed network: passed uncounted */
#define COUNTER_EVENTS_LOST 5 /* a drop event the ring had no room for */
#define COUNTERS 6

/* The `config` map's one value (little-endian, 8-byte fields; `Config::to_bytes` in Rust). */
struct config {
	u64 seed;       /* the hash seed */
	u64 window;     /* the window length in ticks, 1..2^32 */
	u64 width;      /* cells per row, 1..2^32 */
	u64 fixed_tick; /* when non-zero, the time in ticks (tests); otherwise the coarse clock */
	u64 bank;       /* the bank of `rules` in force: 0 or 1 (read once per frame) */
	u64 lists;      /* LISTS_* bits: which allow tries to look sources up in */
};

/* The allow lists (`[lists]` and the run-time entries) as two LPM tries, one per family: the
 * longest match's value is LIST_ALLOWED (the source passes uncounted, as the proxy passes an
 * allowed source) or LIST_COUNTED (a deny entry inside an allowed network: counted as any
 * other). `config.lists` says which tries hold entries (no lookup otherwise), and which
 * family's lists did not fit in ALLOW_ENTRIES: that family is counted but never dropped, so
 * no allowed source is refused at the driver (`xdp/lists.rs`). */
#define LISTS_V4 1
#define LISTS_V6 2
#define LISTS_KEEP_V4 4
#define LISTS_KEEP_V6 8
#define ALLOW_ENTRIES 65536
#define LIST_COUNTED 0
#define LIST_ALLOWED 1

struct allow_v4_key {
	u32 prefixlen;
	u32 addr; /* as read from the packet */
};

struct allow_v6_key {
	u32 prefixlen;
	u32 addr[4]; /* as read from the packet */
};

/* Drop events: at most one per key and window (a slot of `sampled`, chosen by the key's
 * hash, holds the last window it reported, plus one; two keys on one slot share its one
 * event), into a ring of EVENT_RING_BYTES; an event the ring has no room for is counted in
 * COUNTER_EVENTS_LOST (`xdp/events.rs` reads them). */
#define EVENT_RING_BYTES 262144
#define SAMPLE_SLOTS 4096

struct drop_event {
	u64 lo;       /* the source as read: IPv4 in the low 4 bytes, IPv6 bytes 0..8 */
	u64 hi;       /* IPv6 bytes 8..16 */
	u32 level;    /* LEVEL_* of the key over its limit */
	u32 limit;    /* its limit */
	u64 estimate; /* its sliding estimate, this attempt included */
	u64 window;   /* the window's index */
};

/* Banks of rules: a reload writes the bank not in force, then flips `config.bank`, so a frame
 * reads one policy's rules whole. */
#define BANKS 2
/* Ports whose attempts are counted: a bitmap of words of 32 bits, a set bit leaving the port
 * out (all clear, as the loader makes it: every port counted). */
#define PORT_WORDS 2048

/* One rule per level and bank: `limit` attempts per sliding window; 0 leaves the level
 * uncounted. */
struct rule {
	u32 limit;
	u32 reserved;
};

/* xxh3's 64-bit hash with a seed, for keys of 4 and 16 bytes (Collet, XXH3 spec,
 * `XXH3_len_4to8_64b` and `XXH3_len_9to16_64b`). The constants are words of xxh3's default
 * secret, xored pairwise as the spec does (layout.rs checks them against xxhash-rust). */
#define XXH_SECRET_8_16 0xc73ab174c5ecd5a2ULL  /* read64(secret+8) ^ read64(secret+16) */
#define XXH_SECRET_24_32 0x6782737bea4239b9ULL /* read64(secret+24) ^ read64(secret+32) */
#define XXH_SECRET_40_48 0xaf56bc3b0996523aULL /* read64(secret+40) ^ read64(secret+48) */
#define XXH_PRIME_MX2 0x9FB21C651E98DF25ULL
#define XXH_PRIME64_3 0x165667919E3779F9ULL

static __attribute__((always_inline)) u64 rotl64(u64 x, int r)
{
	return (x << r) | (x >> (64 - r));
}

/* The high 64 bits of a * b, from 32-bit halves (BPF has no 128-bit multiply). */
static __attribute__((always_inline)) u64 mul_hi(u64 a, u64 b)
{
	u64 a_lo = a & 0xffffffff, a_hi = a >> 32;
	u64 b_lo = b & 0xffffffff, b_hi = b >> 32;
	u64 lo_lo = a_lo * b_lo;
	u64 hi_lo = a_hi * b_lo;
	u64 lo_hi = a_lo * b_hi;
	u64 hi_hi = a_hi * b_hi;
	u64 cross = (lo_lo >> 32) + (hi_lo & 0xffffffff) + lo_hi;
	return hi_hi + (hi_lo >> 32) + (cross >> 32);
}

static __attribute__((always_inline)) u64 xxh3_4(u32 word, u64 seed)
{
	seed ^= (u64)__builtin_bswap32((u32)seed) << 32;
	u64 bitflip = XXH_SECRET_8_16 - seed;
	/* The first and the last four bytes are the same four. */
	u64 h = ((u64)word + ((u64)word << 32)) ^ bitflip;
	h ^= rotl64(h, 49) ^ rotl64(h, 24);
	h *= XXH_PRIME_MX2;
	h ^= (h >> 35) + 4;
	h *= XXH_PRIME_MX2;
	return h ^ (h >> 28);
}

static __attribute__((always_inline)) u64 xxh3_16(u64 lo, u64 hi, u64 seed)
{
	u64 input_lo = lo ^ (XXH_SECRET_24_32 + seed);
	u64 input_hi = hi ^ (XXH_SECRET_40_48 - seed);
	u64 fold = (input_lo * input_hi) ^ mul_hi(input_lo, input_hi);
	u64 acc = 16 + __builtin_bswap64(input_lo) + input_hi + fold;
	acc ^= acc >> 37;
	acc *= XXH_PRIME64_3;
	return acc ^ (acc >> 32);
}

/* A level's seed: the sketch's seed xored with the level's prefix length, so one address
 * at two levels makes two keys. */
static __attribute__((always_inline)) u64 level_seed(u64 seed, u32 prefix)
{
	return seed ^ prefix;
}

/* Double hashing (Kirsch and Mitzenmacher), as tollgate-sketch's `KeyHash`: row r's cell is
 * reduce(h + r * step(h), width), reduce being Lemire's multiply-shift. */
#define MIX 0x9E3779B97F4A7C15ULL
static __attribute__((always_inline)) u64 step(u64 h)
{
	return ((h ^ (h >> 29)) * MIX) | 1;
}

/* Lemire's multiply-shift: the high 64 bits of g * n, n below 2^32, in two multiplies
 * (mul_hi's four less the two whose factor, n's high half, is 0). Exact: g * n = hi * n *
 * 2^32 + lo * n, and flooring by 2^32 twice floors by 2^64. */
static __attribute__((always_inline)) u64 reduce(u64 g, u64 n)
{
	return ((g >> 32) * n + (((g & 0xffffffff) * n) >> 32)) >> 32;
}

/* Blocks: a key's cells, every row in every slice, lie in one block of BLOCK_CELLS cells,
 * COLUMNS columns of each (slice, row) pair, 510 of 512 cells used. The map's cells are u32
 * values, which an array map lays 8 bytes apart (CELL_BYTES): a block is one page of 4 KiB,
 * so counting a level touches one page. On a random source each page is a TLB miss, and on
 * a virtual machine a miss walks two page tables: pages, not cache lines, set the cost. */
#define CELL_BYTES 8
#define COLUMNS 85
#define BLOCK_CELLS 512
/* ceil(width / COLUMNS) without a division: (width + COLUMNS - 1) * BLOCKS_MAGIC >>
 * BLOCKS_SHIFT, BLOCKS_MAGIC = ceil(2^38 / 85), exact while the sum is below 2^32 (the
 * rounding error 21 * x stays below 2^38). */
#define BLOCKS_MAGIC 0xC0C0C0C1ULL
#define BLOCKS_SHIFT 38
static __attribute__((always_inline)) u64 blocks_of(u64 width)
{
	return ((width + COLUMNS - 1) * BLOCKS_MAGIC) >> BLOCKS_SHIFT;
}

/* Cell `row` of a key's hash in `slice`: the index into the `cells` map. The block comes
 * from h's high bits, each row's column from the low 32 bits of its double hash. */
static __attribute__((always_inline)) u32 cell_index(u64 h, u64 stride, u32 row, u32 slice,
						     u64 blocks)
{
	u64 g = h + (u64)row * stride;
	u64 column = ((g & 0xffffffff) * COLUMNS) >> 32;
	return (u32)(reduce(h, blocks) * BLOCK_CELLS + ((u64)slice * DEPTH + row) * COLUMNS +
		     column);
}

/* ceil(previous * remaining / window): the previous window's part still inside the sliding
 * window (the sketch's `Windows::share`). */
static __attribute__((always_inline)) u64 share(u64 previous, u64 remaining, u64 window)
{
	u64 product = previous * remaining;
	u64 quotient = product / window;
	return quotient + (quotient * window != product);
}

#endif
