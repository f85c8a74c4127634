/*
 * fuzz/ctl_input.h — the input format of fuzz_ctl, shared by the harness
 * (fuzz_ctl.c, decoder) and the seed generator (seed_ctl.c, encoder).
 *
 * A control segment is ~1.1 MB at its smallest, so an input is a compact
 * description of one, not the file itself:
 *
 *   offset  size       what
 *   0       8192       header image: file bytes [0, 8192) (zero-padded when the
 *                      input is shorter)
 *   8192    1          flags (FUZZ_CTL_F_*; 0 when the input is shorter)
 *   8193    ...        patches, until the end of the input, each
 *                        u32 offset (little-endian): file offset
 *                        u16 len    (little-endian)
 *                        len bytes  (a truncated last patch gives what is there)
 *
 * The file is the header's ctl_bytes long when that is within
 * [8192, FUZZ_CTL_MAX_BYTES], else (absurd) the input size rounded up to a page
 * (at least 8192 bytes), so that validation has to reject it.  Everything not
 * given is zero (ftruncate).  Patches are applied in order; bytes beyond the end
 * of the file are dropped; a patch reaching into [0, 8192) changes the header
 * image before the FIXUP step.
 *
 * Flags:
 *   FUZZ_CTL_F_LIVE   before attaching, the harness takes an OFD write lock on
 *                     byte 0 (rank entry 0's liveness byte) from its own fd: an
 *                     ATTACHED entry 0 looks like a live process, so the
 *                     attacher neither adopts nor repairs the segment and must
 *                     survive hostile bytes in a live cache.
 *   FUZZ_CTL_F_FIXUP  the harness rewrites the header fields that are derived
 *                     from the fingerprint (magic, layout_version, format, state
 *                     READY, region offsets, ctl_bytes, the last tensor size and
 *                     the tensor hash, the segment table's first_slot, slot_count
 *                     and bytes), with the library's own functions where it has
 *                     them, so that mutations of the geometry (slot_count,
 *                     slot_bytes, seg_count, ...) get past the consistency checks
 *                     to the code behind them.  bucket_count is left as given.
 * Other flag bits are ignored.
 */
#ifndef KVS_FUZZ_CTL_INPUT_H
#define KVS_FUZZ_CTL_INPUT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kvshare.h"

#define FUZZ_CTL_HDR_BYTES 8192u                  /* == KVS_SHM_HEADER_BYTES */
#define FUZZ_CTL_MAX_BYTES (UINT64_C(64) << 20)   /* bound on the file size */
#define FUZZ_CTL_PAGE 4096u

#define FUZZ_CTL_F_LIVE 0x01u
#define FUZZ_CTL_F_FIXUP 0x02u

#define FUZZ_CTL_PATCH_HDR 6u         /* u32 offset + u16 len */
#define FUZZ_CTL_PATCH_MAX 0xffffu

/* Block ids the harness looks up and the seed generator keys slots with. */
#define FUZZ_CTL_BLOCKS 8u

static inline struct kvs_block_id fuzz_ctl_block(uint32_t n)
{
	struct kvs_block_id b;

	memset(&b, 0, sizeof(b));
	for (int k = 0; k < 16; k++)
		b.bytes[k] = (uint8_t)(0x5a ^ (n * 37u + (uint32_t)k * 11u));
	return b;
}

struct fuzz_ctl_patch {
	uint32_t off;
	uint32_t len;          /* bytes available at bytes (<= the declared len) */
	const uint8_t *bytes;
};

/* Next patch of [*p, end): 1 and *out, or 0 at the end.  *p advances. */
static inline int fuzz_ctl_next_patch(const uint8_t **p, const uint8_t *end,
				      struct fuzz_ctl_patch *out)
{
	const uint8_t *q = *p;
	uint32_t len;

	if (end - q < (ptrdiff_t)FUZZ_CTL_PATCH_HDR)
		return 0;
	out->off = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
	len = (uint32_t)q[4] | (uint32_t)q[5] << 8;
	q += FUZZ_CTL_PATCH_HDR;
	if ((size_t)(end - q) < len)
		len = (uint32_t)(end - q);
	out->len = len;
	out->bytes = q;
	*p = q + len;
	return 1;
}

#endif
