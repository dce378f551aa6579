/* The rotation's clear: a second program in the object, never attached, that user space runs
 * through BPF_PROG_TEST_RUN to zero one slice's cells in a run of blocks (proxy/src/xdp/
 * attachment.rs, `clear_for`). One syscall clears a chunk of blocks where a map update per
 * cell took one syscall per cell (about 350k a window at 8 MiB, 44.6M at 1 GiB).
 *
 * The clear changes nothing in the rotation's reasoning: it zeroes the slice after next,
 * which no frame touches until the next window, and user space looks at the clock between two
 * runs as it did between two chunks of map updates. A run's "frame" is its input: the slice,
 * the first block and the number of blocks (little-endian u32 each); it returns the cells it
 * zeroed.
 *
 * Included by tollgate.bpf.c after its maps (it clears the `cells` map). bpf_loop needs
 * kernel 5.17.
 */
#ifndef TOLLGATE_CLEAR_H
#define TOLLGATE_CLEAR_H

static long (*bpf_loop)(u32 nr_loops, void *callback_fn, void *callback_ctx, u64 flags) =
	(void *)181;

/* A run's input, and the cells zeroed so far. */
struct clearing {
	u32 slice;
	u32 first;
	u32 cleared;
};

/* Zeroes the slice's DEPTH * COLUMNS cells in block `first + i` (one run of cells: layout.h);
 * stops the loop at the end of the map. */
static long clear_block(u32 i, void *data)
{
	struct clearing *c = data;
	u32 run = (c->first + i) * BLOCK_CELLS + c->slice * DEPTH * COLUMNS;
	for (u32 cell = 0; cell < DEPTH * COLUMNS; cell++) {
		u32 index = run + cell;
		u32 *value = bpf_map_lookup_elem(&cells, &index);
		if (!value)
			return 1;
		*(volatile u32 *)value = 0;
		c->cleared++;
	}
	return 0;
}

SEC("xdp")
int tollgate_clear(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	if (data + 12 > end)
		return 0;
	struct clearing c = {
		.slice = *(u32 *)data,
		.first = *(u32 *)(data + 4),
		.cleared = 0,
	};
	u32 blocks = *(u32 *)(data + 8);
	if (c.slice >= SLICES)
		return 0;
	bpf_loop(blocks, clear_block, &c, 0);
	return c.cleared;
}

#endif
