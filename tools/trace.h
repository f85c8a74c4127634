/*
 * tools/trace.h — Mooncake-format request traces (JSON Lines, as the public
 * Mooncake traces are: docs/replay.md, "Trace format"):
 * one request per line with `timestamp` (ms), `input_length`, `output_length` and
 * `hash_ids` (prefix-chained block ids).  Parsed with jansson; every malformed
 * line is an error naming its line number.
 */
#ifndef KVS_TOOLS_TRACE_H
#define KVS_TOOLS_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "kvshare.h"

struct kvs_trace_req {
	uint64_t timestamp_ms;
	uint64_t input_length, output_length;
	uint32_t nblocks;
	uint64_t *hash_ids;   /* nblocks ids (into the trace's one id array) */
	uint64_t line;        /* 1-based line of the file (0 from kvs_trace_parse_line) */
};

struct kvs_trace {
	struct kvs_trace_req *reqs; /* in timestamp order (stable for equal stamps) */
	size_t n;
	uint64_t *ids;              /* every request's ids, back to back */
	size_t nids;
	size_t distinct;            /* distinct block ids */
	size_t max_blocks;          /* longest request (hash_ids entries) */
};

/* Parse one line (len bytes, no NUL needed) into *req; its ids are appended to
 * *ids (grown with realloc; *nids, *cap updated).  Returns 0, or -EINVAL with a
 * message (without the line number) in err, or -ENOMEM.
 *
 * Strict: the line is one JSON object (duplicate keys refused) with
 * `timestamp` (integer ms >= 0), `input_length`, `output_length` (integers
 * >= 0) and `hash_ids` (array of integers >= 0, possibly empty, at most
 * UINT32_MAX entries); other fields are ignored.  A real number (1.0), a
 * string or an integer beyond INT64_MAX is an error.  req->hash_ids points at
 * the appended ids in *ids: it moves when a later call reallocates *ids, so a
 * caller that keeps requests re-points them (kvs_trace_load does, from the
 * request sizes).  On error *nids is unchanged (the array may have grown).
 * err may be NULL (errlen 0). */
int kvs_trace_parse_line(const char *line, size_t len, struct kvs_trace_req *req, uint64_t **ids,
			 size_t *nids, size_t *cap, char *err, size_t errlen);

/* Load a whole trace file.  Returns 0; -errno (open/read: "<path>: <strerror>"
 * in err), -EINVAL with "<path>:<line>: <what>" in err (or "<path>: no
 * requests" for a file without any, "<path>: too many block ids" from
 * 2^32 - 1 ids on), -ENOMEM.  Lines holding only blanks
 * (space, tab, CR) are skipped.  Requests come sorted by timestamp, stably
 * (file order among equal stamps); ids stay in file order, back to back, in
 * one array.  On failure *t is empty (kvs_trace_free is still allowed).
 * kvs_trace_free(NULL) and a second kvs_trace_free are no-ops. */
int kvs_trace_load(const char *path, struct kvs_trace *t, char *err, size_t errlen);
void kvs_trace_free(struct kvs_trace *t);

/* Dense block indices of a loaded trace: out[i] (t->nids entries, the
 * caller's) = the index of t->ids[i] among the t->distinct distinct ids
 * (0 .. distinct - 1, in order of first appearance in the file); request r's
 * are out[r.hash_ids - t->ids ...].  Returns 0, -EINVAL (NULL out with ids,
 * or 2^32 - 1 ids or more), -ENOMEM. */
int kvs_trace_dense(const struct kvs_trace *t, uint32_t *out);

/* The 16-byte block id of a trace id: little-endian in the first 8 bytes. */
struct kvs_block_id kvs_trace_block(uint64_t id);

#endif
