/*
 * tests/chaos.c — a chaos run: rank processes killed with -9 at random moments
 * while they load, dump, prefetch and look up through one shared cache, and the
 * invariants that must hold anyway.
 *
 * The controller (this program without --rank) makes a posix backend root in
 * /dev/shm (tmpfs: a disk stalled by other work on the machine must not make
 * tasks time out, see "wait" below) and starts N rank processes (this program with --rank, exec'd: each maps
 * the segments at its own addresses).  Each rank opens a store on the one cache
 * (device_id = its index, posix backend wrapped by the fault backend: injected
 * -EIO, short reads, a delay on every completion, drawn per rank around
 * --fault-delay-us so that owned reads stay in flight long enough for peers to
 * wait on them when the owner is killed) and runs a seeded random mix of
 * tasks over a universe of blocks, a few in flight at a time: loads (whole blocks
 * or a run of one block's shards), dumps -- durable on even ranks, cached
 * (dump_wait=cached: acknowledged once in the cache) on odd ones -- (whole blocks in one task, or
 * layer-wise: one task per shard index, all in flight at once, as an engine's
 * per-layer saves), prefetches, lookups.  Ranks dump the same hot blocks at the
 * same time, so blocks complete from several ranks' shards, and kills land in
 * the middle of block writes (every completion is delayed).
 * Meanwhile the controller kill -9s random ranks (mostly one, sometimes half of
 * them, now and then all: the cache goes stale and the next open adopts it) and
 * restarts them at once, so kills also land in a rank's open (creation, attach,
 * adoption) and in its backend's crash cleanup.  After --seconds it stops
 * killing, attaches as a watcher, tells the ranks to stop, and checks the end
 * state.
 *
 * Invariants; each broken one prints a "chaos violation: <kind>: ..." line:
 *   bytes     every load that completed returned the stored bytes.  Stored
 *             content is kvs_pattern_fill() of (block, shard, offset), whoever
 *             dumped it, so any rank verifies any load.
 *   error     every failed task carried a real error: one of the codes a chaos
 *             run can produce (expected_errors below, each with its cause); 0,
 *             garbage, or any other code (-KVS_ECORRUPT, -EINVAL...) is a bug.
 *   wait      no task took longer than its timeout + --slack-ms from submit to
 *             completion (a lookup, which has no timeout, gets the same bound),
 *             and none timed out at all: nothing in a chaos run is stopped, so a
 *             task that reaches its deadline (10 s; tasks take milliseconds, at most
 *             about half a second on a 2-core machine at load 24 under TSan) waited
 *             on a dead filler nobody noticed -- kvshare must take its slot over
 *             or fail it, never wait out a timeout that cannot end well.
 *   rank      no rank exited but by the controller's kill: a rank that cannot
 *             open, fails a library call, or does not stop in time is a bug.
 *   check     after the last rank detached cleanly, kvs_cache_check() on the
 *             controller's watcher is clean and no slot is pinned.
 *   leftover  once the watcher (the last process) closed: no file of the cache
 *             in /dev/shm or in any hugetlbfs mount, no dump temp file in the
 *             backend root (a killed rank's are removed by the next open).
 *   durable   every block of every dump that returned 0, durable or cached
 *             (reported by the rank right after), is in the backend: at the end a
 *             fresh store of another unique_id, over the same root without
 *             faults, loads each one byte-exact -- a cached dump's block whatever
 *             kills followed it (the killed rank's cache record is written by the
 *             others or by the adopter of the cache).  A cached rank flushes
 *             (kvs_store_flush) before its clean close: anything but 0 is a
 *             violation (-KVS_EINCOMPLETE excepted after a layer-wise dump of
 *             which some layers failed: its acknowledged layers' blocks never
 *             complete, and are dropped).  A cache kept at the end holds only DIRTY slots of
 *             blocks nobody completed (a layer-wise dump killed half-way, still
 *             protected): said on stderr and removed with
 *             KVS_CACHE_DISCARD_DIRTY, not a leftover.
 *
 * Ranks report every finished task on a pipe shared with the controller, one
 * fixed-size record per write() (< PIPE_BUF, so whole or not at all, whatever
 * kills the writer), as soon as the task is done: a killed rank loses only the
 * accounting of its tasks in flight.  The controller judges every record.
 *
 * Mixed node (--mixed PATH): PATH is the other variant's build of this program;
 * odd ranks run it.  Rank 0 (the controller's variant) opens first and creates
 * the cache, so a kernel controller makes a hugetlbfs data plane that plain
 * ranks attach where the header's record says (docs/numa.md), and a plain one
 * makes a /dev/shm cache that kernel ranks attach; after a kill of every rank,
 * whichever variant reopens first adopts the cache.  The two builds share the
 * protocol word for word: kernel waiters set WAITERS and sleep in futex (the
 * copier in futex_waitv), plain waiters spin without touching the word, and
 * every state change goes through the one publisher, kvs_wait_publish(), which
 * wakes sleepers in both builds (docs/wait.md).  The run checks every rank runs
 * the variant it was started as, and that both variants opened.
 *
 * Output: "chaos seed=... (...)" first (--seed replays the same choices; the
 * timing of kills against the ranks' work is the machine's), one line per
 * violation, failures by code on stderr, and exactly one summary line:
 *   chaos ranks=.. seconds=.. kills=.. tasks=.. failures=.. max_wait_ms=.. durable=.. violations=..
 * Exit 0 when violations=0, else 1.  --plant bytes,wait,error,durable makes every
 * rank corrupt its first load's bytes, lengthen its first task's wait and garble
 * its first failure's code, and the controller remove the backend file of one
 * block reported durable before the final check, to prove each check can fail:
 * the exit is then 0 only if every planted kind was caught.
 */
#include <fcntl.h>
#include <getopt.h>
#include <glob.h>
#include <mntent.h>
#include <poll.h>
#include <spawn.h>
#include <sys/syscall.h>

#include "chaos.h"

extern char **environ;

static const char *const kind_name[K_COUNT] = { "load", "dump", "layer-wise dump", "prefetch",
						"lookup" };
static const char *const vkind_name[V_COUNT] = { "bytes", "error", "wait", "rank",
						  "check", "leftover", "durable" };

/* The codes a chaos task may end with, and why. */
static const struct {
	int code;
	const char *why;
} expected_errors[] = {
	{ -EIO, "injected error or short read (fault backend)" },
	{ -ENOENT, "block not in the backend (never dumped, or its dump failed)" },
	{ -KVS_EOWNERDEAD, "a dump's shard whose gatherer was killed" },
	{ -ENOSPC, "every candidate slot pinned (the ranks pin more than the cache holds)" },
};

/* ======================================================================== */
/* Controller                                                                */

struct child {
	pid_t pid;
	int pidfd;
	bool other;  /* runs --mixed's binary */
	bool open;   /* sent REC_OPEN in its current incarnation */
	uint32_t incarnation;
};

struct ctl {
	const struct opts *o;
	const char *self;
	char uid[KVS_UNIQUE_ID_MAX + 1], root[160];
	int res_r, res_w, stop_r, stop_w;
	struct child ch[RANKS_MAX];
	uint64_t rng;
	/* results */
	uint64_t kills, tasks, failures, max_wait_ns;
	uint64_t max_wait_kind_ns[K_COUNT];
	uint64_t violations[V_COUNT];
	uint64_t by_code[KVS_ARRAY_LEN(expected_errors)];
	bool durable[BLOCKS];   /* blocks a durable dump returned 0 for */
	uint64_t durable_checked;
	bool opened_variant[2]; /* [other] */
	/* record reassembly */
	unsigned char buf[64 * sizeof(struct rec)];
	size_t have;
};

static void violation(struct ctl *c, enum vkind v, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void violation(struct ctl *c, enum vkind v, const char *fmt, ...)
{
	va_list ap;

	c->violations[v]++;
	printf("chaos violation: %s: ", vkind_name[v]);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
}

static const char *variant_of(const struct ctl *c, int idx)
{
	static const char *const self = KVS_TEST_VARIANT;

	if (!c->ch[idx].other)
		return self;
	return strcmp(self, "kernel") == 0 ? "plain" : "kernel";
}

static int fd_above(int fd)
{
	int hi = fcntl(fd, F_DUPFD_CLOEXEC, 10);

	close(fd);
	return hi;
}

/* A rank's argv under construction. */
struct rank_argv {
	char *v[40];
	char num[16][24];
	int n, nnum;
};

static void arg_s(struct rank_argv *a, const char *s)
{
	a->v[a->n++] = (char *)s;
}

static void arg_u(struct rank_argv *a, const char *name, unsigned long long x)
{
	arg_s(a, name);
	snprintf(a->num[a->nnum], sizeof(a->num[a->nnum]), "%llu", x);
	arg_s(a, a->num[a->nnum++]);
}

/* Exec rank idx (a new incarnation) with the results pipe on fd 3 and the stop
 * pipe on fd 4 (both above 10 here, close-on-exec: dup2 clears it on the copy). */
static kvs_test_rc spawn_rank(struct ctl *c, int idx, bool populate)
{
	const struct opts *o = c->o;
	struct child *ch = &c->ch[idx];
	struct rank_argv a = { .n = 0 };
	posix_spawn_file_actions_t fa;
	int rc;

	ch->incarnation++;
	ch->open = false;
	arg_s(&a, ch->other ? o->mixed : c->self);
	arg_u(&a, "--rank", (unsigned)idx);
	arg_s(&a, "--uid");
	arg_s(&a, c->uid);
	arg_s(&a, "--root");
	arg_s(&a, c->root);
	arg_u(&a, "--seed", o->seed);
	arg_u(&a, "--incarnation", ch->incarnation);
	arg_u(&a, "--ranks", (unsigned)o->ranks);
	arg_u(&a, "--timeout-ms", o->timeout_ms);
	arg_u(&a, "--slack-ms", o->slack_ms);
	arg_u(&a, "--fault-error-ppm", o->error_ppm);
	arg_u(&a, "--fault-short-ppm", o->short_ppm);
	arg_u(&a, "--fault-delay-us", o->delay_us);
	arg_u(&a, "--plant-mask", o->plant);
	if (populate)
		arg_s(&a, "--populate");
	a.v[a.n] = NULL;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, c->res_w, RES_FD);
	posix_spawn_file_actions_adddup2(&fa, c->stop_r, STOP_FD);
	fflush(NULL);
	rc = posix_spawn(&ch->pid, a.v[0], &fa, NULL, a.v, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (rc)
		KVS_FAILF("posix_spawn %s: %s", a.v[0], strerror(rc));
	ch->pidfd = (int)syscall(SYS_pidfd_open, ch->pid, 0);
	if (ch->pidfd < 0)
		KVS_FAILF("pidfd_open(%d): %s", (int)ch->pid, strerror(errno));
	return KVS_TEST_PASS;
}

/* Reap rank idx, which has exited or was killed; returns its wait status. */
static int reap_rank(struct ctl *c, int idx)
{
	struct child *ch = &c->ch[idx];
	int rc = kvs_test_reap(ch->pid, 10000);

	close(ch->pidfd);
	ch->pidfd = -1;
	ch->pid = 0;
	return rc;
}

/* rc's entry in expected_errors, or -1. */
static int expected_index(int rc)
{
	for (size_t i = 0; i < KVS_ARRAY_LEN(expected_errors); i++)
		if (expected_errors[i].code == rc)
			return (int)i;
	return -1;
}

/* Judge one record. */
static void on_record(struct ctl *c, const struct rec *m)
{
	const struct opts *o = c->o;
	int idx = m->idx, e;

	if (idx >= o->ranks) {
		violation(c, V_RANK, "a record from rank %d of %d (type %u)", idx, o->ranks, m->type);
		return;
	}
	const char *v = variant_of(c, idx);
	switch (m->type) {
	case REC_OPEN:
		if (m->incarnation == c->ch[idx].incarnation)
			c->ch[idx].open = true;
		if (strncmp(m->text, v, sizeof(m->text)) != 0)
			violation(c, V_RANK, "rank %d runs the %.16s library, started as %s", idx,
				  m->text, v);
		else
			c->opened_variant[c->ch[idx].other] = true;
		return;
	case REC_VIOLATION:
		violation(c, m->kind < V_COUNT ? (enum vkind)m->kind : V_RANK, "rank %d (%s): %.168s",
			  idx, v, m->text);
		return;
	case REC_TASK:
		break;
	case REC_DURABLE: {
		uint32_t k[TASK_BLOCKS_MAX];

		if (m->n == 0 || m->n > TASK_BLOCKS_MAX) {
			violation(c, V_RANK, "rank %d (%s): durable record of %u blocks", idx, v, m->n);
			return;
		}
		memcpy(k, m->text, m->n * sizeof(k[0]));
		for (uint32_t i = 0; i < m->n; i++) {
			if (k[i] >= BLOCKS)
				violation(c, V_RANK, "rank %d (%s): durable block %u of %u", idx, v, k[i],
					  BLOCKS);
			else
				c->durable[k[i]] = true;
		}
		return;
	}
	default:
		violation(c, V_RANK, "rank %d (%s): record of unknown type %u", idx, v, m->type);
		return;
	}
	if (m->kind >= K_COUNT) {
		violation(c, V_RANK, "rank %d (%s): task of unknown kind %u", idx, v, m->kind);
		return;
	}
	const char *kn = kind_name[m->kind];
	c->tasks++;
	if (m->wait_ns > c->max_wait_ns)
		c->max_wait_ns = m->wait_ns;
	if (m->wait_ns > c->max_wait_kind_ns[m->kind])
		c->max_wait_kind_ns[m->kind] = m->wait_ns;
	if (m->rc == 1 && m->kind != K_LOOKUP)
		violation(c, V_WAIT, "rank %d (%s): %s of %u still running %llu ms after submit "
			  "(timeout %u ms + slack %u ms)", idx, v, kn, m->n,
			  (unsigned long long)(m->wait_ns / ST_MS), o->timeout_ms, o->slack_ms);
	else if (m->wait_ns > budget_ns(o))
		violation(c, V_WAIT, "rank %d (%s): %s of %u took %llu ms (timeout %u ms + slack %u ms)",
			  idx, v, kn, m->n, (unsigned long long)(m->wait_ns / ST_MS), o->timeout_ms,
			  o->slack_ms);
	if (m->kind == K_LOOKUP ? m->rc > (int)m->n : m->rc > 1)
		violation(c, V_ERROR, "rank %d (%s): %s of %u returned %d: neither a result nor an "
			  "error", idx, v, kn, m->n, m->rc);
	if (m->rc >= 0)
		return;
	c->failures++;
	if ((e = expected_index(m->rc)) >= 0)
		c->by_code[e]++;
	else if (m->rc == -ETIMEDOUT)
		violation(c, V_WAIT, "rank %d (%s): %s of %u timed out after %llu ms (a dead filler "
			  "not noticed, or a machine too slow for --timeout-ms %u)", idx, v, kn, m->n,
			  (unsigned long long)(m->wait_ns / ST_MS), o->timeout_ms);
	else
		violation(c, V_ERROR, "rank %d (%s): %s of %u failed with %d (%s): not an error a "
			  "chaos run can cause", idx, v, kn, m->n, m->rc, kvs_strerror(m->rc));
}

/* Read what the pipe holds (non-blocking) and judge every whole record. */
static void drain_records(struct ctl *c)
{
	for (;;) {
		ssize_t k = read(c->res_r, c->buf + c->have, sizeof(c->buf) - c->have);

		if (k <= 0)
			return; /* EAGAIN (empty), EOF or an error: nothing more now */
		c->have += (size_t)k;
		size_t used = 0;
		for (; c->have - used >= sizeof(struct rec); used += sizeof(struct rec)) {
			struct rec m;

			memcpy(&m, c->buf + used, sizeof(m));
			on_record(c, &m);
		}
		memmove(c->buf, c->buf + used, c->have - used);
		c->have -= used;
	}
}

static void describe_exit(char *buf, size_t len, int st)
{
	if (st == -ETIMEDOUT)
		snprintf(buf, len, "did not exit in time (killed)");
	else if (st >= 128)
		snprintf(buf, len, "died of signal %d", st - 128);
	else
		snprintf(buf, len, "exited with status %d (its stderr says why)", st);
}

/* Wait up to timeout_ms for records or a rank's exit; a rank that exited on its
 * own is a violation, and is restarted when restart is set. */
static kvs_test_rc pump(struct ctl *c, uint64_t timeout_ms, bool restart)
{
	struct pollfd p[RANKS_MAX + 1];
	int map[RANKS_MAX + 1], n = 0;

	p[n] = (struct pollfd){ .fd = c->res_r, .events = POLLIN };
	map[n++] = -1;
	for (int i = 0; i < c->o->ranks; i++)
		if (c->ch[i].pid > 0) {
			p[n] = (struct pollfd){ .fd = c->ch[i].pidfd, .events = POLLIN };
			map[n++] = i;
		}
	int r = poll(p, (nfds_t)n, (int)timeout_ms);
	if (r < 0 && errno != EINTR)
		KVS_FAILF("poll: %s", strerror(errno));
	drain_records(c);
	for (int k = 1; k < n && r > 0; k++) {
		if (!p[k].revents)
			continue;
		int idx = map[k];
		pid_t pid = c->ch[idx].pid;
		int st = reap_rank(c, idx);
		char how[96];

		drain_records(c); /* its last records before judging its exit */
		if (st != 0 || restart) {
			describe_exit(how, sizeof(how), st);
			violation(c, V_RANK, "rank %d (%s, pid %d) %s", idx, variant_of(c, idx),
				  (int)pid, st == 0 ? "exited before it was told to stop" : how);
		}
		if (restart)
			KVS_TRY(spawn_rank(c, idx, false));
	}
	return KVS_TEST_PASS;
}

/* kill -9 one rank, half of them, or (rarely) all; restart each at once. */
static kvs_test_rc kill_some(struct ctl *c)
{
	int n = c->o->ranks, k;
	uint32_t p = rnd_below(&c->rng, 16);
	bool victim[RANKS_MAX] = { false };

	k = p == 0 ? n : p <= 2 ? (n + 1) / 2 : 1;
	for (int chosen = 0; chosen < k;) {
		int i = (int)rnd_below(&c->rng, (uint32_t)n);

		if (!victim[i]) {
			victim[i] = true;
			chosen++;
		}
	}
	for (int i = 0; i < n; i++)
		if (victim[i] && c->ch[i].pid > 0)
			kill(c->ch[i].pid, SIGKILL);
	for (int i = 0; i < n; i++) {
		if (!victim[i] || c->ch[i].pid <= 0)
			continue;
		int st = reap_rank(c, i);
		if (st != 128 + SIGKILL) { /* it ended on its own first */
			char how[96];

			describe_exit(how, sizeof(how), st);
			violation(c, V_RANK, "rank %d (%s) %s before its kill", i, variant_of(c, i), how);
		}
		c->kills++;
		KVS_TRY(spawn_rank(c, i, false));
	}
	return KVS_TEST_PASS;
}

/* Pump until every rank has opened its store (bounded). */
static kvs_test_rc wait_open(struct ctl *c, int upto, uint64_t timeout_ms)
{
	uint64_t deadline = kvs_deadline_after(timeout_ms * ST_MS);

	for (;;) {
		bool done = true;

		for (int i = 0; i < upto; i++)
			done &= c->ch[i].open;
		if (done)
			return KVS_TEST_PASS;
		uint64_t now = kvs_now_ns();
		if (now >= deadline)
			KVS_FAILF("ranks did not open their stores within %llu ms",
				  (unsigned long long)timeout_ms);
		KVS_TRY(pump(c, (deadline - now) / ST_MS + 1, true));
	}
}

/* Files of the cache left in dir (violations), removed so the machine stays clean. */
static void leftovers_in(struct ctl *c, const char *dir)
{
	char pat[PATH_MAX];
	glob_t g;

	snprintf(pat, sizeof(pat), "%s/kvshare.%s.*", dir, c->uid);
	if (glob(pat, 0, NULL, &g) != 0)
		return;
	for (size_t i = 0; i < g.gl_pathc; i++) {
		violation(c, V_LEFTOVER, "%s still exists after the last process detached",
			  g.gl_pathv[i]);
		unlink(g.gl_pathv[i]);
	}
	globfree(&g);
}

static int temp_files;

static int count_temp(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_F && strstr(path + ftw->base, ".tmp."))
		temp_files++;
	return 0;
}

static void check_leftovers(struct ctl *c)
{
	FILE *m = setmntent("/proc/mounts", "re");
	struct mntent *e;

	leftovers_in(c, "/dev/shm");
	while (m && (e = getmntent(m)))
		if (strcmp(e->mnt_type, "hugetlbfs") == 0)
			leftovers_in(c, e->mnt_dir);
	if (m)
		endmntent(m);
	temp_files = 0;
	nftw(c->root, count_temp, 16, FTW_PHYS);
	if (temp_files)
		violation(c, V_LEFTOVER, "%d dump temp file(s) left in %s", temp_files, c->root);
}

/* A cache the last close kept for its DIRTY slots (dumped shards of blocks
 * nobody completed, still protected: core/segment.c, the removal guard): said,
 * and removed with them (the acknowledged blocks are checked in the backend). */
static void kept_dirty(struct ctl *c)
{
	struct kvs_cache_config cc;
	struct kvs_cache_info in;
	int rc;

	if (kvs_cache_inspect(c->uid, &in) != 0 || in.slots_dirty == 0)
		return;
	kvs_cache_config_init(&cc);
	snprintf(cc.unique_id, sizeof(cc.unique_id), "%s", c->uid);
	cc.flags = KVS_CACHE_DISCARD_DIRTY;
	rc = kvs_cache_remove(&cc);
	fprintf(stderr, "chaos cache: kept for %llu dirty slots of incomplete blocks; removed "
		"with them: %d (%s)\n", (unsigned long long)in.slots_dirty, rc, kvs_strerror(rc));
}

static void ctl_log(void *arg, int level, const char *msg)
{
	(void)arg;
	if (level <= KVS_LOG_WARN)
		fprintf(stderr, "  [watcher log %d] %s\n", level, msg);
}

/* What the kills did to the cache, and where its data plane was (stderr). */
static void report_cache(struct kvs_cache *w, const struct kvs_cache_stats *cs)
{
	struct kvs_cache_seg_info si;

	if (kvs_cache_seg_info(w, 0, &si) == 0)
		fprintf(stderr, "chaos cache: data plane %s (%s)\n", si.path,
			si.backing == KVS_CACHE_BACKING_HUGETLB ? "hugetlbfs" : "/dev/shm");
	fprintf(stderr, "chaos cache: takeovers=%llu lock_repairs=%llu ranks_reaped=%llu "
		"adoptions=%u enospc=%llu evictions=%llu\n",
		(unsigned long long)cs->takeovers, (unsigned long long)cs->lock_repairs,
		(unsigned long long)cs->ranks_reaped, cs->adoptions,
		(unsigned long long)cs->enospc, (unsigned long long)cs->evictions);
}

/* Every block a durable dump returned 0 for, loaded by a fresh store (another
 * unique_id, the same root, no faults): byte-exact, or a violation. */
static kvs_test_rc check_durable(struct ctl *c)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	char kv[1024];
	int rc;

	kvs_store_config_init(&cfg);
	cfg.log = ctl_log;
	snprintf(kv, sizeof(kv),
		 "unique_id=%s.v,device_id=0,local_rank_size=1,shard_size=%u,block_size=%u,"
		 "tensor_size=%u,cache_buffer_capacity_gb=%.9f,hugetlb=off,backend=posix,"
		 "backend_roots=%s,fsync=0,copy_engine=host,timeout_ms=60000",
		 c->uid, SHARD, SHARD * SPB, SHARD / TENSORS, (double)(4 * SPB) * SHARD / (1u << 30),
		 c->root);
	KVS_TRY(st_parse(&cfg, kv));
	rc = kvs_store_open(&cfg, &s);
	if (rc) {
		violation(c, V_DURABLE, "the checking store could not open: %d (%s)", rc,
			  kvs_strerror(rc));
		return KVS_TEST_PASS;
	}
	for (uint32_t k = 0; k < BLOCKS; k++) {
		struct kvs_block_id b = st_block(CHAOS_TAG, k);
		struct st_task t;
		uint64_t id = 0;

		if (!c->durable[k])
			continue;
		if ((c->o->plant & PLANT_DURABLE) && c->durable_checked == 0) {
			/* the plant: as if this block's write had never landed */
			char path[PATH_MAX];
			const uint8_t *x = b.bytes;

			snprintf(path, sizeof(path), "%s/%02x/%02x/", c->root, x[0], x[1]);
			for (int i = 0; i < 16; i++)
				snprintf(path + strlen(path), sizeof(path) - strlen(path), "%02x", x[i]);
			if (unlink(path))
				fprintf(stderr, "chaos plant durable: unlink %s: %s\n", path,
					strerror(errno));
		}
		KVS_TRY(st_task_whole(&t, SPB, TENSORS, SHARD));
		for (uint32_t i = 0; i < SPB; i++)
			st_task_set(&t, i, &b, i);
		st_task_poison(&t);
		rc = kvs_store_load(s, t.shards, t.n, &id);
		if (rc == 0)
			rc = kvs_store_wait(s, id, 60 * ST_SEC);
		if (rc)
			violation(c, V_DURABLE, "block %u: a durable dump returned 0, but a fresh "
				  "store's load of it gives %d (%s)", k, rc, kvs_strerror(rc));
		else if (st_task_verify(&t).code != KVS_TEST_PASS.code)
			violation(c, V_DURABLE, "block %u: a durable dump returned 0, but the backend "
				  "holds other bytes (first bad byte on stderr)", k);
		c->durable_checked++;
		st_task_free(&t);
	}
	kvs_store_close(s);
	return KVS_TEST_PASS;
}

/* The end: every rank open, a watcher attached, the ranks stopped; then the
 * checks on the cache as its last process sees it, and after it left. */
static kvs_test_rc finish(struct ctl *c)
{
	const struct opts *o = c->o;
	struct kvs_cache_config cc;
	struct kvs_cache *w = NULL;
	int rc;

	KVS_TRY(wait_open(c, o->ranks, 60000));
	kvs_cache_config_init(&cc);
	snprintf(cc.unique_id, sizeof(cc.unique_id), "%s", c->uid);
	cc.device_id = -1;
	cc.flags = KVS_CACHE_ATTACH;
	cc.log = ctl_log;
	rc = kvs_cache_open(&cc, &w);
	if (rc)
		violation(c, V_CHECK, "the watcher could not attach: %d (%s)", rc, kvs_strerror(rc));

	close(c->stop_w); /* EOF: every rank finishes its tasks and closes */
	c->stop_w = -1;
	uint64_t deadline = kvs_deadline_after(budget_ns(o) + 60 * ST_SEC);
	for (;;) {
		bool any = false;

		for (int i = 0; i < o->ranks; i++)
			any |= c->ch[i].pid > 0;
		if (!any)
			break;
		uint64_t now = kvs_now_ns();
		if (now >= deadline) {
			for (int i = 0; i < o->ranks; i++)
				if (c->ch[i].pid > 0) {
					violation(c, V_RANK, "rank %d (%s, pid %d) did not stop in time",
						  i, variant_of(c, i), (int)c->ch[i].pid);
					kill(c->ch[i].pid, SIGKILL);
					(void)reap_rank(c, i);
				}
			break;
		}
		KVS_TRY(pump(c, (deadline - now) / ST_MS + 1, false));
	}
	close(c->res_w); /* every writer gone: read to EOF */
	c->res_w = -1;
	drain_records(c);

	if (w) {
		struct kvs_cache_stats cs;

		rc = kvs_cache_check(w);
		if (rc)
			violation(c, V_CHECK, "kvs_cache_check after the last rank detached: %d (%s)",
				  rc, kvs_strerror(rc));
		rc = kvs_cache_stats(w, KVS_STATS_NODE, &cs);
		if (rc)
			violation(c, V_CHECK, "kvs_cache_stats: %d (%s)", rc, kvs_strerror(rc));
		else if (cs.slots_pinned)
			violation(c, V_CHECK, "%llu slot(s) still pinned after every rank detached",
				  (unsigned long long)cs.slots_pinned);
		report_cache(w, &cs);
		kvs_cache_close(w);
	}
	kept_dirty(c);
	check_leftovers(c);
	KVS_TRY(check_durable(c));
	if (o->mixed && !(c->opened_variant[0] && c->opened_variant[1]))
		violation(c, V_RANK, "mixed run: only the %s variant ever opened",
			  c->opened_variant[0] ? KVS_TEST_VARIANT : "other");
	return KVS_TEST_PASS;
}

static kvs_test_rc run(struct ctl *c)
{
	const struct opts *o = c->o;
	int res[2], stop[2];

	if (pipe(res) || pipe(stop))
		KVS_FAILF("pipe: %s", strerror(errno));
	c->res_r = fd_above(res[0]);
	c->res_w = fd_above(res[1]);
	c->stop_r = fd_above(stop[0]);
	c->stop_w = fd_above(stop[1]);
	if (c->res_r < 0 || c->res_w < 0 || c->stop_r < 0 || c->stop_w < 0)
		KVS_FAILF("fcntl(F_DUPFD_CLOEXEC): %s", strerror(errno));
	if (fcntl(c->res_r, F_SETFL, O_NONBLOCK))
		KVS_FAILF("fcntl(O_NONBLOCK): %s", strerror(errno));
	/* Room for a burst of records while a kill is being reaped (best effort:
	 * a full pipe only makes the ranks' report writes wait, not their tasks). */
	(void)fcntl(c->res_w, F_SETPIPE_SZ, 1 << 20);

	/* Rank 0 first (the creator: a mixed run's data plane is its variant's),
	 * then the others; each dumps its share of the hot blocks first. */
	for (int i = 0; i < o->ranks; i++)
		c->ch[i].other = o->mixed && i % 2 == 1;
	KVS_TRY(spawn_rank(c, 0, true));
	KVS_TRY(wait_open(c, 1, 60000));
	for (int i = 1; i < o->ranks; i++)
		KVS_TRY(spawn_rank(c, i, true));
	KVS_TRY(wait_open(c, o->ranks, 60000));

	uint64_t end = kvs_deadline_after((uint64_t)o->seconds * ST_SEC);
	uint64_t next_kill = kvs_now_ns() + rnd_below(&c->rng, 2 * o->kill_ms + 1) * ST_MS;
	for (;;) {
		uint64_t now = kvs_now_ns();

		if (now >= end)
			break;
		if (now >= next_kill) {
			KVS_TRY(kill_some(c));
			next_kill = kvs_now_ns() + rnd_below(&c->rng, 2 * o->kill_ms + 1) * ST_MS;
			continue;
		}
		uint64_t until = next_kill < end ? next_kill : end;
		KVS_TRY(pump(c, (until - now) / ST_MS + 1, true));
	}
	return finish(c);
}

static void ctl_cleanup(struct ctl *c)
{
	struct kvs_cache_config cc;

	for (int i = 0; i < c->o->ranks; i++)
		if (c->ch[i].pid > 0) {
			kill(c->ch[i].pid, SIGKILL);
			(void)reap_rank(c, i);
		}
	kvs_cache_config_init(&cc);
	snprintf(cc.unique_id, sizeof(cc.unique_id), "%s", c->uid);
	(void)kvs_cache_remove(&cc); /* after a failed run: nothing left behind */
	st_root_fini(c->root);
	int fds[] = { c->res_r, c->res_w, c->stop_r, c->stop_w };
	for (size_t i = 0; i < KVS_ARRAY_LEN(fds); i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

static int controller_main(const struct opts *o, const char *self)
{
	static struct ctl c;
	uint64_t total = 0;

	c.o = o;
	c.self = self;
	c.res_r = c.res_w = c.stop_r = c.stop_w = -1;
	c.rng = kvs_mix64(o->seed);
	kvs_test_unique_id(c.uid, sizeof(c.uid), o->mixed ? "chaosmix" : "chaos");
	printf("chaos seed=%llu (ranks %d, %s%s, timeout %u ms + slack %u ms, kill every %u ms "
	       "on average, faults %u+%u ppm, delays %u us on average)\n",
	       (unsigned long long)o->seed, o->ranks, KVS_TEST_VARIANT,
	       o->mixed ? " creator, mixed with the other variant" : "", o->timeout_ms,
	       o->slack_ms, o->kill_ms, o->error_ppm, o->short_ppm, o->delay_us);
	fflush(stdout);
	signal(SIGPIPE, SIG_IGN);

	kvs_test_rc rc = KVS_TEST_PASS;
	snprintf(c.root, sizeof(c.root), "/dev/shm/kvs-%s", c.uid);
	if (mkdir(c.root, 0700)) {
		fprintf(stderr, "chaos: mkdir %s: %s\n", c.root, strerror(errno));
		c.root[0] = '\0'; /* not ours: never removed */
		rc = KVS_TEST_FAIL;
	}
	if (rc.code == KVS_TEST_PASS.code)
		rc = run(&c);
	if (rc.code != KVS_TEST_PASS.code)
		violation(&c, V_RANK, "the run could not go on (see above)");
	ctl_cleanup(&c);

	for (size_t i = 0; i < KVS_ARRAY_LEN(expected_errors); i++)
		fprintf(stderr, "chaos failures %s=%llu (%s)\n", kvs_strerror(expected_errors[i].code),
			(unsigned long long)c.by_code[i], expected_errors[i].why);
	fprintf(stderr, "chaos max_wait_ms by kind:");
	for (int k = 0; k < K_COUNT; k++)
		fprintf(stderr, " %s=%llu", kind_name[k],
			(unsigned long long)(c.max_wait_kind_ns[k] / ST_MS));
	fputc('\n', stderr);
	for (int v = 0; v < V_COUNT; v++)
		total += c.violations[v];
	printf("chaos ranks=%d seconds=%u kills=%llu tasks=%llu failures=%llu max_wait_ms=%llu "
	       "durable=%llu violations=%llu\n",
	       o->ranks, o->seconds, (unsigned long long)c.kills, (unsigned long long)c.tasks,
	       (unsigned long long)c.failures, (unsigned long long)(c.max_wait_ns / ST_MS),
	       (unsigned long long)c.durable_checked, (unsigned long long)total);
	if (o->plant) {
		bool caught = true;

		for (int v = 0; v < V_COUNT; v++)
			if (o->plant & (1u << v)) {
				fprintf(stderr, "chaos plant %s: %s\n", vkind_name[v],
					c.violations[v] ? "caught" : "NOT caught");
				caught &= c.violations[v] > 0;
			}
		return caught ? 0 : 1;
	}
	return total ? 1 : 0;
}

/* ======================================================================== */
/* Options                                                                   */

static void usage(void)
{
	fprintf(stderr,
		"usage: chaos [--ranks N] [--seconds S] [--seed X] [--kill-ms MEAN]\n"
		"             [--timeout-ms T] [--slack-ms B] [--fault-error-ppm P]\n"
		"             [--fault-short-ppm P] [--fault-delay-us U] [--mixed OTHER_BINARY]\n"
		"             [--plant bytes,wait,error,durable]\n");
}

static bool parse_u(const char *s, unsigned long long lo, unsigned long long hi,
		    unsigned long long *out)
{
	char *end;

	errno = 0;
	*out = strtoull(s, &end, 0);
	return errno == 0 && end != s && *end == '\0' && *out >= lo && *out <= hi;
}

static bool parse_plant(const char *s, unsigned *mask)
{
	char buf[64], *save, *tok;

	snprintf(buf, sizeof(buf), "%s", s);
	*mask = 0;
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (strcmp(tok, "bytes") == 0)
			*mask |= PLANT_BYTES;
		else if (strcmp(tok, "wait") == 0)
			*mask |= PLANT_WAIT;
		else if (strcmp(tok, "error") == 0)
			*mask |= PLANT_ERROR;
		else if (strcmp(tok, "durable") == 0)
			*mask |= PLANT_DURABLE;
		else
			return false;
	}
	return *mask != 0;
}

int main(int argc, char **argv)
{
	enum { O_RANKS = 256, O_SECONDS, O_SEED, O_KILL, O_TIMEOUT, O_SLACK, O_ERR, O_SHORT,
	       O_DELAY, O_MIXED, O_PLANT, O_PLANT_MASK, O_RANK, O_UID, O_ROOT, O_INC, O_POP };
	static const struct option longopts[] = {
		{ "ranks", required_argument, NULL, O_RANKS },
		{ "seconds", required_argument, NULL, O_SECONDS },
		{ "seed", required_argument, NULL, O_SEED },
		{ "kill-ms", required_argument, NULL, O_KILL },
		{ "timeout-ms", required_argument, NULL, O_TIMEOUT },
		{ "slack-ms", required_argument, NULL, O_SLACK },
		{ "fault-error-ppm", required_argument, NULL, O_ERR },
		{ "fault-short-ppm", required_argument, NULL, O_SHORT },
		{ "fault-delay-us", required_argument, NULL, O_DELAY },
		{ "mixed", required_argument, NULL, O_MIXED },
		{ "plant", required_argument, NULL, O_PLANT },
		/* a rank's, set by the controller */
		{ "plant-mask", required_argument, NULL, O_PLANT_MASK },
		{ "rank", required_argument, NULL, O_RANK },
		{ "uid", required_argument, NULL, O_UID },
		{ "root", required_argument, NULL, O_ROOT },
		{ "incarnation", required_argument, NULL, O_INC },
		{ "populate", no_argument, NULL, O_POP },
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = { .ranks = 8, .seconds = 8, .kill_ms = 400, .timeout_ms = 10000,
			  .slack_ms = 5000, .error_ppm = 10000, .short_ppm = 5000,
			  .delay_us = 10000, .rank = -1,
			  .seed = kvs_mix64(kvs_now_ns() ^ (uint64_t)getpid()) };
	unsigned long long v;
	int c;

	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		bool ok = true;

		switch (c) {
		case O_RANKS: ok = parse_u(optarg, 1, RANKS_MAX, &v); o.ranks = (int)v; break;
		case O_SECONDS: ok = parse_u(optarg, 1, 86400, &v); o.seconds = (unsigned)v; break;
		case O_SEED: ok = parse_u(optarg, 0, UINT64_MAX, &v); o.seed = v; break;
		case O_KILL: ok = parse_u(optarg, 1, 3600000, &v); o.kill_ms = (unsigned)v; break;
		case O_TIMEOUT: ok = parse_u(optarg, 1, 600000, &v); o.timeout_ms = (unsigned)v; break;
		case O_SLACK: ok = parse_u(optarg, 0, 600000, &v); o.slack_ms = (unsigned)v; break;
		case O_ERR: ok = parse_u(optarg, 0, 1000000, &v); o.error_ppm = (unsigned)v; break;
		case O_SHORT: ok = parse_u(optarg, 0, 1000000, &v); o.short_ppm = (unsigned)v; break;
		case O_DELAY: ok = parse_u(optarg, 0, 1000000, &v); o.delay_us = (unsigned)v; break;
		case O_MIXED: o.mixed = optarg; ok = access(optarg, X_OK) == 0; break;
		case O_PLANT: ok = parse_plant(optarg, &o.plant); break;
		case O_PLANT_MASK: ok = parse_u(optarg, 0, 0xff, &v); o.plant = (unsigned)v; break;
		case O_RANK: ok = parse_u(optarg, 0, RANKS_MAX - 1, &v); o.rank = (int)v; break;
		case O_UID: o.uid = optarg; break;
		case O_ROOT: o.root = optarg; break;
		case O_INC: ok = parse_u(optarg, 0, UINT32_MAX, &v); o.incarnation = (uint32_t)v; break;
		case O_POP: o.populate = true; break;
		default: ok = false; break;
		}
		if (!ok) {
			if (c == O_MIXED)
				fprintf(stderr, "chaos: --mixed %s: %s\n", optarg, strerror(errno));
			usage();
			return 2;
		}
	}
	if (optind != argc) {
		usage();
		return 2;
	}
	if (o.rank >= 0) {
		if (!o.uid || !o.root || o.rank >= o.ranks) {
			usage();
			return 2;
		}
		return rank_main(&o).code;
	}
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0) {
		fprintf(stderr, "chaos: readlink /proc/self/exe: %s\n", strerror(errno));
		return 1;
	}
	self[n] = '\0';
	return controller_main(&o, self);
}
