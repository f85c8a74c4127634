/*
 * io/copy_nt.c — the host engine's byte copies: memcpy, or non-temporal stores
 * for a call too large for its destination to stay in the CPU's caches.
 *
 * A CPU-only rank's load is a run of memcpy calls of one shard (or one piece of
 * a shard) each: 4-32 KiB from a slot to a scattered place in the engine's KV.
 * glibc picks non-temporal stores by the size of one memcpy only (above
 * x86_non_temporal_threshold, about 3/4 of the L3: tens of MiB), so each of
 * those copies uses ordinary stores: every destination line is first read into
 * the cache (a read for ownership) and later written back, half again as many
 * bytes on the memory bus as the copy itself.  On the 2-core dev VM (AMD EPYC,
 * 32 MiB L3) 256 MiB copied as 8192 copies of 32 KiB took 28-30 ms, one memcpy of
 * all of it 18-19 ms, and the same 8192 copies with non-temporal stores 17-20 ms;
 * at 1-4 KiB a copy the loop took 38-53 ms, streamed 17-21.  With the source and
 * destination cold and the destination read back afterwards (what the engine's
 * forward does), streaming broke even at 256 KiB in all and won above it:
 * 1 MiB 106 + 34 us against 58 + 46, 16 MiB 1.75 + 0.86 ms against 1.03 + 0.90.
 * So a call whose copies add up to KVS_COPY_NT_MIN_BYTES or more streams each
 * copy of at least NT_MIN_COPY bytes; smaller calls keep memcpy, and their
 * destination stays cached for whoever reads it next.
 *
 * Non-temporal stores are weakly ordered: they may become visible after a later
 * ordinary store, such as the release that says the copy completed.  A caller
 * that streamed calls kvs_copy_nt_fence() (sfence) once after its last copy and
 * before it says so; once per call, not per copy (a fence per 4 KiB copy cost a
 * fifth more here).
 *
 * x86-64 only, with SSE2 (every x86-64 CPU): 16-byte unaligned loads and
 * aligned streaming stores, one 64-byte line per iteration.  AVX2's 32-byte
 * stores were within 10% here, not worth a second path chosen at run time.
 * Elsewhere every copy is memcpy and the fence is a no-op.
 */
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "io/copy.h"

/* A copy shorter than this is memcpy even in a streamed call: a few partial
 * lines around it are not worth the head and tail. */
#define NT_MIN_COPY 256u
#define LINE 64u

bool kvs_copy_nt_wanted(uint64_t total)
{
#if defined(__x86_64__)
	return total >= KVS_COPY_NT_MIN_BYTES;
#else
	(void)total;
	return false;
#endif
}

void kvs_copy_bytes(void *dst, const void *src, size_t len, bool nt)
{
#if defined(__x86_64__)
	char *d = dst;
	const char *s = src;
	size_t head, body;

	if (!nt || len < NT_MIN_COPY) {
		memcpy(dst, src, len);
		return;
	}
	/* Up to the destination's next line with ordinary stores, whole lines
	 * streamed, the rest ordinary again. */
	head = (size_t)(-(uintptr_t)d & (LINE - 1));
	memcpy(d, s, head);
	d += head, s += head, len -= head;
	body = len & ~(size_t)(LINE - 1);
	for (size_t i = 0; i < body; i += LINE) {
		__m128i a = _mm_loadu_si128((const __m128i *)(s + i));
		__m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
		__m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));

		_mm_stream_si128((__m128i *)(d + i), a);
		_mm_stream_si128((__m128i *)(d + i + 16), b);
		_mm_stream_si128((__m128i *)(d + i + 32), c);
		_mm_stream_si128((__m128i *)(d + i + 48), e);
	}
	memcpy(d + body, s + body, len - body);
#else
	(void)nt;
	memcpy(dst, src, len);
#endif
}

void kvs_copy_nt_fence(void)
{
#if defined(__x86_64__)
	_mm_sfence();
#endif
}
