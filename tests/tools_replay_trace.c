/*
 * tests/tools_replay_trace.c — the Mooncake trace parser of the CLI
 * (tools/trace.c): kvs_trace_parse_line's strictness (every malformed field an
 * -EINVAL naming it), kvs_trace_load (blank lines, CRLF, stable timestamp
 * order, one id array, distinct count, "<path>:<line>:" messages, missing and
 * empty files), kvs_trace_dense, kvs_trace_block's encoding, and the two public
 * Mooncake traces (docs/replay.md; optional data read from ../shared/traces,
 * skipped when absent): their counts, loaded in well under a second.
 * The end-to-end replay runs are tests/tools_replay.sh.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "common/clock.h"
#include "harness.h"
#include "tools/trace.h"

static char dir[256];

static kvs_test_rc make_dir(void)
{
	if (dir[0])
		return KVS_TEST_PASS;
	snprintf(dir, sizeof(dir), "%s/kvs-trace-test.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	KVS_CHECK(mkdtemp(dir) != NULL);
	return KVS_TEST_PASS;
}

/* Write text to <dir>/<name>; the path in out. */
static kvs_test_rc write_file(const char *name, const char *text, char *out, size_t outlen)
{
	FILE *f;

	KVS_TRY(make_dir());
	snprintf(out, outlen, "%s/%s", dir, name);
	f = fopen(out, "w");
	KVS_CHECK(f != NULL);
	KVS_CHECK_EQ(fwrite(text, 1, strlen(text), f), strlen(text));
	KVS_CHECK_EQ(fclose(f), 0);
	return KVS_TEST_PASS;
}

/* Parse one line into fresh arrays; the rc, the error text in err. */
static int parse(const char *line, struct kvs_trace_req *r, uint64_t **ids, size_t *nids,
		 char *err, size_t errlen)
{
	size_t cap = 0;

	*ids = NULL;
	*nids = 0;
	return kvs_trace_parse_line(line, strlen(line), r, ids, nids, &cap, err, errlen);
}

static kvs_test_rc test_parse_good(void)
{
	struct kvs_trace_req r;
	uint64_t *ids;
	size_t n;
	char err[256];

	KVS_CHECK_OK(parse("{\"timestamp\": 27482, \"input_length\": 6955, \"output_length\": 52, "
			   "\"hash_ids\": [46, 47, 9223372036854775807], \"extra\": {\"x\": [1.5]}}",
			   &r, &ids, &n, err, sizeof(err)));
	KVS_CHECK_EQ(r.timestamp_ms, 27482);
	KVS_CHECK_EQ(r.input_length, 6955);
	KVS_CHECK_EQ(r.output_length, 52);
	KVS_CHECK_EQ(r.nblocks, 3);
	KVS_CHECK_EQ(n, 3);
	KVS_CHECK(r.hash_ids == ids);
	KVS_CHECK_EQ(ids[0], 46);
	KVS_CHECK(ids[2] == UINT64_C(9223372036854775807));
	free(ids);
	/* empty hash_ids, fields in another order, surrounding blanks */
	KVS_CHECK_OK(parse("  {\"hash_ids\":[],\"output_length\":0,\"input_length\":0,\"timestamp\":0} \r",
			   &r, &ids, &n, err, sizeof(err)));
	KVS_CHECK_EQ(r.nblocks, 0);
	KVS_CHECK_EQ(n, 0);
	free(ids);
	return KVS_TEST_PASS;
}

/* Appends go into one growing array; on error nothing is appended. */
static kvs_test_rc test_parse_appends(void)
{
	uint64_t *ids = NULL;
	size_t n = 0, cap = 0;
	struct kvs_trace_req r;
	char line[128], err[128];

	for (int i = 0; i < 5000; i++) {
		int len = snprintf(line, sizeof(line),
				   "{\"timestamp\":%d,\"input_length\":1,\"output_length\":1,"
				   "\"hash_ids\":[%d,%d]}",
				   i, 2 * i, 2 * i + 1);
		KVS_CHECK_OK(kvs_trace_parse_line(line, (size_t)len, &r, &ids, &n, &cap, err,
						  sizeof(err)));
		KVS_CHECK(r.hash_ids == ids + n - 2);
	}
	KVS_CHECK_EQ(n, 10000);
	KVS_CHECK(cap >= n);
	for (size_t i = 0; i < n; i++)
		KVS_CHECK_EQ(ids[i], i);
	static const char neg[] = "{\"timestamp\":1,\"input_length\":1,\"output_length\":1,"
				  "\"hash_ids\":[1,-2]}";
	static const char tail[] = "{\"timestamp\":1,\"input_length\":1,\"output_length\":1,"
				   "\"hash_ids\":[7]}GARBAGE";
	KVS_CHECK_ERR(kvs_trace_parse_line(neg, strlen(neg), &r, &ids, &n, &cap, err, sizeof(err)),
		      -EINVAL);
	KVS_CHECK_EQ(n, 10000);
	/* err may be NULL; a line need not be NUL-terminated (len counts) */
	KVS_CHECK_ERR(kvs_trace_parse_line("{}", 2, &r, &ids, &n, &cap, NULL, 0), -EINVAL);
	KVS_CHECK_OK(kvs_trace_parse_line(tail, strlen(tail) - strlen("GARBAGE"), &r, &ids, &n, &cap,
					  NULL, 0));
	KVS_CHECK_EQ(n, 10001);
	KVS_CHECK_EQ(ids[10000], 7);
	free(ids);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_parse_bad(void)
{
	static const struct {
		const char *line, *want;
	} bad[] = {
		{ "", "invalid JSON" },
		{ "   ", "invalid JSON" },
		{ "not json", "invalid JSON" },
		{ "{\"timestamp\": 1,", "invalid JSON" },
		{ "[1, 2]", "not a JSON object" },
		{ "17", "invalid JSON" }, /* jansson: an object or array at the top */
		{ "{\"input_length\":1,\"output_length\":1,\"hash_ids\":[]}", "missing field \"timestamp\"" },
		{ "{\"timestamp\":1,\"output_length\":1,\"hash_ids\":[]}", "missing field \"input_length\"" },
		{ "{\"timestamp\":1,\"input_length\":1,\"hash_ids\":[]}", "missing field \"output_length\"" },
		{ "{\"timestamp\":1,\"input_length\":1,\"output_length\":1}", "missing field \"hash_ids\"" },
		{ "{\"timestamp\":1.5,\"input_length\":1,\"output_length\":1,\"hash_ids\":[]}",
		  "\"timestamp\" is not an integer" },
		{ "{\"timestamp\":1.0,\"input_length\":1,\"output_length\":1,\"hash_ids\":[]}",
		  "\"timestamp\" is not an integer" },
		{ "{\"timestamp\":\"1\",\"input_length\":1,\"output_length\":1,\"hash_ids\":[]}",
		  "\"timestamp\" is not an integer" },
		{ "{\"timestamp\":-1,\"input_length\":1,\"output_length\":1,\"hash_ids\":[]}",
		  "\"timestamp\" is negative" },
		{ "{\"timestamp\":1,\"input_length\":-5,\"output_length\":1,\"hash_ids\":[]}",
		  "\"input_length\" is negative" },
		{ "{\"timestamp\":1,\"input_length\":1,\"output_length\":null,\"hash_ids\":[]}",
		  "\"output_length\" is not an integer" },
		{ "{\"timestamp\":1,\"input_length\":1,\"output_length\":1,\"hash_ids\":{}}",
		  "\"hash_ids\" is not an array" },
		{ "{\"timestamp\":1,\"input_length\":1,\"output_length\":1,\"hash_ids\":[1,\"2\"]}",
		  "hash_ids[1] is not an integer" },
		{ "{\"timestamp\":1,\"input_length\":1,\"output_length\":1,\"hash_ids\":[1,2,3.0]}",
		  "hash_ids[2] is not an integer" },
		{ "{\"timestamp\":1,\"input_length\":1,\"output_length\":1,\"hash_ids\":[-1]}",
		  "hash_ids[0] is negative" },
		{ "{\"timestamp\":1,\"input_length\":1,\"output_length\":1,\"hash_ids\":[[1]]}",
		  "hash_ids[0] is not an integer" },
		{ "{\"timestamp\":99999999999999999999,\"input_length\":1,\"output_length\":1,\"hash_ids\":[]}",
		  "invalid JSON" },
		{ "{\"timestamp\":1,\"timestamp\":2,\"input_length\":1,\"output_length\":1,\"hash_ids\":[]}",
		  "invalid JSON" },
		{ "{\"timestamp\":1,\"input_length\":1,\"output_length\":1,\"hash_ids\":[]} {}",
		  "invalid JSON" },
	};
	struct kvs_trace_req r;
	uint64_t *ids;
	size_t n;
	char err[256];

	for (size_t i = 0; i < KVS_ARRAY_LEN(bad); i++) {
		int rc = parse(bad[i].line, &r, &ids, &n, err, sizeof(err));

		free(ids);
		if (rc != -EINVAL || !strstr(err, bad[i].want))
			KVS_FAILF("line '%s': rc %d, err '%s', want -EINVAL and '%s'", bad[i].line, rc,
				  err, bad[i].want);
		KVS_CHECK_EQ(n, 0);
	}
	/* a short err buffer is truncated, NUL-terminated */
	KVS_CHECK_ERR(parse("[]", &r, &ids, &n, err, 4), -EINVAL);
	free(ids);
	KVS_CHECK_EQ(strlen(err), 3);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_load_order(void)
{
	struct kvs_trace t;
	char path[512], err[512];

	/* file order != timestamp order; 20 twice (file order kept); a blank
	 * line, a CRLF line, no final newline */
	KVS_TRY(write_file("order.jsonl",
			   "{\"timestamp\": 30, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [5]}\n"
			   "{\"timestamp\": 20, \"input_length\": 2, \"output_length\": 1, \"hash_ids\": [1, 2]}\n"
			   "\n"
			   "   \t\r\n"
			   "{\"timestamp\": 0, \"input_length\": 3, \"output_length\": 1, \"hash_ids\": []}\r\n"
			   "{\"timestamp\": 20, \"input_length\": 4, \"output_length\": 1, \"hash_ids\": [1, 2, 3]}\n"
			   "{\"timestamp\": 10, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [5, 1]}",
			   path, sizeof(path)));
	KVS_CHECK_OK(kvs_trace_load(path, &t, err, sizeof(err)));
	KVS_CHECK_EQ(t.n, 5);
	KVS_CHECK_EQ(t.nids, 8);
	KVS_CHECK_EQ(t.distinct, 4);
	KVS_CHECK_EQ(t.max_blocks, 3);
	static const uint64_t want_in[] = { 3, 5, 2, 4, 1 }, want_line[] = { 5, 7, 2, 6, 1 };
	for (size_t i = 0; i < t.n; i++) {
		KVS_CHECK_EQ(t.reqs[i].input_length, want_in[i]);
		KVS_CHECK_EQ(t.reqs[i].line, want_line[i]);
		KVS_CHECK(t.reqs[i].hash_ids >= t.ids && t.reqs[i].hash_ids + t.reqs[i].nblocks <= t.ids + t.nids);
	}
	KVS_CHECK_EQ(t.reqs[1].hash_ids[0], 5);
	KVS_CHECK_EQ(t.reqs[1].hash_ids[1], 1);
	KVS_CHECK_EQ(t.reqs[3].hash_ids[2], 3);
	/* ids back to back in file order */
	static const uint64_t want_ids[] = { 5, 1, 2, 1, 2, 3, 5, 1 };
	for (size_t i = 0; i < t.nids; i++)
		KVS_CHECK_EQ(t.ids[i], want_ids[i]);
	/* dense indices: order of first appearance in the file */
	static const uint32_t want_dense[] = { 0, 1, 2, 1, 2, 3, 0, 1 };
	uint32_t dense[8];
	KVS_CHECK_OK(kvs_trace_dense(&t, dense));
	for (size_t i = 0; i < t.nids; i++)
		KVS_CHECK_EQ(dense[i], want_dense[i]);
	KVS_CHECK_ERR(kvs_trace_dense(&t, NULL), -EINVAL);
	KVS_CHECK_ERR(kvs_trace_dense(NULL, dense), -EINVAL);
	kvs_trace_free(&t);
	KVS_CHECK_OK(kvs_trace_dense(&t, NULL)); /* an empty trace: nothing to map */
	kvs_trace_free(&t); /* twice: a no-op */
	kvs_trace_free(NULL);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_load_errors(void)
{
	struct kvs_trace t;
	char path[512], err[512], want[600];

	KVS_TRY(write_file("bad.jsonl",
			   "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}\n"
			   "\n"
			   "{\"timestamp\": 1, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}\n"
			   "{\"timestamp\": 2, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1,]}\n",
			   path, sizeof(path)));
	KVS_CHECK_ERR(kvs_trace_load(path, &t, err, sizeof(err)), -EINVAL);
	snprintf(want, sizeof(want), "%s:4: invalid JSON", path);
	if (strncmp(err, want, strlen(want)))
		KVS_FAILF("err '%s', want '%s...'", err, want);
	KVS_CHECK(t.reqs == NULL && t.ids == NULL && t.n == 0);
	kvs_trace_free(&t);

	KVS_TRY(write_file("neg.jsonl",
			   "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}\n"
			   "{\"timestamp\": 1, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1, -3]}\n",
			   path, sizeof(path)));
	KVS_CHECK_ERR(kvs_trace_load(path, &t, err, sizeof(err)), -EINVAL);
	snprintf(want, sizeof(want), "%s:2: hash_ids[1] is negative (-3)", path);
	KVS_CHECK(strcmp(err, want) == 0);

	KVS_TRY(write_file("empty.jsonl", "\n\n  \n", path, sizeof(path)));
	KVS_CHECK_ERR(kvs_trace_load(path, &t, err, sizeof(err)), -EINVAL);
	snprintf(want, sizeof(want), "%s: no requests", path);
	KVS_CHECK(strcmp(err, want) == 0);

	snprintf(path, sizeof(path), "%s/does-not-exist.jsonl", dir);
	KVS_CHECK_ERR(kvs_trace_load(path, &t, err, sizeof(err)), -ENOENT);
	snprintf(want, sizeof(want), "%s: %s", path, strerror(ENOENT));
	KVS_CHECK(strcmp(err, want) == 0);

	KVS_CHECK_ERR(kvs_trace_load(dir, &t, err, sizeof(err)), -EISDIR);
	KVS_CHECK_ERR(kvs_trace_load(NULL, &t, err, sizeof(err)), -EINVAL);
	KVS_CHECK_ERR(kvs_trace_load(path, NULL, NULL, 0), -EINVAL);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_block_id(void)
{
	struct kvs_block_id b = kvs_trace_block(UINT64_C(0x0102030405060708));
	static const uint8_t want[16] = { 8, 7, 6, 5, 4, 3, 2, 1 };

	KVS_CHECK(memcmp(b.bytes, want, 16) == 0);
	b = kvs_trace_block(0);
	for (int i = 0; i < 16; i++)
		KVS_CHECK_EQ(b.bytes[i], 0);
	return KVS_TEST_PASS;
}

/* The public Mooncake traces in ../shared/traces (optional, skipped when
 * absent): their counts (docs/replay.md, "Results on the Mooncake traces"), and
 * fast. */
static kvs_test_rc test_shared_traces(void)
{
	static const struct {
		const char *name;
		size_t n, nids, distinct;
	} tr[] = {
		{ "synthetic_trace.jsonl", 3993, 121877, 43924 },
		{ "mooncake_trace_1000.jsonl", 1000, 19686, 12207 },
	};
	int found = 0;

	for (size_t i = 0; i < KVS_ARRAY_LEN(tr); i++) {
		struct kvs_trace t;
		char path[512], err[512];
		uint64_t t0;

		snprintf(path, sizeof(path), "%s/%s", KVS_SHARED_TRACES, tr[i].name);
		if (access(path, R_OK) != 0)
			continue;
		found++;
		t0 = kvs_now_ns();
		KVS_CHECK_OK(kvs_trace_load(path, &t, err, sizeof(err)));
		t0 = kvs_now_ns() - t0;
		printf("%s: %zu requests, %zu ids, %zu distinct, loaded in %.1f ms\n", tr[i].name, t.n,
		       t.nids, t.distinct, (double)t0 / 1e6);
		KVS_CHECK_EQ(t.n, tr[i].n);
		KVS_CHECK_EQ(t.nids, tr[i].nids);
		KVS_CHECK_EQ(t.distinct, tr[i].distinct);
		for (size_t k = 1; k < t.n; k++)
			KVS_CHECK(t.reqs[k - 1].timestamp_ms <= t.reqs[k].timestamp_ms);
		/* generous: sanitizer builds are several times slower than 1 s needs */
		KVS_CHECK(t0 < 5ull * 1000000000ull);
		kvs_trace_free(&t);
	}
	if (!found)
		KVS_SKIP("no trace in %s", KVS_SHARED_TRACES);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_cleanup(void)
{
	char cmd[300];

	if (dir[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		KVS_CHECK_EQ(system(cmd), 0);
	}
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "parse_good", test_parse_good },
	{ "parse_appends", test_parse_appends },
	{ "parse_bad", test_parse_bad },
	{ "load_order", test_load_order },
	{ "load_errors", test_load_errors },
	{ "block_id", test_block_id },
	{ "shared_traces", test_shared_traces },
	{ "cleanup", test_cleanup },
};

KVS_TEST_MAIN(cases)
