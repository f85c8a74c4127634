/*
 * tools/trace.c — Mooncake-format request traces (JSON Lines), parsed with
 * jansson: the input of `kvshare replay` and `kvshare bench --trace`.
 *
 * One request per line:
 *   {"timestamp": 0, "input_length": 6755, "output_length": 500, "hash_ids": [0, 1, 2]}
 * timestamp in ms from the trace's start; hash_ids one prefix-chained block id
 * per 512-token block (docs/replay.md, "Trace format").  Every line is parsed
 * strictly (json_loadb, duplicate keys refused, integer types checked: a real,
 * a string, a negative or an out-of-range number is an error naming the field),
 * so a truncated or hand-edited trace fails loudly with its line number instead
 * of replaying something else.  Unknown extra fields are ignored (traces from
 * other releases carry more).
 *
 * Memory: the whole file is read once, then every request's ids are appended
 * to one array (doubling), in file order; requests point into it.  The
 * requests are then sorted by timestamp (stable: ties keep file order), and the
 * distinct ids are counted with an open-addressing hash set sized to the id
 * count, freed before returning (the same set gives kvs_trace_dense's
 * indices).  The 122k-id public Mooncake synthetic trace (docs/replay.md) loads
 * in tens of milliseconds.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/pattern.h" /* kvs_mix64 */
#include "tools/trace.h"

static void errf(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void errf(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* A non-negative JSON integer field of obj: 0 and *out, or -EINVAL (err set). */
static int get_uint(json_t *obj, const char *key, uint64_t *out, char *err, size_t errlen)
{
	json_t *v = json_object_get(obj, key);

	if (!v) {
		errf(err, errlen, "missing field \"%s\"", key);
		return -EINVAL;
	}
	if (!json_is_integer(v)) {
		errf(err, errlen, "field \"%s\" is not an integer", key);
		return -EINVAL;
	}
	if (json_integer_value(v) < 0) {
		errf(err, errlen, "field \"%s\" is negative (%lld)", key,
		     (long long)json_integer_value(v));
		return -EINVAL;
	}
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

int kvs_trace_parse_line(const char *line, size_t len, struct kvs_trace_req *req, uint64_t **ids,
			 size_t *nids, size_t *cap, char *err, size_t errlen)
{
	json_error_t jerr;
	json_t *root, *arr;
	struct kvs_trace_req r;
	size_t n, need;
	int rc = -EINVAL;

	if (!line || !req || !ids || !nids || !cap || *nids > *cap || (*cap && !*ids)) {
		errf(err, errlen, "bad arguments");
		return -EINVAL;
	}
	if (err && errlen)
		err[0] = '\0';
	memset(&r, 0, sizeof(r));
	/* JSON_REJECT_DUPLICATES: {"timestamp":1,"timestamp":2} is not a trace
	 * line.  Without JSON_DISABLE_EOF_CHECK, anything after the object but
	 * blanks is an error too (two objects on one line). */
	root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		errf(err, errlen, "invalid JSON: %s (column %d)", jerr.text, jerr.column);
		return -EINVAL;
	}
	if (!json_is_object(root)) {
		errf(err, errlen, "not a JSON object");
		goto out;
	}
	if (get_uint(root, "timestamp", &r.timestamp_ms, err, errlen) ||
	    get_uint(root, "input_length", &r.input_length, err, errlen) ||
	    get_uint(root, "output_length", &r.output_length, err, errlen))
		goto out;
	arr = json_object_get(root, "hash_ids");
	if (!arr) {
		errf(err, errlen, "missing field \"hash_ids\"");
		goto out;
	}
	if (!json_is_array(arr)) {
		errf(err, errlen, "field \"hash_ids\" is not an array");
		goto out;
	}
	n = json_array_size(arr);
	if (n > UINT32_MAX || n > SIZE_MAX / sizeof(uint64_t) - *nids) {
		errf(err, errlen, "field \"hash_ids\" has too many entries (%zu)", n);
		goto out;
	}
	need = *nids + n;
	if (need > *cap) {
		size_t ncap = *cap ? *cap : 1024;
		uint64_t *p;

		while (ncap < need)
			ncap = ncap > SIZE_MAX / 2 / sizeof(uint64_t) ? need : ncap * 2;
		p = realloc(*ids, ncap * sizeof(uint64_t));
		if (!p) {
			errf(err, errlen, "out of memory (%zu ids)", ncap);
			rc = -ENOMEM;
			goto out;
		}
		*ids = p;
		*cap = ncap;
	}
	for (size_t i = 0; i < n; i++) {
		json_t *v = json_array_get(arr, i);

		if (!json_is_integer(v)) {
			errf(err, errlen, "hash_ids[%zu] is not an integer", i);
			goto out;
		}
		if (json_integer_value(v) < 0) {
			errf(err, errlen, "hash_ids[%zu] is negative (%lld)", i,
			     (long long)json_integer_value(v));
			goto out;
		}
		(*ids)[*nids + i] = (uint64_t)json_integer_value(v);
	}
	r.nblocks = (uint32_t)n;
	r.hash_ids = *ids ? *ids + *nids : NULL;
	*nids = need;
	*req = r;
	rc = 0;
out:
	json_decref(root);
	return rc;
}

/* Read the whole file: 0 and *buf (NUL-terminated, *len bytes), or -errno. */
static int slurp(const char *path, char **buf, size_t *len)
{
	struct stat st;
	size_t cap, n = 0;
	char *b = NULL;
	int fd, rc = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		goto out;
	}
	if (S_ISDIR(st.st_mode)) {
		rc = -EISDIR;
		goto out;
	}
	/* st_size is a hint (a pipe or /proc file says 0): grow as needed */
	cap = S_ISREG(st.st_mode) && st.st_size > 0 && (uint64_t)st.st_size < SIZE_MAX - 1
		      ? (size_t)st.st_size + 1
		      : 65536;
	b = malloc(cap);
	if (!b) {
		rc = -ENOMEM;
		goto out;
	}
	for (;;) {
		ssize_t r;

		if (n + 1 >= cap) {
			char *p;

			if (cap > SIZE_MAX / 2) {
				rc = -EFBIG;
				goto out;
			}
			p = realloc(b, cap * 2);
			if (!p) {
				rc = -ENOMEM;
				goto out;
			}
			b = p;
			cap *= 2;
		}
		r = read(fd, b + n, cap - 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			rc = -errno;
			goto out;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	b[n] = '\0';
	*buf = b;
	*len = n;
	b = NULL;
out:
	free(b);
	close(fd);
	return rc;
}

static bool blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
			return false;
	return true;
}

static int req_cmp(const void *a, const void *b)
{
	const struct kvs_trace_req *x = a, *y = b;

	if (x->timestamp_ms != y->timestamp_ms)
		return x->timestamp_ms < y->timestamp_ms ? -1 : 1;
	/* ties: file order (qsort is not stable; the line number makes it so) */
	return x->line < y->line ? -1 : x->line > y->line;
}

/* Dense indices of ids[0..n): out[i] (when out is not NULL) = the rank of
 * ids[i] among the distinct values in order of first appearance; *distinct =
 * their count.  An open-addressing hash set sized to twice n, freed before
 * returning.  0, or -ENOMEM. */
static int dense_ids(const uint64_t *ids, size_t n, uint32_t *out, size_t *distinct)
{
	size_t cap = 16, mask, d = 0;
	uint64_t *key;
	uint32_t *val;

	while (cap < n * 2 && cap < SIZE_MAX / 4)
		cap *= 2;
	mask = cap - 1;
	key = malloc(cap * sizeof(*key));
	val = malloc(cap * sizeof(*val));
	if (!key || !val) {
		free(key);
		free(val);
		return -ENOMEM;
	}
	memset(val, 0xff, cap * sizeof(*val)); /* UINT32_MAX: empty */
	for (size_t i = 0; i < n; i++) {
		size_t h = (size_t)kvs_mix64(ids[i]) & mask; /* ids are small consecutive integers: mix */

		while (val[h] != UINT32_MAX && key[h] != ids[i])
			h = (h + 1) & mask;
		if (val[h] == UINT32_MAX) {
			key[h] = ids[i];
			val[h] = (uint32_t)d++;
		}
		if (out)
			out[i] = val[h];
	}
	free(key);
	free(val);
	*distinct = d;
	return 0;
}

int kvs_trace_dense(const struct kvs_trace *t, uint32_t *out)
{
	size_t d;

	if (!t || (t->nids && (!out || !t->ids)) || t->nids >= UINT32_MAX)
		return -EINVAL;
	return dense_ids(t->ids, t->nids, out, &d);
}

int kvs_trace_load(const char *path, struct kvs_trace *t, char *err, size_t errlen)
{
	struct kvs_trace_req *reqs = NULL;
	size_t nreq = 0, rcap = 0, nids = 0, icap = 0, len = 0, max_blocks = 0;
	uint64_t *ids = NULL, lineno = 0;
	char *buf = NULL, *p, *end, what[256];
	bool sorted = true;
	int rc;

	if (err && errlen)
		err[0] = '\0';
	if (!t)
		return -EINVAL;
	memset(t, 0, sizeof(*t));
	if (!path) {
		errf(err, errlen, "no trace path");
		return -EINVAL;
	}
	rc = slurp(path, &buf, &len);
	if (rc) {
		errf(err, errlen, "%s: %s", path, strerror(-rc));
		return rc;
	}
	for (p = buf, end = buf + len; p < end;) {
		char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);

		lineno++;
		if (!blank(p, n)) {
			if (nreq == rcap) {
				size_t ncap = rcap ? rcap * 2 : 1024;
				struct kvs_trace_req *q =
					ncap < SIZE_MAX / sizeof(*q) ? realloc(reqs, ncap * sizeof(*q)) : NULL;

				if (!q) {
					errf(err, errlen, "%s:%llu: out of memory", path,
					     (unsigned long long)lineno);
					rc = -ENOMEM;
					goto fail;
				}
				reqs = q;
				rcap = ncap;
			}
			rc = kvs_trace_parse_line(p, n, &reqs[nreq], &ids, &nids, &icap, what,
						  sizeof(what));
			if (rc) {
				errf(err, errlen, "%s:%llu: %s", path, (unsigned long long)lineno, what);
				goto fail;
			}
			reqs[nreq].line = lineno;
			if (nreq && reqs[nreq].timestamp_ms < reqs[nreq - 1].timestamp_ms)
				sorted = false;
			if (reqs[nreq].nblocks > max_blocks)
				max_blocks = reqs[nreq].nblocks;
			nreq++;
		}
		p += n + 1;
	}
	if (nreq == 0) {
		errf(err, errlen, "%s: no requests", path);
		rc = -EINVAL;
		goto fail;
	}
	/* ids moved with every realloc: re-point each request (file order) */
	for (size_t i = 0, o = 0; i < nreq; i++) {
		reqs[i].hash_ids = ids ? ids + o : NULL;
		o += reqs[i].nblocks;
	}
	if (!sorted)
		qsort(reqs, nreq, sizeof(*reqs), req_cmp);
	if (nids >= UINT32_MAX) {
		errf(err, errlen, "%s: too many block ids (%zu; at most %u)", path, nids,
		     UINT32_MAX - 1);
		rc = -EINVAL;
		goto fail;
	}
	rc = dense_ids(ids, nids, NULL, &t->distinct);
	if (rc) {
		errf(err, errlen, "%s: out of memory", path);
		goto fail;
	}
	free(buf);
	t->reqs = reqs;
	t->n = nreq;
	t->ids = ids;
	t->nids = nids;
	t->max_blocks = max_blocks;
	return 0;
fail:
	free(buf);
	free(reqs);
	free(ids);
	memset(t, 0, sizeof(*t));
	return rc;
}

void kvs_trace_free(struct kvs_trace *t)
{
	if (!t)
		return;
	free(t->reqs);
	free(t->ids);
	memset(t, 0, sizeof(*t));
}

struct kvs_block_id kvs_trace_block(uint64_t id)
{
	struct kvs_block_id b;

	memset(&b, 0, sizeof(b));
	for (int i = 0; i < 8; i++)
		b.bytes[i] = (uint8_t)(id >> (8 * i));
	return b;
}
