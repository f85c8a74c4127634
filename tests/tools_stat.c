/*
 * tests/tools_stat.c — `kvshare stat` end to end, as an operator runs it: the CLI
 * binary (its path is this program's first argument, from CMake) is fork+exec'd
 * and judged by its exit code, stdout (parsed with jansson for --json) and
 * stderr, against caches held by real rank processes (exec'd copies of this
 * program loading or dumping through their stores; tools_admin_util.c).
 *
 *   stat_live        2 ranks hold a cache and loaded the same 8 blocks: stat --json
 *                    (ranks, slot census, store counters, per-rank rows), text,
 *                    --prometheus FILE (format, metrics, no FILE.tmp left), --watch
 *                    ended by SIGTERM; the ranks are undisturbed afterwards
 *   stat_joins       3 ranks load the same shards at once: the joins of a read in
 *                    flight are counted and add up (queries = hits + joins +
 *                    misses) in --json, text and --prometheus
 *   stat_dumps       a rank that only dumps (its dumps all dedup): no load hits in
 *                    stat, --json or --prometheus (gets, hit ratios of loads), its
 *                    dedups apart (DEDUP, dump_gets, dump_dedup)
 *   stat_dead_ranks  every rank killed -9 under a watching exporter: no live rank
 *                    counted or listed, ready (nothing left to register)
 *   stat_reaped      a rank killed -9 beside a live one: a one-shot stat (text, then
 *                    --json) that reaps it says whom, by pid
 *   stat_stale       a stale cache is described read-only, exit 1, not adopted; its
 *                    dead rank by pid; --prometheus exports its state and bytes
 *   stat_last_left   a watcher never keeps a cache: stat --watch started before
 *                    any rank waits (kvshare_up 0), attaches to a rank's cache,
 *                    and when the only rank closes the cache is removed and stat
 *                    waits for the next one; twice
 */
#include <fcntl.h>
#include <sys/stat.h>

#include "tools_admin_util.h"

/* ---- stat ---- */

static kvs_test_rc check_stat_json(json_t *j, const char *uid, const struct ranks *r)
{
	json_t *ranks = json_object_get(j, "ranks");
	int seen = 0;

	KVS_CHECK(j != NULL);
	KVS_CHECK(strcmp(json_string_value(json_object_get(j, "unique_id")), uid) == 0);
	KVS_CHECK(strcmp(json_string_value(json_object_get(j, "state")), "live") == 0);
	KVS_CHECK_EQ(jint(j, "ranks_attached"), 3); /* 2 ranks + stat */
	/* the test's ranks copy with the host engine: CPU-only, not GPU ranks */
	KVS_CHECK_EQ(jint(j, "device_ranks_attached"), 2);
	KVS_CHECK_EQ(jint(j, "gpu_ranks_attached"), 0);
	KVS_CHECK_EQ(jint(j, "cpu_ranks_attached"), 2);
	KVS_CHECK_EQ(json_array_size(json_object_get(j, "reaped")), 0);
	KVS_CHECK_EQ(jint(j, "local_rank_size"), 2);
	KVS_CHECK_EQ(jint(j, "slot_count"), 64);
	KVS_CHECK_EQ(jint(j, "slot_bytes"), SHARD);
	KVS_CHECK_EQ(jint(j, "capacity_bytes"), 64 * SHARD);
	KVS_CHECK_EQ(jint(j, "slots/ready"), NBLK);
	KVS_CHECK_EQ(jint(j, "slots/loading"), 0);
	KVS_CHECK_EQ(jint(j, "slots/failed"), 0);
	KVS_CHECK_EQ(jint(j, "slots/empty"), 64 - NBLK);
	KVS_CHECK_EQ(jint(j, "slots/pinned"), 0);
	KVS_CHECK_EQ(jint(j, "cache/misses"), NBLK);       /* one owner per shard */
	KVS_CHECK_EQ(jint(j, "cache/owner_fills"), NBLK);
	KVS_CHECK_EQ(jint(j, "cache/hits"), NBLK);         /* the second rank's loads */
	KVS_CHECK_EQ(jint(j, "cache/dedup_hits"), NBLK);
	KVS_CHECK_EQ(jint(j, "cache/dump_gets"), 0);
	KVS_CHECK_EQ(jint(j, "cache/failures"), 0);
	KVS_CHECK_EQ(jint(j, "store/tasks_load"), 2);
	KVS_CHECK_EQ(jint(j, "store/shards_loaded"), 2 * NBLK);
	KVS_CHECK_EQ(jint(j, "store/owner_reads"), NBLK);
	KVS_CHECK_EQ(jint(j, "store/load_hits"), NBLK);
	KVS_CHECK_EQ(jint(j, "store/tasks_failed"), 0);
	KVS_CHECK_EQ(jint(j, "store/copy_bytes"), 2 * NBLK * SHARD);
	KVS_CHECK_EQ(jint(j, "store/task_latency/tasks"), 2);
	KVS_CHECK(jint(j, "store/task_latency/p50_us_max") >= 2);
	KVS_CHECK(jint(j, "store/task_latency/p99_us_max") >= jint(j, "store/task_latency/p50_us_max"));
	KVS_CHECK(json_real_value(json_object_get(json_object_get(j, "store"), "copy_gbps")) > 0);
	KVS_CHECK_EQ(json_array_size(json_object_get(j, "segments")), 1);
	KVS_CHECK(strcmp(json_string_value(json_object_get(json_array_get(json_object_get(j, "segments"), 0),
							   "backing")), "shm") == 0);
	KVS_CHECK_EQ(json_array_size(ranks), 3);
	for (size_t i = 0; i < json_array_size(ranks); i++) {
		json_t *e = json_array_get(ranks, i);

		KVS_CHECK(json_is_true(json_object_get(e, "alive")));
		if (json_is_true(json_object_get(e, "self"))) {
			KVS_CHECK_EQ(jint(e, "device_id"), -1);
			KVS_CHECK(strcmp(json_string_value(json_object_get(e, "kind")), "watcher") == 0);
			KVS_CHECK(json_is_null(json_object_get(e, "copy_engine")));
			continue;
		}
		KVS_CHECK(strcmp(json_string_value(json_object_get(e, "kind")), "cpu") == 0);
		KVS_CHECK(strcmp(json_string_value(json_object_get(e, "copy_engine")), "host") == 0);
		for (int k = 0; k < r->n; k++)
			if (jint(e, "pid") == r->pid[k]) {
				KVS_CHECK_EQ(jint(e, "device_id"), k);
				KVS_CHECK_EQ(jint(e, "store/tasks_load"), 1);
				KVS_CHECK_EQ(jint(e, "store/shards_loaded"), NBLK);
				seen++;
			}
	}
	KVS_CHECK_EQ(seen, 2);
	return KVS_TEST_PASS;
}

/* Run a `stat --watch` until its stdout has `lines` lines after the first line
 * holding `after` (NULL: from the start), then SIGTERM: it must exit 0.  Its
 * output in run. */
static kvs_test_rc watch_until(struct run *run, const char *const args[], const char *after,
			       int lines)
{
	int ofd, efd, seen = 0;
	size_t len = 0;
	pid_t pid = cli_spawn(args, &ofd, &efd);
	uint64_t deadline = kvs_deadline_after(10 * ST_SEC);

	KVS_CHECK(pid > 0);
	run->out[0] = run->err[0] = '\0';
	while (seen < lines && kvs_now_ns() < deadline) {
		struct pollfd p = { .fd = ofd, .events = POLLIN };
		char *from;
		ssize_t n;

		if (poll(&p, 1, 100) <= 0)
			continue;
		n = read(ofd, run->out + len, sizeof(run->out) - 1 - len);
		if (n <= 0)
			break;
		len += (size_t)n;
		run->out[len] = '\0';
		from = after ? strstr(run->out, after) : run->out;
		if (from && after)
			from = strchr(from, '\n');
		seen = 0;
		for (char *q = from; q && (q = strchr(q, '\n')); q++)
			seen++;
		if (from && after)
			seen--; /* the header's own newline */
	}
	KVS_TRY(cli_stop(run, pid, ofd, efd, len));
	if (seen < lines)
		KVS_FAILF("%d of %d lines within 10 s; stdout:\n%s", seen, lines, run->out);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_stat_live(void)
{
	struct ranks r;
	struct run *run = calloc(1, sizeof(*run));
	struct kvs_cache_info info;
	char uid[80], prom[160], want[256], *text = malloc(65536);
	json_t *j;

	KVS_CHECK(run && text);
	kvs_test_unique_id(uid, sizeof(uid), "tstat");
	KVS_TRY(ranks_start(&r, uid, 2, false));

	const char *a_json[] = { "stat", uid, "--json", NULL };
	KVS_TRY(cli_expect(run, 0, a_json));
	j = parse_json(run->out);
	KVS_TRY(check_stat_json(j, uid, &r));
	json_decref(j);

	const char *a_text[] = { "stat", uid, NULL };
	KVS_TRY(cli_expect(run, 0, a_text));
	KVS_TRY(has(run->out, "live: 2 CPU-only ranks + 1 watcher")); /* was "2 GPU ranks" */
	KVS_CHECK(strstr(run->out, "GPU rank") == NULL);
	KVS_TRY(has(run->out, "segment 0: shm"));
	KVS_TRY(has(run->out, "local_rank_size 2, ranks seen 2"));
	KVS_CHECK(strstr(run->out, "  reaped ") == NULL);
	KVS_TRY(has(run->out, "copy "));
	KVS_CHECK(run->err[0] == '\0');

	snprintf(prom, sizeof(prom), "/tmp/kvs-%s.prom", uid);
	const char *a_prom[] = { "stat", uid, "--prometheus", prom, "--quiet", NULL };
	KVS_TRY(cli_expect(run, 0, a_prom));
	KVS_CHECK(run->out[0] == '\0');
	KVS_TRY(check_prom_file(prom, text, 65536));
#define PROM(...) do { snprintf(want, sizeof(want), __VA_ARGS__); KVS_TRY(has(text, want)); } while (0)
	/* the exporter does not count itself */
	PROM("# TYPE kvshare_ranks_attached gauge\nkvshare_ranks_attached{unique_id=\"%s\"} 2\n", uid);
	PROM("kvshare_gpu_ranks_attached{unique_id=\"%s\"} 0\n", uid);
	PROM("kvshare_cpu_ranks_attached{unique_id=\"%s\"} 2\n", uid);
	PROM("kvshare_cache_state{unique_id=\"%s\",state=\"live\"} 1\n", uid);
	PROM("kvshare_cache_state{unique_id=\"%s\",state=\"stale\"} 0\n", uid);
	PROM("kvshare_fallback{unique_id=\"%s\",kind=\"numa\"} 0\n", uid);
	PROM("kvshare_slots{unique_id=\"%s\",state=\"ready\"} %u\n", uid, NBLK);
	PROM("kvshare_capacity_bytes{unique_id=\"%s\"} %u\n", uid, 64 * SHARD);
	PROM("# TYPE kvshare_hits_total counter\nkvshare_hits_total{unique_id=\"%s\"} %u\n", uid, NBLK);
	PROM("kvshare_owner_fills_total{unique_id=\"%s\"} %u\n", uid, NBLK);
	PROM("# TYPE kvshare_wait_seconds_total counter\n");
	PROM("kvshare_store_tasks_total{unique_id=\"%s\",op=\"load\"} 2\n", uid);
	PROM("kvshare_store_shards_loaded_total{unique_id=\"%s\"} %u\n", uid, 2 * NBLK);
	PROM("# TYPE kvshare_store_task_latency_seconds histogram\n");
	PROM("kvshare_store_task_latency_seconds_bucket{unique_id=\"%s\",le=\"+Inf\"} 2\n", uid);
	PROM("kvshare_store_task_latency_seconds_count{unique_id=\"%s\"} 2\n", uid);
	PROM("kvshare_store_task_latency_seconds_bucket{unique_id=\"%s\",le=\"0.000002\"}", uid);
	PROM("kvshare_store_task_latency_seconds_bucket{unique_id=\"%s\",le=\"1.048576\"}", uid);
	PROM("kvshare_store_task_latency_seconds_sum{unique_id=\"%s\"} ", uid);
	/* per rank, by device and kind: no pid, no reused entry index, no watcher */
	PROM("kvshare_rank_info{unique_id=\"%s\",device=\"0\",kind=\"cpu\"} 1\n", uid);
	PROM("kvshare_rank_info{unique_id=\"%s\",device=\"1\",kind=\"cpu\"} 1\n", uid);
	PROM("kvshare_rank_store_shards_loaded_total{unique_id=\"%s\",device=\"1\"} %u\n", uid, NBLK);
	KVS_CHECK(strstr(text, "pid=") == NULL && strstr(text, "rank=") == NULL);
	KVS_CHECK(strstr(text, "kvshare_store_registered_bytes_total") == NULL);
	PROM("# TYPE kvshare_store_registered_bytes gauge\n");
#undef PROM
	unlink(prom);

	/* --watch --json: two intervals, then SIGTERM: a clean exit. */
	const char *a_watch[] = { "stat", uid, "--watch", "0.2", "--json", NULL };
	KVS_TRY(watch_until(run, a_watch, NULL, 2));
	for (char *q = run->out, *nl; (nl = strchr(q, '\n')); q = nl + 1) {
		*nl = '\0';
		j = parse_json(q);
		KVS_CHECK(j != NULL);
		KVS_CHECK_EQ(jint(j, "ranks_attached"), 3);
		json_decref(j);
	}
	KVS_CHECK(run->err[0] == '\0');
	/* --watch in text: the block once, then a header and one line of rates per
	 * interval (not the block again) */
	const char *a_watch_text[] = { "stat", uid, "--watch", "0.2", NULL };
	KVS_TRY(watch_until(run, a_watch_text, "gets/s", 3));
	KVS_TRY(has(run->out, "  gets       "));
	{
		char *hdr = strstr(run->out, "time        gets/s");
		int after = 0;

		KVS_CHECK(hdr != NULL);
		KVS_CHECK(strstr(hdr + 1, "  gets       ") == NULL); /* the block once only */
		for (char *q = strchr(hdr, '\n'); q && q[1]; q = strchr(q + 1, '\n')) {
			KVS_CHECK(q[3] == ':' && q[6] == ':'); /* "\nHH:MM:SS ..." */
			after++;
		}
		KVS_CHECK(after >= 2);
	}

	/* stat left nothing behind and disturbed nobody. */
	KVS_CHECK_OK(kvs_cache_inspect(uid, &info));
	KVS_CHECK_EQ(info.ranks_live, 2);
	KVS_CHECK_EQ(info.adoptions, 0);
	KVS_TRY(ranks_stop(&r));
	KVS_CHECK(!ctl_exists(uid)); /* the last rank removed it: stat's entry was freed */
	free(run);
	free(text);
	return KVS_TEST_PASS;
}

/*
 * Three ranks load the same NBLK shards at once (reads held 300 ms): one read
 * per shard, the others join it.  stat, --json and --prometheus show the
 * sharing: queries = hits + joins + misses = 3 x NBLK, misses = owner reads =
 * NBLK, joins > 0 (before, joins were counted nowhere: "hits 0, waits 0").
 */
static kvs_test_rc test_stat_joins(void)
{
	struct ranks r;
	struct run *run = calloc(1, sizeof(*run));
	char uid[80], prom[160], want[256], *text = malloc(65536);
	long long joins;
	json_t *j;

	KVS_CHECK(run && text);
	kvs_test_unique_id(uid, sizeof(uid), "tjoin");
	KVS_TRY(ranks_start_together(&r, uid, 3, 300 * ST_MS));
	const char *a_json[] = { "stat", uid, "--json", NULL };
	KVS_TRY(cli_expect(run, 0, a_json));
	j = parse_json(run->out);
	KVS_CHECK(j != NULL);
	joins = jint(j, "cache/joins");
	printf("  3 ranks at once: queries %lld = hits %lld + joins %lld + misses %lld; owner "
	       "reads %lld\n", jint(j, "cache/queries"), jint(j, "cache/hits"), joins,
	       jint(j, "cache/misses"), jint(j, "store/owner_reads"));
	KVS_CHECK_EQ(jint(j, "cache/queries"), 3 * NBLK);
	KVS_CHECK_EQ(jint(j, "cache/hits") + joins + jint(j, "cache/misses"), 3 * NBLK);
	KVS_CHECK_EQ(jint(j, "cache/misses"), NBLK);
	KVS_CHECK_EQ(jint(j, "store/owner_reads"), NBLK);
	KVS_CHECK_EQ(jint(j, "store/shards_loaded"), 3 * NBLK);
	KVS_CHECK_EQ(jint(j, "cache/dedup_hits"), 2 * NBLK);
	KVS_CHECK(joins > 0);
	json_decref(j);

	const char *a_text[] = { "stat", uid, NULL };
	KVS_TRY(cli_expect(run, 0, a_text));
	snprintf(want, sizeof(want), "gets       %u (loads) = ", 3 * NBLK);
	KVS_TRY(has(run->out, want));
	snprintf(want, sizeof(want), " joins (a read in flight) + %u misses", NBLK);
	KVS_TRY(has(run->out, want));
	KVS_TRY(has(run->out, "served by the tier 66.7%"));

	snprintf(prom, sizeof(prom), "/tmp/kvs-%s.prom", uid);
	const char *a_prom[] = { "stat", uid, "--prometheus", prom, "--quiet", NULL };
	KVS_TRY(cli_expect(run, 0, a_prom));
	KVS_TRY(check_prom_file(prom, text, 65536));
	snprintf(want, sizeof(want), "kvshare_joins_total{unique_id=\"%s\"} %lld\n", uid, joins);
	KVS_TRY(has(text, want));
	snprintf(want, sizeof(want), "kvshare_queries_total{unique_id=\"%s\"} %u\n", uid, 3 * NBLK);
	KVS_TRY(has(text, want));
	unlink(prom);
	KVS_TRY(ranks_stop(&r));
	free(run);
	free(text);
	return KVS_TEST_PASS;
}

/* Poll the exporter's file (every 20 ms, up to 10 s) until it holds want; its
 * last text in text[cap].  1 found, 0 not. */
static int prom_wait(const char *prom, const char *want, char *text, size_t cap)
{
	uint64_t deadline = kvs_deadline_after(10 * ST_SEC);

	for (;;) {
		FILE *f = fopen(prom, "re");
		size_t n = f ? fread(text, 1, cap - 1, f) : 0;

		if (f)
			fclose(f);
		text[n] = '\0';
		if (strstr(text, want))
			return 1;
		if (kvs_now_ns() >= deadline)
			return 0;
		usleep(20000);
	}
}

/*
 * Every rank killed -9 while an exporter watches (it keeps the cache attached):
 * the next file counts no live rank, lists no rank series, and says ready (no
 * live rank has anything left to register).  Before: kvshare_gpu_ranks_attached
 * 2, kvshare_ranks_attached 3, kvshare_store_ready 0 ("NOT ready").
 */
static kvs_test_rc test_stat_dead_ranks(void)
{
	struct ranks r;
	struct run *run = calloc(1, sizeof(*run));
	char uid[80], prom[160], want[256], *text = malloc(65536);
	int ofd, efd, ok;

	KVS_CHECK(run && text);
	kvs_test_unique_id(uid, sizeof(uid), "tsdead");
	snprintf(prom, sizeof(prom), "/tmp/kvs-%s.prom", uid);
	KVS_TRY(ranks_start(&r, uid, 2, false));
	const char *a[] = { "stat", uid, "--watch", "0.1", "--prometheus", prom, "--quiet", NULL };
	pid_t pid = cli_spawn(a, &ofd, &efd);
	KVS_CHECK(pid > 0);
	/* the exporter attached (its first file says 2 live ranks: CPU-only), then the kills */
	snprintf(want, sizeof(want), "kvshare_cpu_ranks_attached{unique_id=\"%s\"} 2\n", uid);
	ok = prom_wait(prom, want, text, 65536);
	if (ok) {
		KVS_TRY(ranks_kill(&r));
		snprintf(want, sizeof(want), "kvshare_cpu_ranks_attached{unique_id=\"%s\"} 0\n", uid);
		ok = prom_wait(prom, want, text, 65536);
	}
	KVS_TRY(cli_stop(run, pid, ofd, efd, 0));
	if (!ok)
		KVS_FAILF("no file with %s within 10 s; the last:\n%s", want, text);
	snprintf(want, sizeof(want), "kvshare_ranks_attached{unique_id=\"%s\"} 0\n", uid);
	KVS_TRY(has(text, want));
	snprintf(want, sizeof(want), "kvshare_ranks_dead{unique_id=\"%s\"} 2\n", uid);
	KVS_TRY(has(text, want));
	snprintf(want, sizeof(want), "kvshare_store_ready{unique_id=\"%s\"} 1\n", uid);
	KVS_TRY(has(text, want));
	KVS_CHECK(strstr(text, "kvshare_rank_info{unique_id") == NULL);
	unlink(prom);
	const char *ac[] = { "clean", uid, NULL };
	KVS_TRY(cli_expect(run, 0, ac));
	free(run);
	free(text);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_stat_stale(void)
{
	struct ranks r;
	struct run *run = calloc(1, sizeof(*run));
	struct kvs_cache_info info;
	json_t *j;
	char uid[80], prom[160], want[256], *text = malloc(65536);

	KVS_CHECK(run && text);
	kvs_test_unique_id(uid, sizeof(uid), "tsstale");
	KVS_TRY(ranks_start(&r, uid, 1, false));
	KVS_TRY(ranks_kill(&r));
	const char *a[] = { "stat", uid, NULL };
	KVS_TRY(cli_expect(run, 1, a));
	KVS_TRY(one_line_err(run, "stale"));
	KVS_TRY(has(run->out, "stale: no live process attached"));
	const char *aj[] = { "stat", uid, "--json", NULL };
	KVS_TRY(cli_expect(run, 1, aj));
	j = parse_json(run->out);
	KVS_CHECK(j != NULL);
	KVS_CHECK(strcmp(json_string_value(json_object_get(j, "state")), "stale") == 0);
	KVS_CHECK_EQ(jint(j, "slot_count"), 64);
	KVS_CHECK_EQ(jint(j, "ranks_dead"), 1);
	KVS_CHECK_EQ(json_integer_value(json_object_get(json_array_get(json_object_get(j, "dead_ranks"),
								      0), "pid")), r.pid[0]);
	json_decref(j);
	/* the text names the dead rank by pid */
	snprintf(want, sizeof(want), "  dead       1 rank: pid %d (entry ", (int)r.pid[0]);
	KVS_TRY(cli_expect(run, 1, a));
	KVS_TRY(has(run->out, want));
	/* the exporter sees it (was: no file): down, stale, the memory it holds */
	snprintf(prom, sizeof(prom), "/tmp/kvs-%s.prom", uid);
	const char *ap[] = { "stat", uid, "--prometheus", prom, "--quiet", NULL };
	KVS_TRY(cli_expect(run, 1, ap));
	KVS_TRY(check_prom_file(prom, text, 65536));
	snprintf(want, sizeof(want), "kvshare_up{unique_id=\"%s\"} 0\n", uid);
	KVS_TRY(has(text, want));
	snprintf(want, sizeof(want), "kvshare_cache_state{unique_id=\"%s\",state=\"stale\"} 1\n", uid);
	KVS_TRY(has(text, want));
	snprintf(want, sizeof(want), "kvshare_cache_state{unique_id=\"%s\",state=\"live\"} 0\n", uid);
	KVS_TRY(has(text, want));
	snprintf(want, sizeof(want), "kvshare_ranks_dead{unique_id=\"%s\"} 1\n", uid);
	KVS_TRY(has(text, want));
	KVS_CHECK_OK(kvs_cache_inspect(uid, &info));
	snprintf(want, sizeof(want), "kvshare_data_bytes{unique_id=\"%s\"} %llu\n", uid,
		 (unsigned long long)info.data_bytes);
	KVS_TRY(has(text, want));
	snprintf(want, sizeof(want), "kvshare_capacity_bytes{unique_id=\"%s\"} %u\n", uid, 64 * SHARD);
	KVS_TRY(has(text, want));
	unlink(prom);
	KVS_CHECK_EQ(info.adoptions, 0); /* not attached, so not adopted */
	KVS_CHECK_EQ(info.ranks_live, 0);
	const char *ac[] = { "clean", uid, NULL };
	KVS_TRY(cli_expect(run, 0, ac));
	KVS_CHECK(!ctl_exists(uid) && !data_exists(uid));
	free(run);
	free(text);
	return KVS_TEST_PASS;
}

/*
 * Three ranks; the second, then the third, killed -9 while the first lives.  A
 * one-shot stat attaches, so it reaps the dead entry: it says so, by pid (text:
 * a "reaped" line; --json: "reaped"), and the rank is gone from the table.
 * Before: the killed rank just vanished from the output.
 */
static kvs_test_rc test_stat_reaped(void)
{
	struct ranks r;
	struct run *run = calloc(1, sizeof(*run));
	char uid[80], want[256];
	json_t *j, *reaped;

	KVS_CHECK(run);
	kvs_test_unique_id(uid, sizeof(uid), "treap");
	KVS_TRY(ranks_start(&r, uid, 3, false));
	kill(r.pid[1], SIGKILL);
	KVS_CHECK_EQ(kvs_test_reap(r.pid[1], 10000), 128 + SIGKILL);

	const char *a_text[] = { "stat", uid, NULL };
	KVS_TRY(cli_expect(run, 0, a_text));
	snprintf(want, sizeof(want), "  reaped     1 rank: pid %d (entry ", (int)r.pid[1]);
	KVS_TRY(has(run->out, want));
	KVS_TRY(has(run->out, ", device 1) -- died; reaped"));
	snprintf(want, sizeof(want), " %d ", (int)r.pid[1]);
	KVS_CHECK(strstr(strstr(run->out, "per rank"), want) == NULL); /* not in the table */
	/* reaped once: the next stat has nobody to reap */
	KVS_TRY(cli_expect(run, 0, a_text));
	KVS_CHECK(strstr(run->out, "  reaped ") == NULL);

	kill(r.pid[2], SIGKILL);
	KVS_CHECK_EQ(kvs_test_reap(r.pid[2], 10000), 128 + SIGKILL);
	const char *a_json[] = { "stat", uid, "--json", NULL };
	KVS_TRY(cli_expect(run, 0, a_json));
	j = parse_json(run->out);
	KVS_CHECK(j != NULL);
	reaped = json_object_get(j, "reaped");
	KVS_CHECK_EQ(json_array_size(reaped), 1);
	KVS_CHECK_EQ(jint(json_array_get(reaped, 0), "pid"), r.pid[2]);
	KVS_CHECK_EQ(jint(json_array_get(reaped, 0), "device_id"), 2);
	KVS_CHECK_EQ(jint(j, "cpu_ranks_attached"), 1);
	json_decref(j);

	/* the survivor leaves cleanly: the cache goes (the dead ones were reaped) */
	close(r.go);
	KVS_CHECK_EQ(kvs_test_reap(r.pid[0], 20000), 0);
	KVS_CHECK(!ctl_exists(uid));
	free(run);
	return KVS_TEST_PASS;
}

/*
 * Two ranks that only dump the same NBLK shards, one after the other: the first
 * gathers them, the second finds them all (dump dedup).  stat counts no load
 * gets, so no hit ratio of reads, and shows the dedups apart: text (gets of
 * loads 0, served by the tier 0.0%, a dumps line, DEDUP per rank), --json
 * (cache/hits 0, cache/dump_gets 2 x NBLK) and --prometheus
 * (kvshare_hits_total 0, kvshare_dump_gets_total).  Before: HITS NBLK for the
 * second rank and "served by the tier 33.3%" with no load at all.
 */
static kvs_test_rc test_stat_dumps(void)
{
	struct ranks r;
	struct run *run = calloc(1, sizeof(*run));
	char uid[80], prom[160], want[256], *text = malloc(65536), *row;
	json_t *j, *ranks;
	int seen = 0;

	KVS_CHECK(run && text);
	kvs_test_unique_id(uid, sizeof(uid), "tsdump");
	KVS_TRY(ranks_start_as(&r, uid, 2, false, "dumper"));

	const char *a_json[] = { "stat", uid, "--json", NULL };
	KVS_TRY(cli_expect(run, 0, a_json));
	j = parse_json(run->out);
	KVS_CHECK(j != NULL);
	printf("  2 dumping ranks: queries %lld (hits %lld), dump_gets %lld, dumped %lld, dedup %lld\n",
	       jint(j, "cache/queries"), jint(j, "cache/hits"), jint(j, "cache/dump_gets"),
	       jint(j, "store/shards_dumped"), jint(j, "store/dump_dedup"));
	KVS_CHECK_EQ(jint(j, "cache/queries"), 0);
	KVS_CHECK_EQ(jint(j, "cache/hits"), 0);
	KVS_CHECK_EQ(jint(j, "cache/misses"), 0);
	KVS_CHECK_EQ(jint(j, "cache/dump_gets"), 2 * NBLK);
	KVS_CHECK_EQ(jint(j, "store/shards_dumped"), NBLK);
	KVS_CHECK_EQ(jint(j, "store/dump_dedup"), NBLK);
	KVS_CHECK_EQ(jint(j, "store/load_hits"), 0);
	ranks = json_object_get(j, "ranks");
	for (size_t i = 0; i < json_array_size(ranks); i++) {
		json_t *e = json_array_get(ranks, i);

		if (jint(e, "pid") != r.pid[1])
			continue;
		KVS_CHECK_EQ(jint(e, "cache/hits"), 0); /* was NBLK: its dedups */
		KVS_CHECK_EQ(jint(e, "cache/dump_gets"), NBLK);
		KVS_CHECK_EQ(jint(e, "store/dump_dedup"), NBLK);
		seen++;
	}
	KVS_CHECK_EQ(seen, 1);
	json_decref(j);

	const char *a_text[] = { "stat", uid, NULL };
	KVS_TRY(cli_expect(run, 0, a_text));
	KVS_TRY(has(run->out, "gets       0 (loads) = 0 hits"));
	KVS_TRY(has(run->out, "served by the tier 0.0%"));
	snprintf(want, sizeof(want), "dumps      %u gets (not in the loads' above): %u shards "
		 "gathered, %u dedup", 2 * NBLK, NBLK, NBLK);
	KVS_TRY(has(run->out, want));
	KVS_TRY(has(run->out, " DEDUP "));
	/* the second rank's row: HITS 0, DEDUP NBLK */
	snprintf(want, sizeof(want), " %d ", (int)r.pid[1]);
	row = strstr(strstr(run->out, "per rank"), want);
	KVS_CHECK(row != NULL);
	{
		unsigned pins;
		unsigned long long hits, joins, misses, dedup;

		row = strstr(row, "yes ");
		KVS_CHECK(row != NULL);
		KVS_CHECK_EQ(sscanf(row + 4, "%u %llu %llu %llu %llu", &pins, &hits, &joins, &misses,
				    &dedup), 5);
		KVS_CHECK_EQ(hits, 0);
		KVS_CHECK_EQ(dedup, NBLK);
	}

	snprintf(prom, sizeof(prom), "/tmp/kvs-%s.prom", uid);
	const char *a_prom[] = { "stat", uid, "--prometheus", prom, "--quiet", NULL };
	KVS_TRY(cli_expect(run, 0, a_prom));
	KVS_TRY(check_prom_file(prom, text, 65536));
#define PROM(...) do { snprintf(want, sizeof(want), __VA_ARGS__); KVS_TRY(has(text, want)); } while (0)
	PROM("kvshare_hits_total{unique_id=\"%s\"} 0\n", uid);
	PROM("kvshare_queries_total{unique_id=\"%s\"} 0\n", uid);
	PROM("kvshare_dump_gets_total{unique_id=\"%s\"} %u\n", uid, 2 * NBLK);
	PROM("kvshare_store_dump_dedup_total{unique_id=\"%s\"} %u\n", uid, NBLK);
	PROM("kvshare_rank_hits_total{unique_id=\"%s\",device=\"1\"} 0\n", uid);
	PROM("kvshare_rank_store_dump_dedup_total{unique_id=\"%s\",device=\"1\"} %u\n", uid, NBLK);
#undef PROM
	unlink(prom);
	KVS_TRY(ranks_stop(&r));
	free(run);
	free(text);
	return KVS_TEST_PASS;
}

/* The only rank leaves (cleanly: it would remove the cache were stat not
 * attached) while stat watches: stat, the last one attached, leaves the cache in
 * place, stale, instead of removing it. */
static kvs_test_rc test_stat_last_left(void)
{
	struct ranks r;
	struct run *run = calloc(1, sizeof(*run));
	char uid[80], prom[160], want[256], *text = malloc(65536);
	int ofd, efd;

	KVS_CHECK(run && text);
	kvs_test_unique_id(uid, sizeof(uid), "tslast");
	snprintf(prom, sizeof(prom), "/tmp/kvs-%s.prom", uid);
	/* started before any rank: it waits, exporting kvshare_up 0 */
	const char *a[] = { "stat", uid, "--watch", "0.1", "--prometheus", prom, "--quiet", NULL };
	pid_t pid = cli_spawn(a, &ofd, &efd);
	KVS_CHECK(pid > 0);
	snprintf(want, sizeof(want), "kvshare_up{unique_id=\"%s\"} 0\n", uid);
	if (!prom_wait(prom, want, text, 65536))
		KVS_FAILF("before any rank: no %s; the file:\n%s", want, text);
	snprintf(want, sizeof(want), "kvshare_cache_state{unique_id=\"%s\",state=\"absent\"} 1\n", uid);
	KVS_TRY(has(text, want));
	for (int round = 0; round < 2; round++) {
		KVS_TRY(ranks_start(&r, uid, 1, false));
		snprintf(want, sizeof(want), "kvshare_up{unique_id=\"%s\"} 1\n", uid);
		if (!prom_wait(prom, want, text, 65536))
			KVS_FAILF("round %d: the exporter did not attach; the file:\n%s", round, text);
		/* the only rank closes cleanly while stat watches: the cache goes */
		KVS_TRY(ranks_stop(&r));
		KVS_CHECK(!ctl_exists(uid) && !data_exists(uid));
		snprintf(want, sizeof(want), "kvshare_up{unique_id=\"%s\"} 0\n", uid);
		if (!prom_wait(prom, want, text, 65536))
			KVS_FAILF("round %d: the exporter did not let go; the file:\n%s", round, text);
	}
	KVS_TRY(cli_stop(run, pid, ofd, efd, 0));
	KVS_TRY(has(run->err, "no live cache; waiting for one"));
	KVS_TRY(has(run->err, "the cache was removed (its last rank left); waiting for the next one"));
	KVS_CHECK(!ctl_exists(uid));
	unlink(prom);
	free(run);
	free(text);
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "stat_live", test_stat_live },
	{ "stat_joins", test_stat_joins },
	{ "stat_dumps", test_stat_dumps },
	{ "stat_dead_ranks", test_stat_dead_ranks },
	{ "stat_reaped", test_stat_reaped },
	{ "stat_stale", test_stat_stale },
	{ "stat_last_left", test_stat_last_left },
};

static const struct kvs_test_child children[] = {
	{ "rank", rank_child },
	{ "dumper", dumper_child },
};

int main(int argc, char **argv)
{
	return tools_admin_main(argc, argv, cases, KVS_ARRAY_LEN(cases), children,
				KVS_ARRAY_LEN(children));
}
