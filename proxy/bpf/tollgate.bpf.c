/* Tollgate's XDP program: counts attempts (a TCP SYN without ACK, a UDP datagram) per source
 * at the prefix levels the rules name, in a Count-Min sketch of sliding windows that user
 * space maps into its memory, and drops a source over its level's limit at the driver.
 *
 * Parsing: Ethernet, at most one VLAN tag (802.1Q or 802.1ad), IPv4 (options skipped by IHL;
 * a later fragment carries no ports: ignored) or IPv6 (at most MAX_EXTENSIONS extension
 * headers: hop-by-hop, routing, destination options, fragment, authentication), then TCP or
 * UDP. A frame cut short at any header, or with an impossible length, is passed and counted
 * `malformed`: the stack drops what it cannot parse either, and the program never guesses a
 * source.
 *
 * A source in an allowed network (the `allow_v4` and `allow_v6` tries) passes uncounted, as
 * the proxy passes an allowed source. A drop is reported to user space through the `events`
 * ring, at most once per key and window (see `report`).
 *
 * Counting never loses an increment: every cell is raised by an atomic fetch-and-add whose
 * returned value is the count this attempt sees, so two CPUs on one key each see their own.
 * The kernel never clears: user space clears the slice after next (see layout.h). A slice
 * user space was late to clear only holds more than it should: estimates err upwards.
 *
 * Built by proxy/build.rs: clang -target bpf -mcpu=v3 -O2 -g (v3 for the 32-bit atomic
 * fetch-and-add).
 */
#include "layout.h"

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_PERCPU_ARRAY 6
#define BPF_MAP_TYPE_LPM_TRIE 11
#define BPF_MAP_TYPE_RINGBUF 27
#define BPF_F_NO_PREALLOC (1U << 0)
#define BPF_F_MMAPABLE (1U << 10)

#define XDP_DROP 1
#define XDP_PASS 2

struct xdp_md {
	u32 data;
	u32 data_end;
	u32 data_meta;
	u32 ingress_ifindex;
	u32 rx_queue_index;
	u32 egress_ifindex;
};

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static u64 (*bpf_ktime_get_coarse_ns)(void) = (void *)160;
static long (*bpf_ringbuf_output)(void *ringbuf, void *data, u64 size, u64 flags) = (void *)130;

/* The sketch: SLICES x DEPTH x width cells of 32 bits; max_entries set by the loader. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u32);
} cells SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct config);
} config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BANKS * LEVELS);
	__type(key, u32);
	__type(value, struct rule);
} rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PORT_WORDS);
	__type(key, u32);
	__type(value, u32);
} skipped_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTERS);
	__type(key, u32);
	__type(value, u64);
} counters SEC(".maps");

/* The allowed networks of each family (see layout.h); entries allocated as inserted. */
struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, ALLOW_ENTRIES);
	__type(key, struct allow_v4_key);
	__type(value, u32);
} allow_v4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, ALLOW_ENTRIES);
	__type(key, struct allow_v6_key);
	__type(value, u32);
} allow_v6 SEC(".maps");

/* Drop events for user space; the loader may size it (tests make it one page). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, EVENT_RING_BYTES);
} events SEC(".maps");

/* Per slot, the last window (plus one) whose drop event a key of the slot took. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SAMPLE_SLOTS);
	__type(key, u32);
	__type(value, u64);
} sampled SEC(".maps");

#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define ETH_P_8021Q 0x8100
#define ETH_P_8021AD 0x88A8
#define IPPROTO_HOPOPTS 0
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17
#define IPPROTO_ROUTING 43
#define IPPROTO_FRAGMENT 44
#define IPPROTO_AH 51
#define IPPROTO_DSTOPTS 60
#define MAX_EXTENSIONS 4
#define TCP_FLAG_SYN 0x02
#define TCP_FLAG_ACK 0x10

static __attribute__((always_inline)) u16 be16(u16 v)
{
	return __builtin_bswap16(v);
}

/* Adds one to a per-CPU counter: a plain add, not a locked one (about 5 ns of a hot key's 60
 * on this VM). At the driver the program runs to its end on one CPU, in NAPI's softirq, so
 * no other run shares the counter. (BPF_PROG_TEST_RUN only turns migration off: on a kernel
 * booted with preempt=full, two test runs on one CPU could interleave and lose a count here;
 * never a cell's, which every CPU shares and which take atomic adds.) */
static __attribute__((always_inline)) void bump(u32 which)
{
	u64 *counter = bpf_map_lookup_elem(&counters, &which);
	if (counter)
		*counter += 1;
}

/* Counts a frame as `which` and returns its verdict. */
static __attribute__((always_inline)) int count(u32 which)
{
	bump(which);
	return which == COUNTER_DROPPED ? XDP_DROP : XDP_PASS;
}

/* Where the window stands: the current and previous slices and the ticks left; and the
 * sketch's blocks and the first rule of the bank in force. */
struct position {
	u64 index;
	u32 current;
	u32 previous;
	u64 remaining;
	u64 blocks;
	u32 rules;
};

/* A key's cells in the current and the previous slice, one per row. */
struct slots {
	u32 *now[DEPTH];
	u32 *before[DEPTH];
};

/* Finds the cells of a key of hash `h` and reads each once; 0 if one is past the map.
 *
 * The reads are the point: a locked add waits for its cache line and holds back every load
 * behind it, so adding cell after cell pays one memory latency per cell on a random source.
 * Plain loads of every cell first (of every level, see `decide_v4`) overlap their misses, and
 * the adds that follow find their lines in the cache. */
static __attribute__((always_inline)) int locate(u64 h, const struct position *at,
						 struct slots *slots)
{
	u64 stride = step(h);
#pragma unroll
	for (u32 row = 0; row < DEPTH; row++) {
		u32 index = cell_index(h, stride, row, at->current, at->blocks);
		u32 *cell = bpf_map_lookup_elem(&cells, &index);
		if (!cell)
			return 0;
		(void)*(volatile u32 *)cell;
		slots->now[row] = cell;
		index = cell_index(h, stride, row, at->previous, at->blocks);
		cell = bpf_map_lookup_elem(&cells, &index);
		if (!cell)
			return 0;
		(void)*(volatile u32 *)cell;
		slots->before[row] = cell;
	}
	return 1;
}

/* What a key's cells said when an attempt was counted: the current slice's count (the
 * attempt included) and the previous slice's, each the rows' minimum. */
struct tally {
	u64 now;
	u64 before;
};

/* Counts one attempt in `slots` and says whether its key's sliding estimate is over
 * `limit`; what the cells said in `seen`. */
static __attribute__((always_inline)) int over(const struct slots *slots, u32 limit,
					       const struct config *cfg, const struct position *at,
					       struct tally *seen)
{
	u64 now = 0xffffffffffffffffULL, before = 0xffffffffffffffffULL;
#pragma unroll
	for (u32 row = 0; row < DEPTH; row++) {
		u64 raised = (u64)__atomic_fetch_add(slots->now[row], 1, __ATOMIC_RELAXED) + 1;
		now = raised < now ? raised : now;
		u64 old = *(volatile u32 *)slots->before[row];
		before = old < before ? old : before;
	}
	seen->now = now;
	seen->before = before;
	/* The previous window's share is at most `before`: a division only when it decides. */
	if (now > limit)
		return 1;
	if (now + before <= limit)
		return 0;
	return now + share(before, at->remaining, cfg->window) > limit;
}

/* Reports the drop of an attempt from source (`lo`, `hi`) whose key of hash `h` at `level`
 * is over `limit`, at most once per key and window: the key's slot of `sampled` is taken
 * for this window by a compare-and-swap (one CPU wins it; a slot taken already writes
 * nothing), then the event goes to the ring, or, with no room there, to COUNTER_EVENTS_LOST.
 * 1 when this call took the slot, 0 otherwise. Runs only on drops: a flood of one key pays
 * one read of its slot per frame. */
static __attribute__((always_inline)) int report(u64 h, u32 level, u32 limit,
						 const struct tally *seen, u64 lo, u64 hi,
						 const struct config *cfg,
						 const struct position *at)
{
	u32 slot = (u32)(h >> 32) & (SAMPLE_SLOTS - 1);
	u64 *mark = bpf_map_lookup_elem(&sampled, &slot);
	if (!mark)
		return 0;
	u64 window = at->index + 1;
	u64 last = *(volatile u64 *)mark;
	if (last == window || __sync_val_compare_and_swap(mark, last, window) != last)
		return 0;
	struct drop_event event = {
		.lo = lo,
		.hi = hi,
		.level = level,
		.limit = limit,
		.estimate = seen->now + share(seen->before, at->remaining, cfg->window),
		.window = at->index,
	};
	if (bpf_ringbuf_output(&events, &event, sizeof(event), 0))
		bump(COUNTER_EVENTS_LOST);
	return 1;
}

/* Whether an IPv4 source is in an allowed network (see layout.h). */
static __attribute__((always_inline)) int allowed_v4(u32 addr)
{
	struct allow_v4_key key = {.prefixlen = 32, .addr = addr};
	u32 *kind = bpf_map_lookup_elem(&allow_v4, &key);
	return kind && *kind == LIST_ALLOWED;
}

/* Whether an IPv6 source (read as two words) is in an allowed network. */
static __attribute__((always_inline)) int allowed_v6(u64 lo, u64 hi)
{
	struct allow_v6_key key = {
		.prefixlen = 128,
		.addr = {(u32)lo, (u32)(lo >> 32), (u32)hi, (u32)(hi >> 32)},
	};
	u32 *kind = bpf_map_lookup_elem(&allow_v6, &key);
	return kind && *kind == LIST_ALLOWED;
}

/* The limit of `level` in the bank in force, 0 when the level is not counted. */
static __attribute__((always_inline)) u32 limit_of(const struct position *at, u32 level)
{
	u32 index = at->rules + level;
	struct rule *rule = bpf_map_lookup_elem(&rules, &index);
	return rule ? rule->limit : 0;
}

/* Every level is counted before anything is decided (a drop never skips a level's count).
 * An attempt over a limit is dropped, unless its family's lists did not fit (LISTS_KEEP_*:
 * counted, never dropped), and reported once per key and window, for the first level over
 * whose report is due. */
static __attribute__((always_inline)) int decide_v4(u32 addr, const struct config *cfg,
						    const struct position *at)
{
	struct slots host, net;
	struct tally host_seen, net_seen;
	u32 host_limit = limit_of(at, LEVEL_V4_32);
	u32 net_limit = limit_of(at, LEVEL_V4_24);
	u64 host_h = host_limit ? xxh3_4(addr, level_seed(cfg->seed, 32)) : 0;
	/* The address as read from the packet: its first three bytes are the low 24 bits. */
	u64 net_h = net_limit ? xxh3_4(addr & 0x00ffffff, level_seed(cfg->seed, 24)) : 0;
	if (host_limit && !locate(host_h, at, &host))
		return XDP_PASS;
	if (net_limit && !locate(net_h, at, &net))
		return XDP_PASS;
	int host_over = host_limit ? over(&host, host_limit, cfg, at, &host_seen) : 0;
	int net_over = net_limit ? over(&net, net_limit, cfg, at, &net_seen) : 0;
	if (!(host_over | net_over) || (cfg->lists & LISTS_KEEP_V4))
		return count(COUNTER_PASSED);
	if (!(host_over && report(host_h, LEVEL_V4_32, host_limit, &host_seen, addr, 0, cfg, at)) &&
	    net_over)
		report(net_h, LEVEL_V4_24, net_limit, &net_seen, addr, 0, cfg, at);
	return count(COUNTER_DROPPED);
}

static __attribute__((always_inline)) int decide_v6(u64 lo, u64 hi, const struct config *cfg,
						    const struct position *at)
{
	struct slots host, net64, net48;
	struct tally host_seen, net64_seen, net48_seen;
	u32 host_limit = limit_of(at, LEVEL_V6_128);
	u32 net64_limit = limit_of(at, LEVEL_V6_64);
	u32 net48_limit = limit_of(at, LEVEL_V6_48);
	u64 host_h = host_limit ? xxh3_16(lo, hi, level_seed(cfg->seed, 128)) : 0;
	u64 net64_h = net64_limit ? xxh3_16(lo, 0, level_seed(cfg->seed, 64)) : 0;
	/* Bytes 0..6 of the address are the low 48 bits of the first word as read. */
	u64 net48_h =
	    net48_limit ? xxh3_16(lo & 0x0000ffffffffffffULL, 0, level_seed(cfg->seed, 48)) : 0;
	if (host_limit && !locate(host_h, at, &host))
		return XDP_PASS;
	if (net64_limit && !locate(net64_h, at, &net64))
		return XDP_PASS;
	if (net48_limit && !locate(net48_h, at, &net48))
		return XDP_PASS;
	int host_over = host_limit ? over(&host, host_limit, cfg, at, &host_seen) : 0;
	int net64_over = net64_limit ? over(&net64, net64_limit, cfg, at, &net64_seen) : 0;
	int net48_over = net48_limit ? over(&net48, net48_limit, cfg, at, &net48_seen) : 0;
	if (!(host_over | net64_over | net48_over) || (cfg->lists & LISTS_KEEP_V6))
		return count(COUNTER_PASSED);
	if (!(host_over && report(host_h, LEVEL_V6_128, host_limit, &host_seen, lo, hi, cfg, at)) &&
	    !(net64_over &&
	      report(net64_h, LEVEL_V6_64, net64_limit, &net64_seen, lo, hi, cfg, at)) &&
	    net48_over)
		report(net48_h, LEVEL_V6_48, net48_limit, &net48_seen, lo, hi, cfg, at);
	return count(COUNTER_DROPPED);
}

/* Whether the destination port (at the same offset in TCP and UDP, bounds checked by the
 * caller) is counted: its bit in `skipped_ports` is clear. */
static __attribute__((always_inline)) int guarded(void *l4)
{
	u16 port = be16(*(u16 *)(l4 + 2));
	u32 word = port >> 5;
	u32 *bits = bpf_map_lookup_elem(&skipped_ports, &word);
	return !(bits && ((*bits >> (port & 31)) & 1));
}

/* Whether the transport header at `l4` (protocol `proto`) starts an attempt to a counted
 * port: 1 yes, 0 no, -1 cut short. */
static __attribute__((always_inline)) int attempt(void *l4, void *end, u8 proto)
{
	if (proto == IPPROTO_UDP)
		return l4 + 8 <= end ? guarded(l4) : -1;
	if (proto != IPPROTO_TCP)
		return 0;
	if (l4 + 20 > end)
		return -1;
	u8 flags = *(u8 *)(l4 + 13);
	return (flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN && guarded(l4);
}

SEC("xdp")
int tollgate(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	void *p = data + 14;
	if (p > end)
		return count(COUNTER_MALFORMED);
	u16 type = be16(*(u16 *)(data + 12));
	if (type == ETH_P_8021Q || type == ETH_P_8021AD) {
		if (p + 4 > end)
			return count(COUNTER_MALFORMED);
		type = be16(*(u16 *)(p + 2));
		p += 4;
	}
	if (type != ETH_P_IP && type != ETH_P_IPV6)
		return count(COUNTER_IGNORED);

	u32 zero = 0;
	struct config *cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg || cfg->window == 0 || cfg->width == 0)
		return XDP_PASS;
	u64 tick = cfg->fixed_tick ? cfg->fixed_tick : bpf_ktime_get_coarse_ns() >> TICK_SHIFT;
	u64 index = tick / cfg->window;
	struct position at = {
		.index = index,
		.current = index % SLICES,
		.previous = (index + SLICES - 1) % SLICES,
		.remaining = cfg->window - (tick - index * cfg->window),
		.blocks = blocks_of(cfg->width),
		/* Read once: a reload flips it while frames are decided. */
		.rules = (u32)(*(volatile u64 *)&cfg->bank & 1) * LEVELS,
	};

	if (type == ETH_P_IP) {
		if (p + 20 > end)
			return count(COUNTER_MALFORMED);
		u8 ihl = *(u8 *)p & 0x0f;
		if ((*(u8 *)p >> 4) != 4 || ihl < 5)
			return count(COUNTER_MALFORMED);
		/* A later fragment (offset != 0) carries no transport header. */
		if (be16(*(u16 *)(p + 6)) & 0x1fff)
			return count(COUNTER_IGNORED);
		u8 proto = *(u8 *)(p + 9);
		u32 src = *(u32 *)(p + 12);
#ifdef TOLLGATE_BENCH_ROTATE
		/* Measurement only (xdp::tests::cost): the next source of an LCG written back into
		 * the frame, so each of BPF_PROG_TEST_RUN's repeats counts a new source. */
		*(u32 *)(p + 12) = src * 1664525 + 1013904223;
#endif
		void *l4 = p + ihl * 4;
		int is = attempt(l4, end, proto);
		if (is < 0)
			return count(COUNTER_MALFORMED);
		if (!is)
			return count(COUNTER_IGNORED);
		if ((cfg->lists & LISTS_V4) && allowed_v4(src))
			return count(COUNTER_ALLOWED);
		return decide_v4(src, cfg, &at);
	}

	if (p + 40 > end)
		return count(COUNTER_MALFORMED);
	if ((*(u8 *)p >> 4) != 6)
		return count(COUNTER_MALFORMED);
	u8 next = *(u8 *)(p + 6);
	u64 lo = *(u64 *)(p + 8);
	u64 hi = *(u64 *)(p + 16);
	void *l4 = p + 40;
#pragma unroll
	for (int i = 0; i < MAX_EXTENSIONS; i++) {
		if (next != IPPROTO_HOPOPTS && next != IPPROTO_ROUTING && next != IPPROTO_DSTOPTS &&
		    next != IPPROTO_FRAGMENT && next != IPPROTO_AH)
			break;
		if (l4 + 8 > end)
			return count(COUNTER_MALFORMED);
		u8 following = *(u8 *)l4;
		u32 len;
		if (next == IPPROTO_FRAGMENT) {
			if (be16(*(u16 *)(l4 + 2)) & 0xfff8)
				return count(COUNTER_IGNORED);
			len = 8;
		} else if (next == IPPROTO_AH) {
			len = ((u32) * (u8 *)(l4 + 1) + 2) * 4;
		} else {
			len = ((u32) * (u8 *)(l4 + 1) + 1) * 8;
		}
		next = following;
		l4 += len;
	}
	int is = attempt(l4, end, next);
	if (is < 0)
		return count(COUNTER_MALFORMED);
	if (!is)
		return count(COUNTER_IGNORED);
	if ((cfg->lists & LISTS_V6) && allowed_v6(lo, hi))
		return count(COUNTER_ALLOWED);
	return decide_v6(lo, hi, cfg, &at);
}

/* The rotation's clear: a second program, run by user space, never attached. */
#include "clear.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";
