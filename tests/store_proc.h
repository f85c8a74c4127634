/*
 * tests/store_proc.h — rank processes for the multi-process store tests
 * (store_mp, store_dump, store_tasks): children started forked or exec'd
 * (`--child <name>`, so the segments sit at other addresses) through one entry,
 * pipe barriers between a parent and its children (a byte per child "ready", a
 * byte per child "go": never sleeps), reaping with deadlines, and the parent's
 * thread-free watcher config.
 */
#ifndef KVS_TESTS_STORE_PROC_H
#define KVS_TESTS_STORE_PROC_H

#include <sched.h>
#include <signal.h>
#include <stdlib.h>

#include "store_util.h"

#define REAP_MS 120000
#define BARRIER_MS 60000

/* ---- starting children: forked or exec'd, same entry ---- */

typedef kvs_test_rc (*child_fn)(int argc, char **argv);

struct fork_args {
	child_fn fn;
	int argc;
	char *argv[16];
	char buf[16][128];
};

static inline kvs_test_rc fork_entry(void *p)
{
	struct fork_args *a = p;

	return a->fn(a->argc, a->argv);
}

/* Start child `name` (entry fn) with args (NULL-terminated): exec'd or forked. */
static inline pid_t start_child(bool exec, const char *name, child_fn fn, const char *const args[],
			 struct fork_args *fa)
{
	if (exec)
		return kvs_test_spawn(name, args);
	memset(fa, 0, sizeof(*fa));
	fa->fn = fn;
	for (int i = 0; args[i] && i < 15; i++) {
		snprintf(fa->buf[i], sizeof(fa->buf[i]), "%s", args[i]);
		fa->argv[i] = fa->buf[i];
		fa->argc = i + 1;
	}
	return kvs_test_fork(fork_entry, fa);
}

/* The pipes of a barrier: children write to ready[1], read from go[0]. */
struct barrier {
	int ready[2], go[2];
	char ready_s[16], go_s[16];
};

static inline kvs_test_rc barrier_init(struct barrier *b)
{
	if (pipe(b->ready) || pipe(b->go))
		KVS_FAILF("pipe: %s", strerror(errno));
	snprintf(b->ready_s, sizeof(b->ready_s), "%d", b->ready[1]);
	snprintf(b->go_s, sizeof(b->go_s), "%d", b->go[0]);
	return KVS_TEST_PASS;
}

static inline void barrier_fini(struct barrier *b)
{
	close(b->ready[0]);
	close(b->ready[1]);
	close(b->go[0]);
	close(b->go[1]);
}

/* Parent: n children ready (one byte each), then let all n go. */
static inline kvs_test_rc barrier_release(struct barrier *b, int n)
{
	char buf[64];

	KVS_CHECK(n <= (int)sizeof(buf));
	KVS_TRY(st_read_full(b->ready[0], buf, (size_t)n, BARRIER_MS));
	memset(buf, 'g', sizeof(buf));
	KVS_TRY(st_write_full(b->go[1], buf, (size_t)n));
	return KVS_TEST_PASS;
}

/* Child: say ready, wait for go. */
static inline kvs_test_rc barrier_child(int ready_fd, int go_fd)
{
	char ch = 'r';

	KVS_TRY(st_write_full(ready_fd, &ch, 1));
	KVS_TRY(st_read_full(go_fd, &ch, 1, BARRIER_MS));
	return KVS_TEST_PASS;
}

/* Reap every child; each must exit 0. */
static inline kvs_test_rc reap_all(const pid_t *pids, int n, int timeout_ms)
{
	int bad = 0;

	for (int i = 0; i < n; i++) {
		int rc = kvs_test_reap(pids[i], timeout_ms);

		if (rc != 0) {
			fprintf(stderr, "child %d (pid %d) exited %d\n", i, (int)pids[i], rc);
			bad++;
		}
	}
	KVS_CHECK_EQ(bad, 0);
	return KVS_TEST_PASS;
}

static inline void kill_all(const pid_t *pids, int n)
{
	for (int i = 0; i < n; i++)
		if (pids[i] > 0)
			kill(pids[i], SIGKILL);
	for (int i = 0; i < n; i++)
		if (pids[i] > 0)
			(void)kvs_test_reap(pids[i], 10000);
}

/* Start a child and reap it: it must exit 0 within REAP_MS. */
static inline kvs_test_rc run_child(bool exec, const char *name, child_fn fn, const char *const args[])
{
	struct fork_args fa;
	pid_t pid = start_child(exec, name, fn, args, &fa);
	int rc;

	KVS_CHECK(pid > 0);
	rc = kvs_test_reap(pid, REAP_MS);
	if (rc != 0)
		KVS_FAILF("child %s (pid %d) exited %d", name, (int)pid, rc);
	return KVS_TEST_PASS;
}

/* A parent's watcher: the cache's geometry, no backend (no threads). */
static inline void watcher_of(struct kvs_store_config *cfg)
{
	cfg->cache.device_id = -1;
	cfg->backend.kind = KVS_BACKEND_NONE;
	cfg->backend.nroots = 0;
	cfg->backend.roots[0] = NULL;
}

static inline long arg_l(const char *s)
{
	return strtol(s, NULL, 10);
}

#endif
