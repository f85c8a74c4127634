/*
 * tests/io_uring_fallback.c — io_uring refused -> the pool, reported.
 *
 * A forked child installs a seccomp filter (PR_SET_NO_NEW_PRIVS +
 * SECCOMP_MODE_FILTER, a four-instruction BPF program) that fails
 * io_uring_setup with EPERM (as container runtimes do) or ENOSYS, then opens the
 * posix backend: io_engine=auto must fall back to the thread pool, say so in
 * kvs_backend_info (FALLBACK, fallback_err), have a wait descriptor (the
 * pool's) and still move bytes correctly;
 * io_engine=uring must return the refusal.  kernel.io_uring_disabled is not
 * toggled here: it is machine-wide and would break io_uring tests running
 * concurrently.  Kernel variant only (the plain build has no io_uring engine).
 */
#include <fcntl.h>
#include <ftw.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/stat.h>

#include "harness.h"

#define SHARD 4096

static char g_root[256];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

static int deny_io_uring_setup(int err)
{
	struct sock_filter filter[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (uint32_t)err),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = KVS_ARRAY_LEN(filter), .filter = filter };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -errno;
	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0)
		return -errno;
	return 0;
}

static void cfg_posix(struct kvs_backend_config *cfg, uint32_t engine)
{
	kvs_backend_config_init(cfg);
	cfg->io_engine = engine;
	cfg->shard_bytes = SHARD;
	cfg->shards_per_block = 1;
	cfg->nroots = 1;
	cfg->roots[0] = g_root;
}

/* The refused child's exit status when it cannot install the filter. */
#define NO_FILTER 10

/* Child: runs under the filter; passes when every expectation holds. */
static kvs_test_rc refused_child(void *arg)
{
	int err = (int)(intptr_t)arg;
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	struct kvs_backend_info info;
	struct kvs_backend_completion c;
	struct kvs_block_id id = { { 1, 2, 3 } };
	char wbuf[SHARD], rbuf[SHARD];

	if (deny_io_uring_setup(err) < 0)
		return KVS_TEST_EXIT(NO_FILTER);
	cfg_posix(&cfg, KVS_IO_ENGINE_URING);
	KVS_CHECK_ERR(kvs_backend_open(&cfg, &b), -err);
	KVS_CHECK(b == NULL);
	cfg_posix(&cfg, KVS_IO_ENGINE_AUTO);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK_OK(kvs_backend_info(b, &info));
	KVS_CHECK_EQ(info.io_engine, KVS_IO_ENGINE_POOL);
	KVS_CHECK(info.flags & KVS_BACKEND_INFO_FALLBACK);
	KVS_CHECK_ERR(info.fallback_err, -err);
	KVS_CHECK_OK(kvs_backend_wait_fd(b)); /* the pool's: the fallback has one too */
	memset(wbuf, 0x5a, sizeof(wbuf));
	struct kvs_backend_io io = { .block = id, .buf = wbuf, .len = SHARD, .token = 1 };
	KVS_CHECK_OK(kvs_backend_submit_write(b, &io));
	KVS_CHECK_EQ(kvs_backend_poll(b, &c, 1, 10 * KVS_NSEC_PER_SEC), 1);
	KVS_CHECK_EQ(c.result, SHARD);
	io.buf = rbuf;
	KVS_CHECK_OK(kvs_backend_submit_read(b, &io));
	KVS_CHECK_EQ(kvs_backend_poll(b, &c, 1, 10 * KVS_NSEC_PER_SEC), 1);
	KVS_CHECK_EQ(c.result, SHARD);
	KVS_CHECK(memcmp(wbuf, rbuf, SHARD) == 0);
	kvs_backend_close(b);
	return KVS_TEST_PASS;
}

static kvs_test_rc run_refused(int err)
{
	char id[128];
	int rc;

	snprintf(g_root, sizeof(g_root), "/tmp/kvs-%s", kvs_test_unique_id(id, sizeof(id), "fb"));
	KVS_CHECK_EQ(mkdir(g_root, 0700), 0);
	pid_t pid = kvs_test_fork(refused_child, (void *)(intptr_t)err);
	KVS_CHECK(pid > 0);
	rc = kvs_test_reap(pid, 20000);
	nftw(g_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	if (rc == NO_FILTER)
		KVS_SKIP("cannot install a seccomp filter here");
	KVS_CHECK_EQ(rc, 0);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_refused_eperm(void)
{
	return run_refused(EPERM);
}

static kvs_test_rc test_refused_enosys(void)
{
	return run_refused(ENOSYS);
}

static kvs_test_rc test_refused_eacces(void)
{
	return run_refused(EACCES);
}

/* Without the filter, auto picks io_uring and reports no fallback. */
static kvs_test_rc test_not_refused(void)
{
	char id[128];
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	struct kvs_backend_info info;

	snprintf(g_root, sizeof(g_root), "/tmp/kvs-%s", kvs_test_unique_id(id, sizeof(id), "nf"));
	KVS_CHECK_EQ(mkdir(g_root, 0700), 0);
	cfg_posix(&cfg, KVS_IO_ENGINE_AUTO);
	int rc = kvs_backend_open(&cfg, &b);
	if (rc == -EPERM || rc == -ENOSYS || rc == -EACCES) {
		rmdir(g_root);
		KVS_SKIP("io_uring refused on this machine: %s", kvs_strerror(rc));
	}
	KVS_CHECK_OK(rc);
	KVS_CHECK_OK(kvs_backend_info(b, &info));
	if (info.flags & KVS_BACKEND_INFO_FALLBACK) {
		kvs_backend_close(b);
		rmdir(g_root);
		KVS_SKIP("io_uring refused on this machine: %s", kvs_strerror(info.fallback_err));
	}
	KVS_CHECK_EQ(info.io_engine, KVS_IO_ENGINE_URING);
	KVS_CHECK_EQ(info.fallback_err, 0);
	kvs_backend_close(b);
	nftw(g_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "refused_eperm", test_refused_eperm },
	{ "refused_enosys", test_refused_enosys },
	{ "refused_eacces", test_refused_eacces },
	{ "not_refused", test_not_refused },
};

KVS_TEST_MAIN(cases)
