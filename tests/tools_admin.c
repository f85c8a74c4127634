/*
 * tests/tools_admin.c — `kvshare stat`, `kvshare ls` and `kvshare clean` end to
 * end, as an operator runs them: the CLI binary (its path is this program's first
 * argument, from CMake) is fork+exec'd and judged by its exit code, stdout
 * (parsed with jansson for --json) and stderr, against caches held by real rank
 * processes (exec'd copies of this program loading through their stores).
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
 *   ls_clean         a live and two stale caches: ls (both forms) states them,
 *                    --dry-run removes nothing, clean of the live one says why and
 *                    keeps it, clean of a stale one removes it and its data
 *   clean_all        a bare `clean` removes every stale cache and no live one, in a
 *                    private /dev/shm (mount namespace: the machine's other caches
 *                    are never touched); skipped without CAP_SYS_ADMIN
 *   clean_dead_creator  a creator killed -9 in its pre-fault (its data file made,
 *                    on a hugetlbfs of the test's own where possible, never
 *                    recorded): ls counts it, clean ID removes it with the
 *                    control file and the pages come back (before: "removed",
 *                    exit 0, and the file and its 16 pages left)
 *   clean_dirty      a rank killed -9 right after its dump_wait=cached dumps
 *                    returned (their writes held by a slow backend) leaves a stale
 *                    cache holding 8 DIRTY slots: ls (both forms) and stat (text,
 *                    --json, --prometheus) count them; clean ID and clean
 *                    --dry-run ID refuse it in one line naming the count and
 *                    `kvshare clean --discard-dirty ID` (exit 1, nothing
 *                    removed); with --discard-dirty --dry-run it would go, and
 *                    clean --discard-dirty ID removes it, naming the 8 dropped
 *                    (before: removed like any stale cache, the blocks lost)
 *   clean_all_dirty  the same cache beside a live and two stale ones, in a private
 *                    /dev/shm: a bare `clean` (and --dry-run) removes the stale
 *                    ones and skips the dirty one as it does the live one (a
 *                    line naming the count and the way out, exit 0); a bare
 *                    `clean --discard-dirty` then removes it, the live one kept
 *   not_a_cache      a FIFO named like a cache's control file: ls, clean (also
 *                    --dry-run) and stat each return at once, name it as no
 *                    cache and leave it (before: each hung in a blocking open)
 *   bad_input        usage errors (2) and failures (1): one line on stderr each;
 *                    --help of each subcommand
 */
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <mntent.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>

#include "hugetlb_util.h"
#include "numa/numa.h"
#include "store_util.h"

#define SHARD 4096u
#define NBLK 8u

static const char *cli; /* the kvshare binary */

/* ---- running the CLI ---- */

struct run {
	int code;       /* exit status, 128 + signal, or -ETIMEDOUT */
	char out[8 << 20]; /* ls of a busy node's /dev/shm is long */
	char err[8192];
};

/* Drain fd into buf (NUL-terminated, truncated). */
static void drain(int fd, char *buf, size_t cap, size_t *len)
{
	char scratch[4096];
	ssize_t n;

	for (;;) {
		if (*len + 1 < cap)
			n = read(fd, buf + *len, cap - 1 - *len);
		else
			n = read(fd, scratch, sizeof(scratch));
		if (n <= 0)
			break;
		if (*len + 1 < cap)
			*len += (size_t)n;
	}
	buf[*len] = '\0';
}

static pid_t cli_spawn(const char *const args[], int *out_fd, int *err_fd)
{
	int o[2], e[2];
	char *argv[32];
	int n = 0;
	pid_t pid;

	argv[n++] = (char *)cli;
	for (int i = 0; args[i] && n < 31; i++)
		argv[n++] = (char *)args[i];
	argv[n] = NULL;
	if (pipe2(o, O_CLOEXEC) || pipe2(e, O_CLOEXEC))
		return -1;
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		dup2(o[1], 1);
		dup2(e[1], 2);
		execv(cli, argv);
		_exit(127);
	}
	close(o[1]);
	close(e[1]);
	*out_fd = o[0];
	*err_fd = e[0];
	return pid;
}

/* Run the CLI with args to completion (10 s at most). */
/* End a spawned `stat --watch`: SIGTERM, the rest of its output into run
 * (appended to its first len bytes of stdout), and a clean exit (0). */
static kvs_test_rc cli_stop(struct run *run, pid_t pid, int ofd, int efd, size_t len)
{
	size_t el = 0;

	kill(pid, SIGTERM);
	drain(ofd, run->out, sizeof(run->out), &len);
	drain(efd, run->err, sizeof(run->err), &el);
	close(ofd);
	close(efd);
	KVS_CHECK_EQ(kvs_test_reap(pid, 10000), 0);
	return KVS_TEST_PASS;
}

static kvs_test_rc cli_run(struct run *r, const char *const args[])
{
	int ofd, efd;
	size_t ol = 0, el = 0;
	struct pollfd p[2];
	pid_t pid = cli_spawn(args, &ofd, &efd);

	KVS_CHECK(pid > 0);
	r->out[0] = r->err[0] = '\0';
	p[0] = (struct pollfd){ .fd = ofd, .events = POLLIN };
	p[1] = (struct pollfd){ .fd = efd, .events = POLLIN };
	uint64_t deadline = kvs_deadline_after(10 * ST_SEC);
	while ((p[0].fd >= 0 || p[1].fd >= 0) && kvs_now_ns() < deadline) {
		if (poll(p, 2, 100) <= 0)
			continue;
		for (int i = 0; i < 2; i++) {
			char *buf = i ? r->err : r->out;
			size_t cap = i ? sizeof(r->err) : sizeof(r->out), *len = i ? &el : &ol;
			ssize_t n;

			if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP)))
				continue;
			if (*len + 1 >= cap) { /* full: keep draining (the CLI must not get EPIPE) */
				char scratch[4096];

				n = read(p[i].fd, scratch, sizeof(scratch));
				if (n > 0)
					continue;
			} else {
				n = read(p[i].fd, buf + *len, cap - 1 - *len);
			}
			if (n > 0) {
				*len += (size_t)n;
				buf[*len] = '\0';
			} else {
				close(p[i].fd);
				p[i].fd = -1;
			}
		}
	}
	for (int i = 0; i < 2; i++)
		if (p[i].fd >= 0)
			close(p[i].fd);
	r->code = kvs_test_reap(pid, 10000);
	return KVS_TEST_PASS;
}

/* Run and expect exit code `code`; print what it said on a mismatch. */
static kvs_test_rc cli_expect(struct run *r, int code, const char *const args[])
{
	KVS_TRY(cli_run(r, args));
	if (r->code != code)
		KVS_FAILF("kvshare %s ...: exit %d, want %d\n--- stdout\n%s--- stderr\n%s", args[0], r->code,
			  code, r->out, r->err);
	return KVS_TEST_PASS;
}

/* stderr is exactly one line containing what. */
static kvs_test_rc one_line_err(const struct run *r, const char *what)
{
	const char *nl = strchr(r->err, '\n');

	if (!nl || nl[1] != '\0' || !strstr(r->err, what))
		KVS_FAILF("stderr is not one line naming '%s':\n%s", what, r->err);
	return KVS_TEST_PASS;
}

static json_t *parse_json(const char *s)
{
	json_error_t e;
	json_t *j = json_loads(s, 0, &e);

	if (!j)
		fprintf(stderr, "JSON error line %d: %s\n%s\n", e.line, e.text, s);
	return j;
}

/* Integer at a '/'-separated path of object keys. */
static long long jint(json_t *j, const char *path)
{
	char buf[256], *save, *k;

	snprintf(buf, sizeof(buf), "%s", path);
	for (k = strtok_r(buf, "/", &save); k && j; k = strtok_r(NULL, "/", &save))
		j = json_object_get(j, k);
	if (!j || !json_is_integer(j)) {
		fprintf(stderr, "JSON: no integer at %s\n", path);
		return -999999;
	}
	return (long long)json_integer_value(j);
}

static int ctl_exists(const char *uid)
{
	char path[256];

	snprintf(path, sizeof(path), "/dev/shm/kvshare.%s.ctl", uid);
	return access(path, F_OK) == 0;
}

static int data_exists(const char *uid)
{
	char path[256];

	snprintf(path, sizeof(path), "/dev/shm/kvshare.%s.data.0", uid);
	return access(path, F_OK) == 0;
}

/* ---- rank processes ---- */

static void rank_cfg(struct kvs_store_config *cfg, const char *uid, int device, bool persist,
		     uint64_t latency_ns)
{
	st_cfg(cfg, uid, device, SHARD, 64, 1);
	st_latency(cfg, latency_ns);
	cfg->cache.numa = KVS_NUMA_OFF;
	cfg->cache.local_rank_size = 2;
	if (persist)
		cfg->cache.flags |= KVS_CACHE_PERSIST;
}

/* exec'd: --child rank <uid> <device> <persist> <ready fd> <go fd> [<load fd>
 * <latency ns>]: open a rank store, (with a load fd: say "o" on ready fd and
 * wait for the load fd's EOF, so that ranks load at once), load blocks
 * 0..NBLK-1 (--child dumper: dump them), say "x" on ready fd, wait for go fd's
 * EOF (or a kill), close the store. */
static kvs_test_rc rank_body(int argc, char **argv, bool dump)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task t;
	char ch;

	if (argc != 5 && argc != 7)
		KVS_FAILF("usage: --child rank <uid> <device> <persist> <ready fd> <go fd> "
			  "[<load fd> <latency ns>]");
	/* Never outlive the test (a failed check leaves no rank behind); the go
	 * pipe's EOF is the normal way out. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	rank_cfg(&cfg, argv[0], atoi(argv[1]), atoi(argv[2]) != 0,
		 argc == 7 ? strtoull(argv[6], NULL, 10) : 20000);
	KVS_TRY(st_open(&cfg, &s));
	if (argc == 7) {
		KVS_CHECK_EQ(write(atoi(argv[3]), "o", 1), 1);
		while (read(atoi(argv[5]), &ch, 1) > 0)
			;
	}
	KVS_TRY(st_task_whole(&t, NBLK, 1, SHARD));
	for (uint32_t i = 0; i < NBLK; i++) {
		struct kvs_block_id b = st_block(12, i);
		st_task_set(&t, i, &b, 0);
	}
	if (dump)
		KVS_TRY(st_dump(s, &t, 20000));
	else
		KVS_TRY(st_load(s, &t, 20000, 0));
	KVS_CHECK_EQ(write(atoi(argv[3]), "x", 1), 1);
	while (read(atoi(argv[4]), &ch, 1) > 0)
		;
	kvs_store_close(s);
	st_task_free(&t);
	return KVS_TEST_PASS;
}

static kvs_test_rc rank_child(int argc, char **argv)
{
	return rank_body(argc, argv, false);
}

/* exec'd: --child dirtier <uid> <ready fd>: open a rank store (device 0) whose
 * backend holds every write a minute, dump blocks 0..NBLK-1 with
 * dump_wait=cached (done once they are in the cache: DIRTY, their writes in
 * flight), say "x" on ready fd and wait to be killed -9. */
static kvs_test_rc dirtier_child(int argc, char **argv)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task t;

	if (argc != 2)
		KVS_FAILF("usage: --child dirtier <uid> <ready fd>");
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	rank_cfg(&cfg, argv[0], 0, false, 60 * ST_SEC);
	cfg.dump_wait = KVS_DUMP_WAIT_CACHED;
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(st_task_whole(&t, NBLK, 1, SHARD));
	for (uint32_t i = 0; i < NBLK; i++) {
		struct kvs_block_id b = st_block(13, i);
		st_task_set(&t, i, &b, 0);
	}
	KVS_TRY(st_dump(s, &t, 20000));
	KVS_CHECK_EQ(write(atoi(argv[1]), "x", 1), 1);
	pause(); /* until killed */
	KVS_FAILF("the dirtier was not killed");
}

/* While the dirtier lives: stat --json of its cache counts the DIRTY slots
 * apart from the READY and the empty ones. */
static kvs_test_rc dirty_live_stat(struct run *run, const char *uid)
{
	const char *a[] = { "stat", uid, "--json", NULL };
	json_t *j;

	KVS_TRY(cli_expect(run, 0, a));
	j = parse_json(run->out);
	KVS_CHECK(j != NULL);
	KVS_CHECK_EQ(jint(j, "slots/dirty"), NBLK);
	KVS_CHECK_EQ(jint(j, "slots/ready"), 0);
	KVS_CHECK_EQ(jint(j, "slots/empty"), 64 - NBLK); /* was 64: DIRTY ones counted empty */
	json_decref(j);
	return KVS_TEST_PASS;
}

/* A stale cache uid holding NBLK DIRTY slots: its only rank's cached dumps
 * returned, then it was killed -9 with their writes in flight.  With run, the
 * live cache's stat is checked first (dirty_live_stat). */
static kvs_test_rc dirty_cache(char *uid, size_t len, struct run *run)
{
	char fdstr[16], ch;
	int fds[2];
	pid_t pid;

	kvs_test_unique_id(uid, len, "tdirty");
	KVS_CHECK_OK(pipe(fds));
	fcntl(fds[0], F_SETFD, FD_CLOEXEC);
	snprintf(fdstr, sizeof(fdstr), "%d", fds[1]);
	const char *av[] = { uid, fdstr, NULL };
	pid = kvs_test_spawn("dirtier", av);
	KVS_CHECK(pid > 0);
	close(fds[1]);
	if (read(fds[0], &ch, 1) != 1) { /* it failed (said why): no "x" */
		close(fds[0]);
		KVS_CHECK_EQ(kvs_test_reap(pid, 10000), 0);
		KVS_FAILF("the dirtier ended before its dumps returned");
	}
	close(fds[0]);
	kvs_test_rc rc = run ? dirty_live_stat(run, uid) : KVS_TEST_PASS;
	kill(pid, SIGKILL);
	KVS_CHECK_EQ(kvs_test_reap(pid, 10000), 128 + SIGKILL);
	KVS_CHECK(ctl_exists(uid) && data_exists(uid));
	return rc;
}

static kvs_test_rc dumper_child(int argc, char **argv)
{
	return rank_body(argc, argv, true);
}

struct ranks {
	pid_t pid[4];
	int n;
	int go; /* write end: closing it lets the ranks leave */
};

/* Start n ranks (devices 0..n-1) on uid, each after the previous one loaded
 * (so the counts are deterministic: one reads, the other hits), and wait until
 * all are ready.  child: "rank" (loads) or "dumper" (dumps). */
static kvs_test_rc ranks_start_as(struct ranks *r, const char *uid, int n, bool persist,
				  const char *child)
{
	int ready[2], go[2];
	char dev[8], rfd[8], gfd[8], ch;

	KVS_CHECK_OK(pipe(ready));
	KVS_CHECK_OK(pipe(go));
	fcntl(ready[0], F_SETFD, FD_CLOEXEC);
	fcntl(go[1], F_SETFD, FD_CLOEXEC);
	snprintf(rfd, sizeof(rfd), "%d", ready[1]);
	snprintf(gfd, sizeof(gfd), "%d", go[0]);
	r->n = 0;
	for (int i = 0; i < n; i++) {
		snprintf(dev, sizeof(dev), "%d", i);
		const char *av[] = { uid, dev, persist ? "1" : "0", rfd, gfd, NULL };
		r->pid[r->n] = kvs_test_spawn(child, av);
		KVS_CHECK(r->pid[r->n] > 0);
		r->n++;
		KVS_CHECK_EQ(read(ready[0], &ch, 1), 1);
	}
	close(ready[0]);
	close(ready[1]);
	close(go[0]);
	r->go = go[1];
	return KVS_TEST_PASS;
}

static kvs_test_rc ranks_start(struct ranks *r, const char *uid, int n, bool persist)
{
	return ranks_start_as(r, uid, n, persist, "rank");
}

/* Start n ranks (devices 0..n-1) on uid that load together: each opens, then
 * all are let go at once, so their gets of each shard meet one read in flight
 * (reads held latency_ns). */
static kvs_test_rc ranks_start_together(struct ranks *r, const char *uid, int n,
					uint64_t latency_ns)
{
	int ready[2], go[2], load[2];
	char dev[8], rfd[8], gfd[8], lfd[8], lat[24], ch;

	KVS_CHECK_OK(pipe(ready));
	KVS_CHECK_OK(pipe(go));
	KVS_CHECK_OK(pipe(load));
	fcntl(ready[0], F_SETFD, FD_CLOEXEC);
	fcntl(go[1], F_SETFD, FD_CLOEXEC);
	fcntl(load[1], F_SETFD, FD_CLOEXEC);
	snprintf(rfd, sizeof(rfd), "%d", ready[1]);
	snprintf(gfd, sizeof(gfd), "%d", go[0]);
	snprintf(lfd, sizeof(lfd), "%d", load[0]);
	snprintf(lat, sizeof(lat), "%llu", (unsigned long long)latency_ns);
	r->n = 0;
	for (int i = 0; i < n; i++) {
		snprintf(dev, sizeof(dev), "%d", i);
		const char *av[] = { uid, dev, "0", rfd, gfd, lfd, lat, NULL };
		r->pid[r->n] = kvs_test_spawn("rank", av);
		KVS_CHECK(r->pid[r->n] > 0);
		r->n++;
		KVS_CHECK_EQ(read(ready[0], &ch, 1), 1); /* "o": opened */
	}
	close(load[0]);
	close(load[1]); /* EOF: everyone loads now */
	for (int i = 0; i < n; i++)
		KVS_CHECK_EQ(read(ready[0], &ch, 1), 1); /* "x": loaded */
	close(ready[0]);
	close(ready[1]);
	close(go[0]);
	r->go = go[1];
	return KVS_TEST_PASS;
}

/* Let the ranks close their stores and exit 0. */
static kvs_test_rc ranks_stop(struct ranks *r)
{
	close(r->go);
	for (int i = 0; i < r->n; i++)
		KVS_CHECK_EQ(kvs_test_reap(r->pid[i], 20000), 0);
	return KVS_TEST_PASS;
}

static kvs_test_rc ranks_kill(struct ranks *r)
{
	for (int i = 0; i < r->n; i++) {
		kill(r->pid[i], SIGKILL);
		KVS_CHECK_EQ(kvs_test_reap(r->pid[i], 10000), 128 + SIGKILL);
	}
	close(r->go);
	return KVS_TEST_PASS;
}

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

/* Every sample line is `name{labels} value` with a TYPE line for its family
 * before it; returns the file's text in buf. */
static kvs_test_rc check_prom_file(const char *path, char *buf, size_t cap)
{
	char tmp[300], *save, *line, *copy, family[128] = "";
	FILE *f = fopen(path, "re");
	size_t n;

	KVS_CHECK(f != NULL);
	n = fread(buf, 1, cap - 1, f);
	buf[n] = '\0';
	fclose(f);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	KVS_CHECK(access(tmp, F_OK) != 0); /* renamed, not left behind */
	copy = strdup(buf);
	KVS_CHECK(copy != NULL);
	for (line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char name[128], *brace;
		double v;

		if (strncmp(line, "# TYPE ", 7) == 0) {
			KVS_CHECK(sscanf(line + 7, "%127s", family) == 1);
			KVS_CHECK(strncmp(family, "kvshare_", 8) == 0);
			continue;
		}
		if (strncmp(line, "# HELP ", 7) == 0)
			continue;
		brace = strchr(line, '{');
		if (!brace || brace - line >= (long)sizeof(name))
			KVS_FAILF("bad sample line: %s", line);
		memcpy(name, line, (size_t)(brace - line));
		name[brace - line] = '\0';
		if (strncmp(name, family, strlen(family)) != 0)
			KVS_FAILF("sample %s outside its family %s", name, family);
		if (!strstr(line, "unique_id=\"") || !strchr(brace, '}') ||
		    sscanf(strchr(brace, '}') + 1, " %lf", &v) != 1)
			KVS_FAILF("bad sample line: %s", line);
	}
	free(copy);
	return KVS_TEST_PASS;
}

static kvs_test_rc has(const char *text, const char *what)
{
	if (!strstr(text, what))
		KVS_FAILF("'%s' not found in:\n%s", what, text);
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

/* ---- ls and clean ---- */

static json_t *ls_find(json_t *ls, const char *uid)
{
	json_t *arr = json_object_get(ls, "caches");

	for (size_t i = 0; i < json_array_size(arr); i++) {
		json_t *e = json_array_get(arr, i);

		if (strcmp(json_string_value(json_object_get(e, "unique_id")), uid) == 0)
			return e;
	}
	return NULL;
}

/* A line of `kvshare ls` naming uid has state `state`. */
static kvs_test_rc ls_line(const char *out, const char *uid, const char *state)
{
	char want[160];

	snprintf(want, sizeof(want), "\n%-40s %-6s ", uid, state);
	return has(out, want);
}

/* A live cache (held by this process, device 0), a stale one (its rank killed),
 * a stale persistent one (cleanly closed). */
static kvs_test_rc caches_make(char *live, char *stale, char *pers, struct kvs_store **held)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct ranks r;

	kvs_test_unique_id(live, 80, "tlive");
	kvs_test_unique_id(stale, 80, "tstale");
	kvs_test_unique_id(pers, 80, "tpers");
	rank_cfg(&cfg, live, 0, false, 20000);
	KVS_TRY(st_open(&cfg, held));
	KVS_TRY(ranks_start(&r, stale, 1, false));
	KVS_TRY(ranks_kill(&r));
	rank_cfg(&cfg, pers, 0, true, 20000);
	KVS_TRY(st_open(&cfg, &s));
	kvs_store_close(s);
	KVS_CHECK(ctl_exists(live) && ctl_exists(stale) && ctl_exists(pers));
	return KVS_TEST_PASS;
}

static kvs_test_rc test_ls_clean(void)
{
	struct run *run = calloc(1, sizeof(*run));
	struct kvs_store *held = NULL;
	char live[80], stale[80], pers[80], want[256];
	json_t *j, *e;

	KVS_CHECK(run);
	KVS_TRY(caches_make(live, stale, pers, &held));

	const char *a_lsj[] = { "ls", "--json", NULL };
	KVS_TRY(cli_expect(run, 0, a_lsj));
	j = parse_json(run->out);
	KVS_CHECK(j != NULL);
	e = ls_find(j, live);
	KVS_CHECK(e != NULL);
	KVS_CHECK(strcmp(json_string_value(json_object_get(e, "state")), "live") == 0);
	KVS_CHECK(strcmp(json_string_value(json_object_get(e, "header")), "ready") == 0);
	KVS_CHECK_EQ(jint(e, "ranks_live"), 1);
	KVS_CHECK_EQ(jint(e, "gpu_ranks_live"), 0); /* this process copies with the host engine */
	KVS_CHECK_EQ(jint(e, "cpu_ranks_live"), 1);
	KVS_CHECK_EQ(json_integer_value(json_array_get(json_object_get(e, "pids"), 0)), getpid());
	KVS_CHECK_EQ(jint(e, "owner_uid"), geteuid());
	KVS_CHECK_EQ(jint(e, "slot_count"), 64);
	KVS_CHECK(jint(e, "size_bytes") > 64 * SHARD);
	KVS_CHECK(strcmp(json_string_value(json_object_get(e, "backing")), "shm") == 0);
	e = ls_find(j, stale);
	KVS_CHECK(e != NULL);
	KVS_CHECK(strcmp(json_string_value(json_object_get(e, "state")), "stale") == 0);
	KVS_CHECK_EQ(jint(e, "ranks_live"), 0);
	KVS_CHECK(json_is_false(json_object_get(e, "persist")));
	e = ls_find(j, pers);
	KVS_CHECK(e != NULL);
	KVS_CHECK(strcmp(json_string_value(json_object_get(e, "state")), "stale") == 0);
	KVS_CHECK(json_is_true(json_object_get(e, "persist")));
	json_decref(j);

	const char *a_ls[] = { "ls", NULL };
	KVS_TRY(cli_expect(run, 0, a_ls));
	KVS_TRY(ls_line(run->out, live, "live"));
	KVS_TRY(has(run->out, " 1 (0 gpu, 1 cpu) ")); /* was "1 (1 gpu)": a CPU-only rank */
	KVS_TRY(ls_line(run->out, stale, "stale"));
	KVS_TRY(ls_line(run->out, pers, "stale"));

	/* --dry-run removes nothing, named or not. */
	const char *a_dry1[] = { "clean", "--dry-run", stale, NULL };
	KVS_TRY(cli_expect(run, 0, a_dry1));
	snprintf(want, sizeof(want), "would remove %s (stale", stale);
	KVS_TRY(has(run->out, want));
	const char *a_dry[] = { "clean", "--dry-run", NULL };
	KVS_TRY(cli_expect(run, 0, a_dry));
	KVS_TRY(has(run->out, want));
	snprintf(want, sizeof(want), "skipped %s: live: 1 rank attached (pids %d)", live, (int)getpid());
	KVS_TRY(has(run->out, want));
	KVS_CHECK(ctl_exists(live) && ctl_exists(stale) && ctl_exists(pers));
	KVS_CHECK(data_exists(stale));

	/* The live cache: refused, with the reason; untouched. */
	const char *a_live[] = { "clean", live, NULL };
	KVS_TRY(cli_expect(run, 1, a_live));
	snprintf(want, sizeof(want), "live: 1 rank attached (pids %d): not removed", (int)getpid());
	KVS_TRY(one_line_err(run, want));
	KVS_CHECK(ctl_exists(live) && data_exists(live));

	/* The stale ones: removed, data too. */
	const char *a_stale[] = { "clean", stale, NULL };
	KVS_TRY(cli_expect(run, 0, a_stale));
	snprintf(want, sizeof(want), "removed %s (stale", stale);
	KVS_TRY(has(run->out, want));
	KVS_CHECK(!ctl_exists(stale) && !data_exists(stale));
	const char *a_pers[] = { "clean", pers, NULL };
	KVS_TRY(cli_expect(run, 0, a_pers));
	KVS_CHECK(!ctl_exists(pers) && !data_exists(pers));
	KVS_TRY(cli_expect(run, 1, a_stale)); /* gone now */
	KVS_TRY(one_line_err(run, "no cache"));

	/* The live one still works. */
	KVS_CHECK(ctl_exists(live) && data_exists(live));
	KVS_CHECK_OK(kvs_cache_check(kvs_store_cache(held)));
	kvs_store_close(held);
	KVS_CHECK(!ctl_exists(live));
	free(run);
	return KVS_TEST_PASS;
}

/* In a child of the test (it alone changes its mounts): a private mount
 * namespace with its own /dev/shm, so that the machine's other caches are never
 * touched.  Skips without CAP_SYS_ADMIN. */
static kvs_test_rc private_shm(void)
{
	if (unshare(CLONE_NEWNS))
		KVS_SKIP("unshare(CLONE_NEWNS): %s (needs CAP_SYS_ADMIN)", strerror(errno));
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
	    mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777"))
		KVS_SKIP("a private tmpfs on /dev/shm: %s", strerror(errno));
	return KVS_TEST_PASS;
}

/* Run fn in a forked child (one that may call private_shm): its result. */
static kvs_test_rc in_child(kvs_test_rc (*fn)(void *))
{
	pid_t pid = kvs_test_fork(fn, NULL);
	int rc;

	KVS_CHECK(pid > 0);
	rc = kvs_test_reap(pid, 60000);
	if (rc == KVS_TEST_SKIP.code)
		return KVS_TEST_SKIP;
	KVS_CHECK_EQ(rc, 0);
	return KVS_TEST_PASS;
}

/* In a private mount namespace with its own /dev/shm: a bare `clean` removes
 * every stale cache and keeps the live one; `ls` then lists only that one. */
static kvs_test_rc clean_all_child(void *arg)
{
	struct run *run = calloc(1, sizeof(*run));
	struct kvs_store *held = NULL;
	char live[80], stale[80], pers[80];
	json_t *j;

	(void)arg;
	KVS_CHECK(run);
	KVS_TRY(private_shm());
	KVS_TRY(caches_make(live, stale, pers, &held));
	const char *a[] = { "clean", NULL };
	KVS_TRY(cli_expect(run, 0, a));
	KVS_TRY(has(run->out, "removed 2 stale caches"));
	KVS_TRY(has(run->out, "1 live left alone"));
	KVS_CHECK(ctl_exists(live) && data_exists(live));
	KVS_CHECK(!ctl_exists(stale) && !data_exists(stale) && !ctl_exists(pers) && !data_exists(pers));
	const char *als[] = { "ls", "--json", NULL };
	KVS_TRY(cli_expect(run, 0, als));
	j = parse_json(run->out);
	KVS_CHECK(j != NULL);
	KVS_CHECK_EQ(json_array_size(json_object_get(j, "caches")), 1);
	KVS_CHECK(ls_find(j, live) != NULL);
	json_decref(j);
	KVS_CHECK_OK(kvs_cache_check(kvs_store_cache(held)));
	kvs_store_close(held);
	KVS_TRY(cli_expect(run, 0, als));
	KVS_TRY(has(run->out, "\"caches\": []"));
	free(run);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_clean_all(void)
{
	return in_child(clean_all_child);
}

/* ---- a creator killed in its pre-fault ---- */

#define PF_PAGES 16 /* the creator's data segment: 16 pages of 2 MiB */


/* exec'd: --child prefaulter <uid> <fd> <huge>: create a cache of PF_PAGES * 2
 * MiB (on hugetlbfs when huge is 1: the mount is found when the program
 * starts, hence exec), stopped in its pre-fault. */
static kvs_test_rc prefaulter_child(int argc, char **argv)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;

	if (argc != 3)
		KVS_FAILF("usage: --child prefaulter <uid> <fd> <huge>");
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	kvs_cache_config_init(&cfg);
	snprintf(cfg.unique_id, sizeof(cfg.unique_id), "%s", argv[0]);
	cfg.slot_bytes = 65536;
	cfg.slot_count = PF_PAGES * 32;
	cfg.numa = KVS_NUMA_OFF;
	cfg.hugetlb = atoi(argv[2]) ? KVS_HUGETLB_REQUIRED : KVS_HUGETLB_OFF;
	cfg.log = st_log;
	kvs_test_park_fd = atoi(argv[1]);
	kvs_numa_test_prefault_hook = kvs_test_park_hook;
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_FAILF("the creator was not stopped in its pre-fault");
}

/* Pages of the hugetlbfs at mnt in use (reserved or allocated): its size= limit
 * less its free blocks. */
static long long huge_used(const char *mnt)
{
	struct statfs sfs;

	return statfs(mnt, &sfs) ? -1 : (long long)(sfs.f_blocks - sfs.f_bfree);
}

/* In a private mount namespace: a tmpfs /dev/shm and (where the kernel and the
 * pool allow) a hugetlbfs of our own, size=64M: a creator killed -9 in its
 * pre-fault leaves a named control file and a data file its header never
 * recorded, PF_PAGES pages held.  ls counts that file in the cache's size;
 * clean --dry-run removes nothing; clean ID removes both files and gives the
 * pages back.  Before, clean said "removed" and exit 0 and left the data file
 * with its pages. */
static kvs_test_rc dead_creator_body(struct run *run, const char *mnt)
{
	char uid[80], data[256], fdstr[16], want[200];
	bool huge = mnt != NULL;
	int fds[2];
	json_t *j, *e;
	pid_t pid;

	printf("  the creator's data segment on %s\n", huge ? mnt : "/dev/shm (no hugetlbfs here)");
	kvs_test_unique_id(uid, sizeof(uid), "tprefault");
	snprintf(data, sizeof(data), "%s/kvshare.%s.data.0", huge ? mnt : "/dev/shm", uid);
	KVS_CHECK_OK(pipe(fds));
	fcntl(fds[0], F_SETFD, FD_CLOEXEC);
	snprintf(fdstr, sizeof(fdstr), "%d", fds[1]);
	const char *av[] = { uid, fdstr, huge ? "1" : "0", NULL };
	pid = kvs_test_spawn("prefaulter", av);
	KVS_TRY(kvs_test_kill_parked(pid, fds[0], fds[1])); /* in its pre-fault */
	KVS_CHECK(ctl_exists(uid) && access(data, F_OK) == 0);
	if (huge)
		KVS_CHECK_EQ(huge_used(mnt), PF_PAGES);

	const char *a_lsj[] = { "ls", "--json", NULL };
	KVS_TRY(cli_expect(run, 0, a_lsj));
	j = parse_json(run->out);
	KVS_CHECK(j != NULL);
	e = ls_find(j, uid);
	KVS_CHECK(e != NULL);
	KVS_CHECK(strcmp(json_string_value(json_object_get(e, "state")), "stale") == 0);
	KVS_CHECK(strcmp(json_string_value(json_object_get(e, "header")), "creating") == 0);
	KVS_CHECK_EQ(jint(e, "data_bytes"), PF_PAGES << 21); /* found by its name */
	json_decref(j);
	const char *a_dry[] = { "clean", "--dry-run", uid, NULL };
	KVS_TRY(cli_expect(run, 0, a_dry));
	snprintf(want, sizeof(want), "would remove %s (stale, ", uid);
	KVS_TRY(has(run->out, want));
	KVS_TRY(has(run->out, "creator died during creation"));
	KVS_CHECK(ctl_exists(uid) && access(data, F_OK) == 0);

	const char *a_clean[] = { "clean", uid, NULL };
	KVS_TRY(cli_expect(run, 0, a_clean));
	snprintf(want, sizeof(want), "removed %s (stale, ", uid);
	if (access(data, F_OK) == 0)
		KVS_FAILF("clean said:\n%s%sand left %s", run->out, run->err, data);
	KVS_CHECK(!ctl_exists(uid));
	KVS_TRY(has(run->out, want));
	KVS_TRY(has(run->err, "removed 1 data file its header did not record"));
	if (huge)
		KVS_CHECK_EQ(huge_used(mnt), 0); /* the pages are back */
	return KVS_TEST_PASS;
}

/* Detach every hugetlbfs mount of this (private) mount namespace. */
static kvs_test_rc detach_hugetlbfs(void)
{
	FILE *m = setmntent("/proc/self/mounts", "re");
	struct mntent *e;
	char dirs[8][PATH_MAX];
	int n = 0;

	KVS_CHECK(m != NULL);
	while ((e = getmntent(m)) && n < 8)
		if (strcmp(e->mnt_type, "hugetlbfs") == 0)
			snprintf(dirs[n++], sizeof(dirs[0]), "%s", e->mnt_dir);
	endmntent(m);
	for (int i = 0; i < n; i++)
		if (umount2(dirs[i], MNT_DETACH))
			KVS_FAILF("umount2(%s) in a private namespace: %s", dirs[i], strerror(errno));
	return KVS_TEST_PASS;
}

static kvs_test_rc dead_creator_child(void *arg)
{
	struct run *run = calloc(1, sizeof(*run));
	char mnt[] = "/tmp/kvs-hugetlbfs.XXXXXX";
	bool huge = false;
	kvs_test_rc rc;

	(void)arg;
	KVS_CHECK(run);
	KVS_TRY(private_shm());
	/* ours the only hugetlbfs in this namespace: the creator takes the first
	 * it finds (the machine's /dev/hugepages, on a machine set up as .ci/run
	 * does, would take the data file out of this case's sight) */
	KVS_TRY(detach_hugetlbfs());
	if (KVS_KERNEL && hugetlb_test_meminfo("HugePages_Free") >= PF_PAGES && mkdtemp(mnt)) {
		huge = mount("none", mnt, "hugetlbfs", 0, "pagesize=2M,size=64M") == 0;
		if (!huge)
			rmdir(mnt);
	}
	rc = dead_creator_body(run, huge ? mnt : NULL);
	if (huge) { /* whatever the body did: the pages go with the mount */
		umount2(mnt, MNT_DETACH);
		rmdir(mnt);
	}
	free(run);
	return rc;
}

static kvs_test_rc test_clean_dead_creator(void)
{
	return in_child(dead_creator_child);
}

/* ---- dirty slots ---- */

/* The refusal of a cache holding dirty slots: a line naming uid, the count and
 * the way out; named by the user (single): the one line on stderr, else a
 * "skipped" line among stdout's. */
static kvs_test_rc dirty_refusal(const struct run *r, const char *uid, bool dry, bool single)
{
	char want[300], fix[200];

	snprintf(fix, sizeof(fix), "dirty slots (dumped, their blocks not in the backend yet; the next "
		 "store to open it writes them); kvshare clean --discard-dirty %s removes it and "
		 "drops them\n", uid);
	if (!single) {
		snprintf(want, sizeof(want), "skipped %s: it holds %u %s", uid, NBLK, fix);
		return has(r->out, want);
	}
	snprintf(want, sizeof(want), "kvshare clean: %s: %s: it holds %u %s", uid,
		 dry ? "would not be removed" : "not removed", NBLK, fix);
	return one_line_err(r, want);
}

static kvs_test_rc test_clean_dirty(void)
{
	struct run *run = calloc(1, sizeof(*run));
	char uid[80], want[300], prom[128];
	json_t *j, *e;

	KVS_CHECK(run);
	KVS_TRY(dirty_cache(uid, sizeof(uid), run));

	/* ls and stat count them */
	const char *a_lsj[] = { "ls", "--json", NULL }, *a_ls[] = { "ls", NULL };
	KVS_TRY(cli_expect(run, 0, a_lsj));
	j = parse_json(run->out);
	KVS_CHECK(j != NULL);
	e = ls_find(j, uid);
	KVS_CHECK(e != NULL);
	KVS_CHECK(strcmp(json_string_value(json_object_get(e, "state")), "stale") == 0);
	KVS_CHECK_EQ(jint(e, "slots_dirty"), NBLK);
	json_decref(j);
	KVS_TRY(cli_expect(run, 0, a_ls));
	snprintf(want, sizeof(want), "\n%-40s %-6s %-9s %10s %8u ", uid, "stale", "0", "64", NBLK);
	KVS_TRY(has(run->out, want));
	KVS_TRY(has(run->out, " DIRTY "));
	const char *a_stat[] = { "stat", uid, NULL }, *a_statj[] = { "stat", uid, "--json", NULL };
	KVS_TRY(cli_expect(run, 1, a_stat)); /* stale: described, exit 1 */
	snprintf(want, sizeof(want), "dirty      %u slots dumped, their blocks not in the backend yet", NBLK);
	KVS_TRY(has(run->out, want));
	KVS_TRY(cli_expect(run, 1, a_statj));
	j = parse_json(run->out);
	KVS_CHECK(j != NULL);
	KVS_CHECK_EQ(jint(j, "slots_dirty"), NBLK);
	json_decref(j);
	snprintf(prom, sizeof(prom), "/tmp/kvs-dirty-%d.prom", (int)getpid());
	const char *a_prom[] = { "stat", uid, "--prometheus", prom, NULL };
	KVS_TRY(cli_expect(run, 1, a_prom));
	KVS_TRY(check_prom_file(prom, run->out, sizeof(run->out)));
	unlink(prom);
	snprintf(want, sizeof(want), "kvshare_slots{unique_id=\"%s\",state=\"dirty\"} %u\n", uid, NBLK);
	KVS_TRY(has(run->out, want));

	/* refused, with the count and the way out; nothing removed */
	const char *a_dry[] = { "clean", "--dry-run", uid, NULL }, *a_clean[] = { "clean", uid, NULL };
	KVS_TRY(cli_expect(run, 1, a_dry));
	KVS_TRY(dirty_refusal(run, uid, true, true));
	KVS_CHECK(run->out[0] == '\0');
	KVS_TRY(cli_expect(run, 1, a_clean));
	KVS_TRY(dirty_refusal(run, uid, false, true));
	KVS_CHECK(run->out[0] == '\0');
	KVS_CHECK(ctl_exists(uid) && data_exists(uid));

	/* --discard-dirty: --dry-run says it would go, then it goes */
	const char *a_ddry[] = { "clean", "--dry-run", "--discard-dirty", uid, NULL };
	KVS_TRY(cli_expect(run, 0, a_ddry));
	snprintf(want, sizeof(want), "would remove %s (stale, ", uid);
	KVS_TRY(has(run->out, want));
	snprintf(want, sizeof(want), "; would discard %u dirty slots)\n", NBLK);
	KVS_TRY(has(run->out, want));
	KVS_CHECK(ctl_exists(uid) && data_exists(uid));
	const char *a_discard[] = { "clean", "--discard-dirty", uid, NULL };
	KVS_TRY(cli_expect(run, 0, a_discard));
	snprintf(want, sizeof(want), "removed %s (stale, ", uid);
	KVS_TRY(has(run->out, want));
	snprintf(want, sizeof(want), "; discarded %u dirty slots)\n", NBLK);
	KVS_TRY(has(run->out, want));
	snprintf(want, sizeof(want), "removed with %u slots dumped but not in the backend", NBLK);
	KVS_TRY(has(run->err, want)); /* the library's own count, under the lifecycle lock */
	KVS_CHECK(!ctl_exists(uid) && !data_exists(uid));
	free(run);
	return KVS_TEST_PASS;
}

/* In a private /dev/shm: the dirty cache beside caches_make's three.  A bare
 * clean (and its --dry-run) removes the two stale ones and skips the live one
 * and the dirty one (saying why), exit 0; a bare clean --discard-dirty then
 * removes the dirty one and keeps the live one. */
static kvs_test_rc clean_all_dirty_child(void *arg)
{
	struct run *run = calloc(1, sizeof(*run));
	struct kvs_store *held = NULL;
	char live[80], stale[80], pers[80], dirty[80], want[200];

	(void)arg;
	KVS_CHECK(run);
	KVS_TRY(private_shm());
	KVS_TRY(caches_make(live, stale, pers, &held));
	KVS_TRY(dirty_cache(dirty, sizeof(dirty), NULL));
	const char *a_dry[] = { "clean", "--dry-run", NULL };
	KVS_TRY(cli_expect(run, 0, a_dry));
	KVS_TRY(dirty_refusal(run, dirty, true, false));
	KVS_TRY(has(run->out, "would remove 2 stale caches"));
	KVS_TRY(has(run->out, "1 live left alone; 1 stale cache would be kept for its dirty slots "
			      "(kvshare clean --discard-dirty ID drops them)"));
	KVS_CHECK(ctl_exists(stale) && ctl_exists(pers) && ctl_exists(dirty));
	const char *a[] = { "clean", NULL };
	KVS_TRY(cli_expect(run, 0, a));
	KVS_TRY(dirty_refusal(run, dirty, false, false));
	KVS_TRY(has(run->out, "removed 2 stale caches"));
	KVS_TRY(has(run->out, "1 live left alone; 1 stale cache kept for its dirty slots"));
	KVS_CHECK(!ctl_exists(stale) && !ctl_exists(pers));
	KVS_CHECK(ctl_exists(live) && ctl_exists(dirty) && data_exists(dirty));
	const char *a_discard[] = { "clean", "--discard-dirty", NULL };
	KVS_TRY(cli_expect(run, 0, a_discard));
	snprintf(want, sizeof(want), "removed %s (stale, ", dirty);
	KVS_TRY(has(run->out, want));
	KVS_TRY(has(run->out, "removed 1 stale cache"));
	KVS_CHECK(!ctl_exists(dirty) && !data_exists(dirty));
	KVS_CHECK(ctl_exists(live) && data_exists(live));
	KVS_CHECK_OK(kvs_cache_check(kvs_store_cache(held)));
	kvs_store_close(held);
	free(run);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_clean_all_dirty(void)
{
	return in_child(clean_all_dirty_child);
}

/* ---- not a cache ---- */

/* A FIFO named like a test id's control file (nobody ever writes to it): ls,
 * clean (named, --dry-run named and not) and stat each answer at once, naming
 * it as no cache, and leave it.  Before, each opened it with a blocking open
 * and hung for ever (cli_run kills a CLI that is not done in 10 s). */
static kvs_test_rc test_not_a_cache(void)
{
	struct run *run = calloc(1, sizeof(*run));
	char uid[80], path[256], want[400];
	struct stat st;
	json_t *j, *e;
	kvs_test_rc rc = KVS_TEST_PASS;

	KVS_CHECK(run);
	kvs_test_unique_id(uid, sizeof(uid), "tfifo");
	snprintf(path, sizeof(path), "/dev/shm/kvshare.%s.ctl", uid);
	KVS_CHECK_OK(mkfifo(path, 0600));
	snprintf(want, sizeof(want), "%s is a FIFO, not a regular file: not a kvshare cache", path);

	const char *a_ls[] = { "ls", NULL }, *a_lsj[] = { "ls", "--json", NULL };
	const char *a_clean[] = { "clean", uid, NULL }, *a_dry1[] = { "clean", "--dry-run", uid, NULL };
	const char *a_dry[] = { "clean", "--dry-run", NULL }, *a_stat[] = { "stat", uid, NULL };
	struct {
		const char *const *args;
		int code;
		bool one_line; /* stderr: the one line naming it (else stdout names it) */
	} runs[] = {
		{ a_ls, 0, false },
		{ a_clean, 1, true },
		{ a_dry1, 1, true },
		{ a_dry, 1, false }, /* a line among the others' */
		{ a_stat, 1, true },
	};
	for (size_t i = 0; i < KVS_ARRAY_LEN(runs) && rc.code == 0; i++) {
		rc = cli_expect(run, runs[i].code, runs[i].args);
		if (rc.code == 0 && runs[i].one_line)
			rc = one_line_err(run, want);
		else if (rc.code == 0)
			rc = has(i == 0 ? run->out : run->err, want);
		if (rc.code == 0 && lstat(path, &st) != 0)
			rc = KVS_TEST_FAIL;
	}
	if (rc.code == 0)
		rc = cli_expect(run, 0, a_lsj);
	if (rc.code == 0) {
		j = parse_json(run->out);
		e = j ? ls_find(j, uid) : NULL;
		if (!e || strcmp(json_string_value(json_object_get(e, "state")), "unknown") ||
		    !strstr(json_string_value(json_object_get(e, "error")), want))
			rc = KVS_TEST_FAIL;
		json_decref(j);
	}
	KVS_CHECK(lstat(path, &st) == 0 && S_ISFIFO(st.st_mode)); /* left as it was */
	unlink(path); /* never left behind: it would hang an old CLI */
	free(run);
	if (rc.code)
		KVS_FAILF("a FIFO at %s: see above", path);
	return KVS_TEST_PASS;
}

/* ---- bad input ---- */

static kvs_test_rc test_bad_input(void)
{
	static const struct {
		int code;
		const char *what; /* in the one stderr line */
		const char *args[6];
	} bad[] = {
		{ 2, "missing UNIQUE_ID", { "stat", NULL } },
		{ 2, "unknown option '--bogus'", { "stat", "x", "--bogus", NULL } },
		{ 2, "unknown option '-z'", { "stat", "x", "-z", NULL } },
		{ 2, "bad --watch 'abc'", { "stat", "x", "--watch", "abc", NULL } },
		{ 2, "bad --watch '0'", { "stat", "x", "--watch", "0", NULL } },
		{ 2, "bad --watch '5s'", { "stat", "x", "--watch", "5s", NULL } },
		{ 2, "bad --watch 'nan'", { "stat", "x", "--watch", "nan", NULL } },
		{ 2, "needs a value", { "stat", "x", "--watch", NULL } },
		{ 2, "needs a value", { "stat", "x", "--prometheus", NULL } },
		{ 2, "one UNIQUE_ID only", { "stat", "x", "y", NULL } },
		{ 2, "invalid unique_id '../etc'", { "stat", "../etc", NULL } },
		{ 2, "--quiet without --prometheus", { "stat", "x", "--quiet", NULL } },
		{ 1, "no cache 't.none.0'", { "stat", "t.none.0", NULL } },
		{ 2, "unknown option '--all'", { "ls", "--all", NULL } },
		{ 2, "unexpected argument 'x'", { "ls", "x", NULL } },
		{ 2, "unknown option '--force'", { "clean", "--force", NULL } },
		{ 2, "spell --discard-dirty out", { "clean", "--discard", "x", NULL } },
		{ 2, "one UNIQUE_ID at most", { "clean", "a", "b", NULL } },
		{ 2, "invalid unique_id 'a/b'", { "clean", "a/b", NULL } },
		{ 1, "no cache 't.none.0'", { "clean", "t.none.0", NULL } },
		{ 1, "no cache 't.none.0'", { "clean", "--dry-run", "t.none.0", NULL } },
	};
	static const char *const helps[] = { "stat", "ls", "clean" };
	struct run *run = calloc(1, sizeof(*run));

	KVS_CHECK(run);
	for (size_t i = 0; i < KVS_ARRAY_LEN(bad); i++) {
		KVS_TRY(cli_expect(run, bad[i].code, bad[i].args));
		KVS_TRY(one_line_err(run, bad[i].what));
		KVS_CHECK(run->out[0] == '\0');
	}
	for (size_t i = 0; i < KVS_ARRAY_LEN(helps); i++) {
		const char *a[] = { helps[i], "--help", NULL };
		char want[64];

		KVS_TRY(cli_expect(run, 0, a));
		snprintf(want, sizeof(want), "usage: kvshare %s", helps[i]);
		KVS_TRY(has(run->out, want));
		KVS_CHECK(run->err[0] == '\0');
	}
	free(run);
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "bad_input", test_bad_input },
	{ "stat_live", test_stat_live },
	{ "stat_joins", test_stat_joins },
	{ "stat_dumps", test_stat_dumps },
	{ "stat_dead_ranks", test_stat_dead_ranks },
	{ "stat_reaped", test_stat_reaped },
	{ "stat_stale", test_stat_stale },
	{ "stat_last_left", test_stat_last_left },
	{ "ls_clean", test_ls_clean },
	{ "clean_all", test_clean_all },
	{ "clean_dead_creator", test_clean_dead_creator },
	{ "clean_dirty", test_clean_dirty },
	{ "clean_all_dirty", test_clean_all_dirty },
	{ "not_a_cache", test_not_a_cache },
};

static const struct kvs_test_child children[] = {
	{ "rank", rank_child },
	{ "dumper", dumper_child },
	{ "prefaulter", prefaulter_child },
	{ "dirtier", dirtier_child },
};

/* `tools_admin /path/to/kvshare [case...]`; exec'd children get `--child ...`. */
int main(int argc, char **argv)
{
	if (argc >= 2 && argv[1][0] == '/') {
		cli = argv[1];
		argv[1] = argv[0];
		argc--;
		argv++;
		if (access(cli, X_OK)) {
			fprintf(stderr, "%s: not an executable: %s\n", argv[0], strerror(errno));
			return 1;
		}
	} else if (!(argc >= 3 && strcmp(argv[1], "--child") == 0)) {
		fprintf(stderr, "usage: %s /path/to/kvshare [case...]\n", argv[0]);
		return 2;
	}
	return kvs_test_run(argc, argv, cases, KVS_ARRAY_LEN(cases), children, KVS_ARRAY_LEN(children));
}
