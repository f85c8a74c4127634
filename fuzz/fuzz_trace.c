/*
 * fuzz/fuzz_trace.c — libFuzzer target: arbitrary bytes as Mooncake trace
 * input to the CLI's parser (tools/trace.c), which reads files users hand to
 * `kvshare replay` and `kvshare bench --trace`.
 *
 * Per input the harness:
 *
 *   1. copies the bytes to a buffer of exactly their size (no NUL: ASan sees a
 *      read past the line) and parses them as one line with
 *      kvs_trace_parse_line into an ids array that already holds a few ids,
 *      with an err buffer whose size the first byte picks (0..63, sometimes
 *      NULL), and checks the contract: 0, -EINVAL or -ENOMEM; on success
 *      exactly nblocks ids appended after the old ones (untouched),
 *      req->hash_ids pointing at them, *cap >= *nids; on failure *nids
 *      unchanged; err NUL-terminated within errlen;
 *   2. writes the bytes to a memfd and loads it as a file with kvs_trace_load
 *      (/proc/self/fd/N), and checks: 0, -EINVAL or -ENOMEM; on failure an
 *      empty trace and a message starting with the path; on success requests
 *      sorted by (timestamp, line), line numbers within the file's lines,
 *      every request's ids inside the one array and back to back in file
 *      order, nids their sum, max_blocks the largest, distinct equal to a
 *      sort-based count, as many requests as non-blank lines, and
 *      kvs_trace_dense's indices consistent (first-appearance order, one id
 *      per index, every index used);
 *   3. frees everything (LeakSanitizer checks).
 *
 * A broken promise aborts (libFuzzer records a crash).
 * FUZZ_TRACE_VERBOSE=1 prints each result.
 */
#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tools/trace.h"

static int verbose = -1;
static int memfd = -1;
static char path[64];

static void die(const char *what)
{
	fprintf(stderr, "fuzz_trace: %s\n", what);
	abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	/* a fixed hash seed: jansson's object order (and so its error paths)
	 * the same on every run of an input */
	json_object_seed(1);
	memfd = memfd_create("fuzz_trace", MFD_CLOEXEC);
	if (memfd < 0)
		die("memfd_create failed");
	snprintf(path, sizeof(path), "/proc/self/fd/%d", memfd);
	return 0;
}

static void check_err(const char *err, size_t errlen)
{
	if (err && errlen && !memchr(err, '\0', errlen))
		die("err not NUL-terminated within errlen");
}

static void check_line(const uint8_t *data, size_t size)
{
	static const uint64_t old[3] = { 11, 22, 33 };
	char *line = malloc(size ? size : 1), errbuf[64];
	size_t errlen = size ? data[0] % 64 : sizeof(errbuf);
	char *err = size && data[0] >= 0xf0 ? NULL : errbuf;
	uint64_t *ids = malloc(sizeof(old));
	size_t nids = 3, cap = 3;
	struct kvs_trace_req r;
	int rc;

	if (!line || !ids)
		die("out of memory in the harness");
	if (!err)
		errlen = 0;
	memcpy(line, data, size);
	memcpy(ids, old, sizeof(old));
	memset(&r, 0xa5, sizeof(r));
	memset(errbuf, 'x', sizeof(errbuf));
	rc = kvs_trace_parse_line(line, size, &r, &ids, &nids, &cap, err, errlen);
	if (verbose)
		fprintf(stderr, "fuzz_trace: parse_line rc %d nblocks %u err '%.*s'\n", rc,
			rc ? 0 : r.nblocks, err && errlen ? (int)errlen : 0, err ? err : "");
	if (rc != 0 && rc != -EINVAL && rc != -ENOMEM)
		die("parse_line: unexpected return code");
	check_err(err, errlen);
	if (cap < nids)
		die("parse_line: cap below nids");
	if (memcmp(ids, old, sizeof(old)))
		die("parse_line: earlier ids changed");
	if (rc == 0) {
		if (nids != 3 + (size_t)r.nblocks)
			die("parse_line: nids is not the old count + nblocks");
		if (r.nblocks && r.hash_ids != ids + 3)
			die("parse_line: hash_ids does not point at the appended ids");
		if (err && errlen && err[0])
			die("parse_line: success with an error text");
	} else if (nids != 3) {
		die("parse_line: failure changed nids");
	}
	free(ids);
	free(line);
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int line_cmp(const void *a, const void *b)
{
	const struct kvs_trace_req *x = *(const struct kvs_trace_req *const *)a;
	const struct kvs_trace_req *y = *(const struct kvs_trace_req *const *)b;

	return x->line < y->line ? -1 : x->line > y->line;
}

static void check_load(const uint8_t *data, size_t size)
{
	const struct kvs_trace_req **byline;
	uint32_t *dense;
	size_t *firstpos;
	struct kvs_trace t;
	char err[512];
	size_t lines = 0, nonblank = 0, sum = 0, maxb = 0, distinct = 0;
	uint64_t *sorted;
	int rc;

	if (ftruncate(memfd, 0) || (size && pwrite(memfd, data, size, 0) != (ssize_t)size))
		die("cannot write the memfd");
	/* the lines as the loader sees them: '\n'-separated, blank = only
	 * spaces, tabs and CRs */
	for (size_t i = 0; i < size;) {
		const uint8_t *nl = memchr(data + i, '\n', size - i);
		size_t n = nl ? (size_t)(nl - (data + i)) : size - i;
		bool blank = true;

		for (size_t k = 0; k < n; k++)
			if (data[i + k] != ' ' && data[i + k] != '\t' && data[i + k] != '\r')
				blank = false;
		lines++;
		nonblank += !blank;
		i += n + 1;
	}
	memset(err, 'x', sizeof(err));
	rc = kvs_trace_load(path, &t, err, sizeof(err));
	if (verbose)
		fprintf(stderr, "fuzz_trace: load rc %d n %zu nids %zu distinct %zu err '%s'\n", rc, t.n,
			t.nids, t.distinct, rc ? err : "");
	check_err(err, sizeof(err));
	if (rc != 0 && rc != -EINVAL && rc != -ENOMEM)
		die("load: unexpected return code");
	if (rc) {
		if (t.reqs || t.ids || t.n || t.nids || t.distinct || t.max_blocks)
			die("load: failure left a non-empty trace");
		if (strncmp(err, path, strlen(path)) || err[strlen(path)] != ':')
			die("load: the message does not start with '<path>:'");
		kvs_trace_free(&t);
		return;
	}
	if (t.n == 0 || t.n != nonblank)
		die("load: request count is not the non-blank line count");
	for (size_t i = 0; i < t.n; i++) {
		const struct kvs_trace_req *q = &t.reqs[i];

		if (q->line < 1 || q->line > lines)
			die("load: line number out of range");
		if (i && (t.reqs[i - 1].timestamp_ms > q->timestamp_ms ||
			  (t.reqs[i - 1].timestamp_ms == q->timestamp_ms && t.reqs[i - 1].line >= q->line)))
			die("load: requests not sorted by (timestamp, line)");
		if (q->nblocks && (q->hash_ids < t.ids || q->hash_ids + q->nblocks > t.ids + t.nids))
			die("load: hash_ids outside the id array");
		sum += q->nblocks;
		if (q->nblocks > maxb)
			maxb = q->nblocks;
	}
	if (sum != t.nids || maxb != t.max_blocks)
		die("load: nids or max_blocks wrong");
	/* back to back in file order: the requests taken by line number visit
	 * the array from its start */
	byline = malloc(t.n * sizeof(*byline));
	if (!byline)
		die("out of memory in the harness");
	for (size_t i = 0; i < t.n; i++)
		byline[i] = &t.reqs[i];
	qsort(byline, t.n, sizeof(*byline), line_cmp);
	for (size_t i = 0, at = 0; i < t.n; i++) {
		if (i && byline[i]->line == byline[i - 1]->line)
			die("load: two requests from one line");
		if (byline[i]->nblocks && byline[i]->hash_ids != t.ids + at)
			die("load: ids not back to back in file order");
		at += byline[i]->nblocks;
	}
	free(byline);
	sorted = malloc((t.nids + 1) * sizeof(*sorted));
	if (!sorted)
		die("out of memory in the harness");
	if (t.nids)
		memcpy(sorted, t.ids, t.nids * sizeof(*sorted));
	qsort(sorted, t.nids, sizeof(*sorted), u64_cmp);
	for (size_t i = 0; i < t.nids; i++)
		distinct += i == 0 || sorted[i] != sorted[i - 1];
	free(sorted);
	if (distinct != t.distinct)
		die("load: distinct count wrong");
	/* dense indices: below distinct, in order of first appearance, one id
	 * per index (and distinct indices for distinct ids: all are used) */
	dense = malloc((t.nids + 1) * sizeof(*dense));
	firstpos = malloc((t.distinct + 1) * sizeof(*firstpos));
	if (!dense || !firstpos)
		die("out of memory in the harness");
	if (kvs_trace_dense(&t, dense))
		die("dense: failed on a loaded trace");
	for (size_t i = 0, next = 0; i < t.nids; i++) {
		if (dense[i] > next || dense[i] >= t.distinct)
			die("dense: index out of order or range");
		if (dense[i] == next)
			firstpos[next++] = i;
		else if (t.ids[firstpos[dense[i]]] != t.ids[i])
			die("dense: one index for two ids");
		if (i == t.nids - 1 && next != t.distinct)
			die("dense: not every index used");
	}
	free(dense);
	free(firstpos);
	kvs_trace_free(&t);
	kvs_trace_free(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (verbose < 0)
		verbose = getenv("FUZZ_TRACE_VERBOSE") != NULL;
	check_line(data, size);
	check_load(data, size);
	return 0;
}
