/*
 * common/pattern.h — the latency backend's content: a deterministic function of
 * (block, shard, byte offset), and the splitmix64 mixer it is built on.
 *
 * Header-only on purpose, and not part of libkvshare.so.1's ABI: the latency
 * backend (io/latency.c) fills read buffers with it, and whoever verifies those
 * bytes (the tests, perf/backend_bench, a CLI linking the shared library) compiles
 * the same function from this header.  The content is frozen: changing it makes
 * a reader built from one tree reject bytes served by a library built from
 * another, so treat it like an on-disk format.
 *
 * Byte p of shard `shard` of `block` (p counted from the start of the shard) is
 * byte p % 8 (little-endian) of kvs_mix64(seed ^ (p / 8)), where
 *   seed = kvs_mix64(lo ^ kvs_mix64(hi ^ (shard << 32 | shard)))
 * and lo, hi are the block id's bytes 0..7 and 8..15 read as native-endian
 * 64-bit words.
 */
#ifndef KVS_COMMON_PATTERN_H
#define KVS_COMMON_PATTERN_H

#include <stdint.h>
#include <string.h>

#include "kvshare.h"

/* splitmix64's finaliser: also the seeded generator of io/fault.c and io/posix_roots.c. */
static inline uint64_t kvs_mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/*
 * Fill buf with bytes [offset, offset + len) of shard `shard` of `block`, as the
 * latency backend's reads return them (any offset and length: a sub-range equals
 * the same bytes of a whole-shard fill).  NULL block or buf: nothing is written.
 */
static inline void kvs_pattern_fill(const struct kvs_block_id *block, uint32_t shard,
				    uint64_t offset, void *buf, uint64_t len)
{
	uint64_t lo, hi, seed;
	unsigned char *p = buf;
	uint64_t pos = offset, end = offset + len;

	if (!block || !buf)
		return;
	memcpy(&lo, block->bytes, 8);
	memcpy(&hi, block->bytes + 8, 8);
	seed = kvs_mix64(lo ^ kvs_mix64(hi ^ ((uint64_t)shard << 32 | shard)));
	while (pos < end && pos % 8) {
		*p++ = (unsigned char)(kvs_mix64(seed ^ (pos / 8)) >> (8 * (pos % 8)));
		pos++;
	}
	for (; end - pos >= 8; pos += 8, p += 8) {
		uint64_t w = kvs_mix64(seed ^ (pos / 8));
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
		memcpy(p, &w, 8); /* the bytes below, in one store: 5x faster */
#else
		unsigned char b[8];

		for (int i = 0; i < 8; i++)
			b[i] = (unsigned char)(w >> (8 * i));
		memcpy(p, b, 8);
#endif
	}
	for (; pos < end; pos++)
		*p++ = (unsigned char)(kvs_mix64(seed ^ (pos / 8)) >> (8 * (pos % 8)));
}

#endif
