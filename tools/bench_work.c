/*
 * tools/bench_work.c — the workloads of `kvshare bench`: which blocks each
 * request loads, cut into tasks.  prefix (chat-like prefix sharing, seeded),
 * scan (every block once) and a Mooncake trace (its hash_ids as blocks).  Built
 * in the parent's memory; bench.c copies the arrays into the shared block.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/pattern.h"
#include "tools/bench.h"
#include "tools/trace.h"

/* ------------------------------------------------------------------------ */
/* Workloads                                                                 */

static uint64_t rng_next(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ull;
	return kvs_mix64(*s);
}

static int work_push(uint32_t **v, uint32_t *n, uint32_t *cap, uint32_t x)
{
	if (*n == *cap) {
		uint32_t c = *cap ? 2 * *cap : 1024;
		uint32_t *nv = c > *cap ? realloc(*v, (size_t)c * sizeof(*nv)) : NULL;

		if (!nv)
			return -ENOMEM;
		*v = nv;
		*cap = c;
	}
	(*v)[(*n)++] = x;
	return 0;
}

/* Close a request: accesses [first, naccess) are cut into tasks. */
static int work_request(struct b_work *w, uint32_t first, uint32_t per)
{
	w->nreq++;
	for (uint32_t a = first; a < w->naccess; a += per)
		if (work_push(&w->task, &w->ntasks, &w->task_cap, a) < 0)
			return -ENOMEM;
	return 0;
}

int b_work_finish(struct b_work *w)
{
	if (work_push(&w->task, &w->ntasks, &w->task_cap, w->naccess) < 0)
		return -ENOMEM;
	w->ntasks--; /* the last entry is the end offset */
	return 0;
}

/*
 * The prefix-sharing workload (like chat serving traffic): a system prompt of
 * U/32 blocks (at least 1) starts every request; the other blocks belong to
 * conversations of about 8 blocks each, that grow by 1..4 new blocks per turn.
 * Requests are the turns of randomly interleaved conversations (seeded):
 * system prompt + the conversation so far + this turn's new blocks; every
 * block is first seen as a turn's new block, then reused by its conversation's
 * later turns.  All of it was dumped beforehand, so a request loads all of its
 * blocks from the tier (a rank's cache hits are the reuse).
 */
int b_work_prefix(struct b_work *w, uint32_t U, uint64_t seed, uint32_t per)
{
	uint32_t sys = U >= 64 ? U / 32 : (U >= 2 ? 1 : U), rest = U - sys;
	uint32_t nconv = rest ? (rest / 8 ? rest / 8 : 1) : 0;
	uint32_t *len = calloc(nconv + 1, sizeof(*len)), *budget = calloc(nconv + 1, sizeof(*budget));
	uint32_t *active = calloc(nconv + 1, sizeof(*active));
	uint32_t **hist = calloc(nconv + 1, sizeof(*hist)), nactive = nconv, next = sys;
	uint64_t rng = seed ^ 0x707265666978ull;
	int rc = -ENOMEM;

	if (!len || !budget || !active || !hist)
		goto out;
	for (uint32_t c = 0; c < nconv; c++) {
		budget[c] = rest / nconv + (c < rest % nconv);
		hist[c] = calloc(budget[c] ? budget[c] : 1, sizeof(**hist));
		if (!hist[c])
			goto out;
		active[c] = c;
	}
	if (nconv == 0) { /* too few blocks for conversations: one request */
		uint32_t first = w->naccess;

		for (uint32_t b = 0; b < sys; b++)
			if (work_push(&w->acc, &w->naccess, &w->acc_cap, b) < 0)
				goto out;
		if (work_request(w, first, per) < 0)
			goto out;
	}
	while (nactive) {
		uint32_t k = (uint32_t)(rng_next(&rng) % nactive), c = active[k];
		uint32_t tail = 1 + (uint32_t)(rng_next(&rng) % 4), first = w->naccess;

		if (tail > budget[c] - len[c])
			tail = budget[c] - len[c];
		for (uint32_t b = 0; b < sys; b++)
			if (work_push(&w->acc, &w->naccess, &w->acc_cap, b) < 0)
				goto out;
		for (uint32_t b = 0; b < len[c]; b++)
			if (work_push(&w->acc, &w->naccess, &w->acc_cap, hist[c][b]) < 0)
				goto out;
		for (uint32_t b = 0; b < tail; b++) {
			hist[c][len[c]++] = next;
			if (work_push(&w->acc, &w->naccess, &w->acc_cap, next++) < 0)
				goto out;
		}
		if (work_request(w, first, per) < 0)
			goto out;
		if (len[c] == budget[c])
			active[k] = active[--nactive];
	}
	w->nblocks = U;
	rc = 0;
out:
	for (uint32_t c = 0; hist && c < nconv; c++)
		free(hist[c]);
	free(hist);
	free(len);
	free(budget);
	free(active);
	return rc;
}

/* Every block once, in order, a task at a time: no reuse within a rank (what
 * is left is the sharing across ranks). */
int b_work_scan(struct b_work *w, uint32_t U, uint32_t per)
{
	for (uint32_t b = 0; b < U; b++)
		if (work_push(&w->acc, &w->naccess, &w->acc_cap, b) < 0)
			return -ENOMEM;
	for (uint32_t b = 0; b < U; b += per) {
		w->nreq++;
		if (work_push(&w->task, &w->ntasks, &w->task_cap, b) < 0)
			return -ENOMEM;
	}
	w->nblocks = U;
	return 0;
}

int b_work_ids(struct b_work *w, uint64_t seed)
{
	w->ids = calloc(w->nblocks ? w->nblocks : 1, sizeof(*w->ids));
	if (!w->ids)
		return -ENOMEM;
	for (uint32_t i = 0; i < w->nblocks; i++) {
		uint64_t lo = kvs_mix64(seed * 0x100000001b3ull ^ 0x6b7673626e6368ull ^ i);
		uint64_t hi = kvs_mix64(lo ^ seed);

		memcpy(w->ids[i].bytes, &lo, 8);
		memcpy(w->ids[i].bytes + 8, &hi, 8);
	}
	return 0;
}

/* Mooncake trace: requests in timestamp order; each request's hash_ids are its
 * blocks (kvs_trace_block).  Requests are taken while their distinct blocks fit
 * in cap (--blocks); cap 0 takes the whole trace.  Returns 0, or -errno with err
 * set. */
int b_work_trace(struct b_work *w, const char *path, uint32_t cap, uint32_t per, char *err)
{
	struct kvs_trace t;
	uint64_t *keys = NULL;
	uint32_t *vals = NULL, mask;
	size_t hsize = 16;
	int rc;

	memset(&t, 0, sizeof(t));
	rc = kvs_trace_load(path, &t, err, B_ERR);
	if (rc < 0) {
		if (!err[0])
			snprintf(err, B_ERR, "%s: %s", path, kvs_strerror(rc));
		kvs_trace_free(&t);
		return rc;
	}
	if (cap == 0 || cap > t.distinct)
		cap = (uint32_t)t.distinct; /* no request brings more */
	while (hsize < 2 * (size_t)cap + 2)
		hsize *= 2;
	mask = (uint32_t)(hsize - 1);
	keys = calloc(hsize, sizeof(*keys));
	vals = calloc(hsize, sizeof(*vals));
	w->ids = calloc(cap ? cap : 1, sizeof(*w->ids));
	if (!keys || !vals || !w->ids) {
		rc = -ENOMEM;
		snprintf(err, B_ERR, "out of memory");
		goto out;
	}
	w->trace_total = (uint32_t)t.n;
	w->trace_distinct = t.distinct;
	for (size_t r = 0; r < t.n; r++) {
		const struct kvs_trace_req *q = &t.reqs[r];
		uint32_t fresh = 0, first = w->naccess;

		if (q->nblocks == 0)
			continue;
		/* How many new blocks would this request bring?  (Duplicates within
		 * the request counted once is enough for a bound: over-counting only
		 * stops a little early.) */
		for (uint32_t i = 0; i < q->nblocks; i++) {
			uint32_t h = (uint32_t)kvs_mix64(q->hash_ids[i]) & mask;

			while (vals[h] && keys[h] != q->hash_ids[i])
				h = (h + 1) & mask;
			fresh += vals[h] == 0;
		}
		if ((uint64_t)w->nblocks + fresh > cap)
			break;
		for (uint32_t i = 0; i < q->nblocks; i++) {
			uint32_t h = (uint32_t)kvs_mix64(q->hash_ids[i]) & mask;

			while (vals[h] && keys[h] != q->hash_ids[i])
				h = (h + 1) & mask;
			if (!vals[h]) {
				keys[h] = q->hash_ids[i];
				vals[h] = ++w->nblocks; /* index + 1 (0: empty) */
				w->ids[w->nblocks - 1] = kvs_trace_block(q->hash_ids[i]);
			}
			if (work_push(&w->acc, &w->naccess, &w->acc_cap, vals[h] - 1) < 0) {
				rc = -ENOMEM;
				goto out;
			}
		}
		if (work_request(w, first, per) < 0) {
			rc = -ENOMEM;
			goto out;
		}
	}
	if (w->nreq == 0) {
		rc = -EINVAL;
		snprintf(err, B_ERR, "%s: no request fits in %u distinct blocks (raise --blocks)",
			 path, cap);
	}
out:
	if (rc == -ENOMEM && !err[0])
		snprintf(err, B_ERR, "out of memory");
	free(keys);
	free(vals);
	kvs_trace_free(&t);
	return rc;
}

void b_work_free(struct b_work *w)
{
	free(w->ids);
	free(w->acc);
	free(w->task);
	memset(w, 0, sizeof(*w));
}
