/*
 * tests/io_posix_crash.c — the posix backend's crash cleanup (pool engine):
 * kill -9 of an exec'd writer in the middle of a dump (the block stays absent;
 * the next open removes the temp file; temp files of live writers are kept), a
 * close that discards a partial block, and two exec'd processes dumping the
 * same blocks at once (with and without fsync).  The rest of the backend is
 * tests/io_posix.c's.
 */
#include <sys/wait.h>

#include "io_posix_util.h"

/* ------------------------------------------------------------ crash cleanup */

/* Exec'd writer: dump SPB - 1 shards of block 7, report on fd argv[1], hang. */
static kvs_test_rc child_writer(int argc, char **argv)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	unsigned char *buf = alloc_aligned((size_t)SPB * SHARD);
	int fd;

	if (argc < 2)
		KVS_FAILF("usage: --child writer <fd> <root>");
	KVS_CHECK(buf != NULL);
	fd = atoi(argv[0]);
	snprintf(g_root, sizeof(g_root), "%s", argv[1]);
	cfg_posix(&cfg, KVS_IO_ENGINE_AUTO);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK_OK(dump_block(b, 7, buf, SPB - 1));
	KVS_CHECK_EQ(write(fd, "w", 1), 1);
	/* Wait to be killed; bounded so a lost parent cannot leave us forever. */
	for (int i = 0; i < 300; i++)
		poll(NULL, 0, 100);
	KVS_FAILF("writer: not killed within 30 s");
}

static kvs_test_rc test_kill9_mid_dump(void)
{
	int pfd[2];
	char fdarg[16], c;
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	struct kvs_block_id id = block_of(7);
	int finals;

	KVS_CHECK_OK(root_init("kill9"));
	KVS_CHECK_OK(pipe(pfd));
	snprintf(fdarg, sizeof(fdarg), "%d", pfd[1]);
	const char *args[] = { fdarg, g_root, NULL };
	pid_t pid = kvs_test_spawn("writer", args);
	KVS_CHECK(pid > 0);
	close(pfd[1]);
	struct pollfd p = { .fd = pfd[0], .events = POLLIN };
	KVS_CHECK_EQ(poll(&p, 1, 20000), 1);
	KVS_CHECK_EQ(read(pfd[0], &c, 1), 1);
	close(pfd[0]);

	/* While the writer lives, another open keeps its temp file. */
	cfg_posix(&cfg, KVS_IO_ENGINE_AUTO);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK_EQ(count_temps(g_root, &finals), 1);
	KVS_CHECK_EQ(kvs_backend_lookup(b, &id), 0);
	kvs_backend_close(b);

	KVS_CHECK_EQ(kill(pid, SIGKILL), 0);
	KVS_CHECK_EQ(kvs_test_reap(pid, 10000), 128 + SIGKILL);
	KVS_CHECK_EQ(count_temps(g_root, &finals), 1);
	KVS_CHECK_EQ(finals, 0);

	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK_EQ(kvs_backend_lookup(b, &id), 0);
	KVS_CHECK_EQ(count_temps(g_root, &finals), 0);
	{
		char buf[64];
		struct kvs_backend_io io = { .block = id, .shard = 0, .buf = buf, .len = 64 };
		KVS_CHECK_ERR(kvs_backend_submit_read(b, &io), -ENOENT);
	}
	kvs_backend_close(b);
	root_fini();
	return KVS_TEST_PASS;
}

static kvs_test_rc exit_at_once(void *arg)
{
	(void)arg;
	return KVS_TEST_PASS;
}

/* The cleanup rules on hand-made temp files: this host's dead writer -> removed;
 * another host's (pid meaningless here) -> kept unless older than 24 h; a live
 * writer -> kept. */
static kvs_test_rc test_temp_rules(void)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	char host[256] = "", tag[9], other[9], dir[400], path[600];
	uint32_t h = 2166136261u;
	struct kvs_block_id id = block_of(9);
	char hex[33];
	int finals;

	gethostname(host, sizeof(host) - 1);
	for (const char *c = host; *c; c++)
		h = (h ^ (unsigned char)*c) * 16777619u;
	snprintf(tag, sizeof(tag), "%08x", h);
	snprintf(other, sizeof(other), "%08x", h ^ 1u);
	pid_t dead = kvs_test_fork(exit_at_once, NULL);
	KVS_CHECK(dead > 0);
	KVS_CHECK_EQ(kvs_test_reap(dead, 10000), 0);

	KVS_CHECK_OK(root_init("temps"));
	for (int i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", id.bytes[i]);
	snprintf(dir, sizeof(dir), "%s/%.2s", g_root, hex);
	KVS_CHECK_EQ(mkdir(dir, 0700), 0);
	snprintf(dir, sizeof(dir), "%s/%.2s/%.2s", g_root, hex, hex + 2);
	KVS_CHECK_EQ(mkdir(dir, 0700), 0);
	const struct { int pid; const char *tag; bool old; bool kept; } files[] = {
		{ dead, tag, false, false },
		{ dead, other, false, true },
		{ dead, other, true, false },
		{ getpid(), tag, false, true },
	};
	for (size_t i = 0; i < KVS_ARRAY_LEN(files); i++) {
		snprintf(path, sizeof(path), "%s/%s.tmp.%d.%s%08zx", dir, hex, files[i].pid,
			 files[i].tag, i);
		int fd = open(path, O_CREAT | O_WRONLY, 0600);
		KVS_CHECK(fd >= 0);
		close(fd);
		if (files[i].old) {
			struct timespec ts[2] = { { time(NULL) - 25 * 3600, 0 },
						  { time(NULL) - 25 * 3600, 0 } };
			KVS_CHECK_EQ(utimensat(AT_FDCWD, path, ts, 0), 0);
		}
	}
	cfg_posix(&cfg, KVS_IO_ENGINE_AUTO);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	kvs_backend_close(b);
	for (size_t i = 0; i < KVS_ARRAY_LEN(files); i++) {
		snprintf(path, sizeof(path), "%s/%s.tmp.%d.%s%08zx", dir, hex, files[i].pid,
			 files[i].tag, i);
		if ((access(path, F_OK) == 0) != files[i].kept)
			KVS_FAILF("%s: %s, expected %s", path,
				  access(path, F_OK) == 0 ? "kept" : "removed",
				  files[i].kept ? "kept" : "removed");
	}
	KVS_CHECK_EQ(count_temps(g_root, &finals), 2);
	root_fini();
	return KVS_TEST_PASS;
}

/* Closing with a half-written dump discards it (temp file removed, block absent). */
static kvs_test_rc test_close_discards_partial(void)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	unsigned char *buf = alloc_aligned((size_t)SPB * SHARD);
	struct kvs_block_id id = block_of(8);
	int finals;

	KVS_CHECK(buf);
	KVS_CHECK_OK(root_init("partial"));
	cfg_posix(&cfg, KVS_IO_ENGINE_AUTO);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK_OK(dump_block(b, 8, buf, 2));
	KVS_CHECK_EQ(count_temps(g_root, &finals), 1);
	kvs_backend_close(b);
	KVS_CHECK_EQ(count_temps(g_root, &finals), 0);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK_EQ(kvs_backend_lookup(b, &id), 0);
	kvs_backend_close(b);
	free(buf);
	root_fini();
	return KVS_TEST_PASS;
}

/* Exec'd dumper: blocks 200..209 in full; argv: root, flags. */
static kvs_test_rc child_dumper(int argc, char **argv)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	unsigned char *buf = alloc_aligned((size_t)SPB * SHARD);
	int rc = 0;

	if (argc < 2)
		KVS_FAILF("usage: --child dumper <root> <flags>");
	KVS_CHECK(buf != NULL);
	snprintf(g_root, sizeof(g_root), "%s", argv[0]);
	cfg_posix(&cfg, KVS_IO_ENGINE_AUTO);
	cfg.flags = (uint32_t)strtoul(argv[1], NULL, 0);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	for (uint32_t blk = 200; blk < 210 && rc == 0; blk++)
		rc = dump_block(b, blk, buf, SPB);
	kvs_backend_close(b);
	free(buf);
	KVS_CHECK_OK(rc);
	return KVS_TEST_PASS;
}

/* Two processes dump the same blocks at once (two ranks, or two nodes on a shared
 * mount): every block ends complete and correct, no temp file is left. */
static kvs_test_rc test_concurrent_dumps(void)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	unsigned char *buf = alloc_aligned(SHARD);
	char nofsync[16];
	int finals;

	KVS_CHECK(buf);
	KVS_CHECK_OK(root_init("conc"));
	snprintf(nofsync, sizeof(nofsync), "%u", KVS_BACKEND_F_NO_FSYNC);
	const char *a1[] = { g_root, "0", NULL };
	const char *a2[] = { g_root, nofsync, NULL };
	pid_t p1 = kvs_test_spawn("dumper", a1), p2 = kvs_test_spawn("dumper", a2);
	KVS_CHECK(p1 > 0 && p2 > 0);
	KVS_CHECK_EQ(kvs_test_reap(p1, 20000), 0);
	KVS_CHECK_EQ(kvs_test_reap(p2, 20000), 0);
	KVS_CHECK_EQ(count_temps(g_root, &finals), 0);
	KVS_CHECK_EQ(finals, 10);
	cfg_posix(&cfg, KVS_IO_ENGINE_AUTO);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	for (uint32_t blk = 200; blk < 210; blk++) {
		struct kvs_block_id id = block_of(blk);
		KVS_CHECK_EQ(kvs_backend_lookup(b, &id), 1);
		for (uint32_t s = 0; s < SPB; s++) {
			struct kvs_backend_io io = { .block = id, .shard = s, .buf = buf, .len = SHARD };
			struct kvs_backend_completion c;
			KVS_CHECK_OK(kvs_backend_submit_read(b, &io));
			KVS_CHECK_EQ(wait_one(b, &c), 1);
			KVS_CHECK_EQ(c.result, SHARD);
			for (uint64_t i = 0; i < SHARD; i += 511)
				KVS_CHECK_EQ(buf[i], pattern(blk, s, i));
		}
	}
	kvs_backend_close(b);
	free(buf);
	root_fini();
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "kill9_mid_dump", test_kill9_mid_dump },
	{ "close_discards_partial", test_close_discards_partial },
	{ "temp_rules", test_temp_rules },
	{ "concurrent_dumps", test_concurrent_dumps },
};

static const struct kvs_test_child children[] = {
	{ "writer", child_writer },
	{ "dumper", child_dumper },
};

KVS_TEST_MAIN_WITH_CHILDREN(cases, children)
