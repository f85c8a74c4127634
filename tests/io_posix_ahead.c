/*
 * tests/io_posix_ahead.c — the posix backend's open-ahead (io/posix_ahead.c),
 * through both engines, with real files and the real opener thread: a hinted
 * block's file is opened and its header read before its first submit (the
 * file is unlinked after the opener read the header, and the block still
 * reads, byte-exact: opened_ahead_*); what was opened ahead of a block this
 * handle then dumps again is dropped (the new bytes are read: renamed_over_*);
 * a block absent at its hint and stored since by another handle reads
 * (the failure is not kept: stored_after_hint_*); a full table keeps the
 * nearest blocks and gives the skipped ones' places to new hints
 * (full_table_*); more hints than the table holds, blocks hinted and never read, and a FIFO at a hinted block's path
 * neither leak a descriptor nor hang, and every block still reads
 * (many_hints_*); a fault backend passes hints to its inner one
 * (fault_passes_hints); the argument checks of kvs_backend_hint_read
 * (hint_args).
 * That a header read ahead leaves no readahead past it is
 * tests/io_posix_file.c's header_readahead.
 *
 * The opener's progress is seen through inotify and /proc (watch_reads,
 * wait_opened): IN_ACCESS on a block file is its header's read (no other
 * reader touches the file), and the opener back asleep in a futex has
 * published it; a test waits for both with a deadline.  The issuer never
 * waits for the opener: a read submitted while the file is still being opened
 * ahead opens it again.
 *
 * Two CTest tests of this binary, as io_posix: io_posix_ahead (the pool
 * engine) and io_posix_ahead_uring (--uring).
 */
#include <unistd.h>

#include "io_posix_util.h"

#define NBLOCKS 6

/* Read every shard of block id into buf and compare with pattern(pat, ...):
 * 0, the first failing read's error, or -EILSEQ for other bytes. */
static int read_block(struct kvs_backend *b, const struct kvs_block_id *id, uint32_t pat,
		      unsigned char *buf)
{
	for (uint32_t s = 0; s < SPB; s++) {
		struct kvs_backend_io io = { .block = *id, .shard = s, .buf = buf, .len = SHARD,
					     .token = 500 + s };
		struct kvs_backend_completion c;
		int rc = kvs_backend_submit_read(b, &io);

		if (rc < 0)
			return rc;
		rc = wait_one(b, &c);
		if (rc != 1)
			return rc < 0 ? rc : -EPROTO;
		if (c.result != SHARD)
			return c.result < 0 ? (int)c.result : -EIO;
		for (uint32_t k = 0; k < SHARD; k++)
			if (buf[k] != pattern(pat, s, k))
				return -EILSEQ;
	}
	return 0;
}

/* A fresh root (tag) holding blocks 0..n-1, dumped by a handle of their own on
 * engine, closed after; *buf: a block's worth of aligned memory, the case's. */
static kvs_test_rc stored_root(const char *tag, uint32_t engine, uint32_t n,
			       unsigned char **buf)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *w = NULL;

	*buf = alloc_aligned((size_t)SPB * SHARD);
	KVS_CHECK(*buf);
	KVS_CHECK_OK(root_init(tag));
	cfg_posix(&cfg, engine);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &w));
	for (uint32_t i = 0; i < n; i++)
		KVS_CHECK_OK(dump_block(w, i, *buf, SPB));
	kvs_backend_close(w);
	return KVS_TEST_PASS;
}

/* The end of a case: b closed, buf freed, the root removed. */
static void case_end(struct kvs_backend *b, unsigned char *buf)
{
	kvs_backend_close(b);
	free(buf);
	root_fini();
}

/* Hint the n blocks of ids and wait until block last's file is opened ahead
 * (wait_opened): 0, or -errno. */
static int hint_opened(struct kvs_backend *b, const struct kvs_block_id *ids, size_t n,
		       uint32_t last)
{
	int ifd = watch_reads(last), rc;

	if (ifd < 0)
		return ifd;
	rc = kvs_backend_hint_read(b, ids, n);
	if (rc == 0)
		rc = wait_opened(ifd);
	close(ifd);
	return rc;
}

/* Remove block blk's file: 0 or -errno. */
static int unlink_block(uint32_t blk)
{
	struct kvs_block_id id = block_of(blk);
	char path[400];

	block_file(&id, path, sizeof(path), NULL);
	return unlink(path) == 0 ? 0 : -errno;
}

/* Descriptors this process has open (/proc/self/fd, less the directory's own). */
static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d)))
		n += e->d_name[0] != '.';
	if (d)
		closedir(d);
	return n - 1;
}

/* ------------------------------------------------------------------ cases */

/*
 * Block 3 hinted; once the opener has read its header, its file is unlinked:
 * the block still reads byte-exact, from the descriptor opened ahead.  Block 4,
 * unlinked without a hint, is -ENOENT at submit: the control (a backend that
 * ignored the hint would fail both the wait and the read).
 */
static kvs_test_rc opened_ahead(uint32_t engine)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	struct kvs_block_id three = block_of(3), four = block_of(4);
	unsigned char *buf = NULL;

	KVS_TRY(stored_root("ahead", engine, NBLOCKS, &buf));
	cfg_posix(&cfg, engine);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));

	KVS_CHECK_OK(hint_opened(b, &three, 1, 3));
	KVS_CHECK_OK(unlink_block(3));
	KVS_CHECK_OK(unlink_block(4));
	KVS_CHECK_OK(read_block(b, &three, 3, buf));
	KVS_CHECK_ERR(read_block(b, &four, 4, buf), -ENOENT);
	case_end(b, buf);
	return KVS_TEST_PASS;
}

/*
 * Block 5 opened ahead, then dumped again by the same handle with other bytes:
 * the read gets the new file's bytes, not the descriptor opened ahead of the
 * old one (its rename drops it, as it drops the fd cache's).
 */
static kvs_test_rc renamed_over(uint32_t engine)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	struct kvs_block_id five = block_of(5);
	unsigned char *buf = NULL;

	KVS_TRY(stored_root("ahead-re", engine, NBLOCKS, &buf));
	cfg_posix(&cfg, engine);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));

	KVS_CHECK_OK(hint_opened(b, &five, 1, 5));
	KVS_CHECK_OK(dump_block_as(b, 5, 55, buf, SPB));
	KVS_CHECK_OK(read_block(b, &five, 55, buf));
	case_end(b, buf);
	return KVS_TEST_PASS;
}

/*
 * Block 9, absent, hinted before block 2 (the opener takes them in hint
 * order, so block 9's open has failed once block 2's header is read); then
 * another handle stores block 9: it reads through the first handle, which
 * opens it again rather than keep the failure.
 */
static kvs_test_rc stored_after_hint(uint32_t engine)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL, *w = NULL;
	struct kvs_block_id ids[2] = { block_of(9), block_of(2) };
	unsigned char *buf = NULL;

	KVS_TRY(stored_root("ahead-st", engine, NBLOCKS, &buf));
	cfg_posix(&cfg, engine);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));

	KVS_CHECK_OK(hint_opened(b, ids, 2, 2));
	KVS_CHECK_OK(kvs_backend_open(&cfg, &w));
	KVS_CHECK_OK(dump_block(w, 9, buf, SPB));
	kvs_backend_close(w);
	KVS_CHECK_OK(read_block(b, &ids[0], 9, buf));
	KVS_CHECK_OK(read_block(b, &ids[1], 2, buf));
	case_end(b, buf);
	return KVS_TEST_PASS;
}

/*
 * A full table keeps the nearest blocks: 16 hinted (the table's size) and
 * opened, a 17th hint is dropped, not the first (block 0, unlinked, still
 * reads from its descriptor); once block 15 was read, blocks 0-14 were
 * skipped, and the next hints take their places (block 20 is opened ahead).
 */
#define TABLE 16

static kvs_test_rc full_table(uint32_t engine)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	struct kvs_block_id ids[TABLE + 5];
	unsigned char *buf = NULL;

	KVS_TRY(stored_root("ahead-full", engine, TABLE + 5, &buf));
	for (uint32_t i = 0; i < TABLE + 5; i++)
		ids[i] = block_of(i);
	cfg_posix(&cfg, engine);
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	/* the last of the batch opened: all 16 are */
	KVS_CHECK_OK(hint_opened(b, ids, TABLE, TABLE - 1));
	KVS_CHECK_OK(kvs_backend_hint_read(b, &ids[TABLE], 1));
	KVS_CHECK_OK(unlink_block(0));
	KVS_CHECK_OK(read_block(b, &ids[0], 0, buf));

	KVS_CHECK_OK(read_block(b, &ids[TABLE - 1], TABLE - 1, buf));
	KVS_CHECK_OK(hint_opened(b, &ids[TABLE + 1], 4, TABLE + 4));
	KVS_CHECK_OK(unlink_block(TABLE + 4));
	KVS_CHECK_OK(read_block(b, &ids[TABLE + 4], TABLE + 4, buf));
	case_end(b, buf);
	return KVS_TEST_PASS;
}

/*
 * Three times the table's hints in one call and one by one, some hinted twice,
 * a FIFO at a hinted block's path: every stored block reads byte-exact, the
 * FIFO's block is -ENOENT (the opener's O_NONBLOCK open did not hang on it), a
 * handle closed with blocks opened ahead and never read closes them, and no
 * descriptor outlives the handles.
 */
#define MANY 48

static kvs_test_rc many_hints(uint32_t engine)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	struct kvs_block_id ids[MANY + 1];
	struct kvs_block_id fifo = block_of(MANY);
	unsigned char *buf = NULL;
	char path[400], hex[33];
	int fds_before;

	KVS_TRY(stored_root("ahead-many", engine, MANY, &buf));
	block_file(&fifo, path, sizeof(path), hex);
	for (int level = 1; level <= 2; level++) { /* its fan-out directories */
		char dir[300];

		snprintf(dir, sizeof(dir), "%s/%.2s%s%.*s", g_root, hex, level == 2 ? "/" : "",
			 level == 2 ? 2 : 0, hex + 2);
		KVS_CHECK(mkdir(dir, 0700) == 0 || errno == EEXIST);
	}
	KVS_CHECK(mkfifo(path, 0600) == 0);
	for (uint32_t i = 0; i <= MANY; i++)
		ids[i] = block_of(i);
	cfg_posix(&cfg, engine);
	fds_before = open_fds();

	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK_OK(kvs_backend_hint_read(b, ids, MANY + 1));
	for (uint32_t i = 0; i < MANY; i++) {
		KVS_CHECK_OK(kvs_backend_hint_read(b, &ids[MANY - i], 1));
		KVS_CHECK_OK(kvs_backend_hint_read(b, &ids[i], 2));
		int rc = read_block(b, &ids[i], i, buf);

		if (rc)
			KVS_FAILF("block %u: %s", i, kvs_strerror(rc));
	}
	KVS_CHECK_ERR(read_block(b, &fifo, MANY, buf), -ENOENT);
	kvs_backend_close(b);

	/* opened ahead, never read: closed by the handle's close */
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK_OK(kvs_backend_hint_read(b, ids, MANY + 1));
	kvs_backend_close(b);
	KVS_CHECK_EQ(open_fds(), fds_before);

	free(buf);
	root_fini();
	return KVS_TEST_PASS;
}

/* A fault backend passes hints to its inner one: block 3, hinted through it,
 * is opened ahead by the inner posix backend (its file unlinked once the
 * header was read, it still reads). */
static kvs_test_rc test_fault_passes_hints(void)
{
	struct kvs_backend_config cfg, inner;
	struct kvs_backend *b = NULL;
	struct kvs_block_id three = block_of(3);
	unsigned char *buf = NULL;

	KVS_TRY(stored_root("ahead-fault", KVS_IO_ENGINE_POOL, NBLOCKS, &buf));
	cfg_posix(&inner, KVS_IO_ENGINE_POOL);
	cfg = inner;
	cfg.kind = KVS_BACKEND_FAULT;
	cfg.fault_inner = &inner; /* no faults: a pass-through */
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK_OK(hint_opened(b, &three, 1, 3));
	KVS_CHECK_OK(unlink_block(3));
	KVS_CHECK_OK(read_block(b, &three, 3, buf));
	case_end(b, buf);
	return KVS_TEST_PASS;
}

/* kvs_backend_hint_read's arguments; a backend without the op takes hints as
 * advice (0). */
static kvs_test_rc test_hint_args(void)
{
	struct kvs_backend_config cfg;
	struct kvs_backend *b = NULL;
	struct kvs_block_id id = block_of(1);

	KVS_CHECK_ERR(kvs_backend_hint_read(NULL, &id, 1), -EINVAL);
	kvs_backend_config_init(&cfg);
	cfg.kind = KVS_BACKEND_NONE;
	KVS_CHECK_OK(kvs_backend_open(&cfg, &b));
	KVS_CHECK_ERR(kvs_backend_hint_read(b, NULL, 1), -EINVAL);
	KVS_CHECK_EQ(kvs_backend_hint_read(b, NULL, 0), 0);
	KVS_CHECK_EQ(kvs_backend_hint_read(b, &id, 1), 0);
	kvs_backend_close(b);
	return KVS_TEST_PASS;
}

#define ENGINE_CASES(name)                                                              \
	static kvs_test_rc test_##name##_pool(void)                                     \
	{                                                                               \
		return name(KVS_IO_ENGINE_POOL);                                        \
	}                                                                               \
	static kvs_test_rc test_##name##_uring(void)                                    \
	{                                                                               \
		SKIP_WITHOUT_URING();                                                   \
		return name(KVS_IO_ENGINE_URING);                                       \
	}
ENGINE_CASES(opened_ahead)
ENGINE_CASES(renamed_over)
ENGINE_CASES(stored_after_hint)
ENGINE_CASES(full_table)
ENGINE_CASES(many_hints)

static const struct kvs_test_case cases[] = {
	{ "opened_ahead_pool", test_opened_ahead_pool },
	{ "renamed_over_pool", test_renamed_over_pool },
	{ "stored_after_hint_pool", test_stored_after_hint_pool },
	{ "full_table_pool", test_full_table_pool },
	{ "many_hints_pool", test_many_hints_pool },
	{ "fault_passes_hints", test_fault_passes_hints },
	{ "hint_args", test_hint_args },
};

/* `io_posix_ahead --uring [case...]` (CTest: io_posix_ahead_uring). */
static const struct kvs_test_case uring_cases[] = {
	{ "opened_ahead_uring", test_opened_ahead_uring },
	{ "renamed_over_uring", test_renamed_over_uring },
	{ "stored_after_hint_uring", test_stored_after_hint_uring },
	{ "full_table_uring", test_full_table_uring },
	{ "many_hints_uring", test_many_hints_uring },
};

int main(int argc, char **argv)
{
	return kvs_test_run_groups(argc, argv, "--uring", cases, KVS_ARRAY_LEN(cases), uring_cases,
				   KVS_ARRAY_LEN(uring_cases), NULL, 0);
}
