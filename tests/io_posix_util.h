/*
 * tests/io_posix_util.h — what the posix backend's tests (io_posix.c: engines,
 * faults, crash cleanup, held and failed writes; io_posix_file.c: what a block
 * file holds; io_posix_ahead.c: the open-ahead) share: a fresh root under /tmp, a config on one engine with a log
 * that keeps its error lines, block ids and the content pattern, a dump of a
 * whole block and a reap with a deadline, aligned buffers, whether io_uring is
 * usable here, a block's file path, and a wait for a read of it.
 */
#ifndef KVS_TESTS_IO_POSIX_UTIL_H
#define KVS_TESTS_IO_POSIX_UTIL_H

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <linux/io_uring.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>

#include "harness.h"

#define SHARD (64 * 1024)
#define SPB 4
#define SEED 0x5eed1234u
/* A block file's header (docs/io.md, "Block file format": 4096 bytes, or the
 * O_DIRECT alignment when larger; 512 or 4096 on the filesystems here). */
#define BLOCK_HDR 4096

static char g_root[256];
static char g_log[4096]; /* last error lines, for "the log names the field" */

static inline void log_cb(void *arg, int level, const char *msg)
{
	(void)arg;
	if (level <= KVS_LOG_WARN) {
		size_t n = strlen(g_log);
		snprintf(g_log + n, sizeof(g_log) - n, "%s\n", msg);
	}
}

static inline int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

static inline void root_fini(void)
{
	if (g_root[0])
		nftw(g_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	g_root[0] = '\0';
}

static inline int root_init(const char *tag)
{
	char id[128];

	root_fini();
	snprintf(g_root, sizeof(g_root), "/tmp/kvs-%s", kvs_test_unique_id(id, sizeof(id), tag));
	nftw(g_root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return mkdir(g_root, 0700) == 0 ? 0 : -errno;
}

static inline void cfg_posix(struct kvs_backend_config *cfg, uint32_t engine)
{
	kvs_backend_config_init(cfg);
	cfg->kind = KVS_BACKEND_POSIX;
	cfg->io_engine = engine;
	cfg->shard_bytes = SHARD;
	cfg->shards_per_block = SPB;
	cfg->queue_depth = 16;
	cfg->nroots = 1;
	cfg->roots[0] = g_root;
	cfg->log = log_cb;
	g_log[0] = '\0';
}

static inline struct kvs_block_id block_of(uint32_t n)
{
	struct kvs_block_id id;

	for (int i = 0; i < 16; i++)
		id.bytes[i] = (uint8_t)(n * 131u + (uint32_t)i * 7u + SEED);
	return id;
}

static inline unsigned char pattern(uint32_t blk, uint32_t shard, uint64_t off)
{
	return (unsigned char)((blk * 97u + shard * 31u + off * 13u + (off >> 9) + SEED) & 0xff);
}

static inline void fill_pattern(unsigned char *p, uint32_t blk, uint32_t shard, uint64_t off,
				uint64_t len)
{
	for (uint64_t i = 0; i < len; i++)
		p[i] = pattern(blk, shard, off + i);
}

/* Reap exactly one completion (deadline 10 s). */
static inline int wait_one(struct kvs_backend *b, struct kvs_backend_completion *c)
{
	uint64_t deadline = kvs_deadline_after(10 * KVS_NSEC_PER_SEC);

	while (kvs_now_ns() < deadline) {
		int n = kvs_backend_poll(b, c, 1, 100 * 1000000ull);
		if (n != 0)
			return n;
	}
	return -ETIMEDOUT;
}

/* Submit the write of shard s of block blk from buf; token 100 + s. */
static inline int submit_shard(struct kvs_backend *b, uint32_t blk, uint32_t s,
			       unsigned char *buf)
{
	struct kvs_backend_io io = { .block = block_of(blk), .shard = s, .buf = buf,
				     .len = SHARD, .token = 100 + s };

	return kvs_backend_submit_write(b, &io);
}

/* Dump block blk (its first nshards shards) from an aligned buffer, with the
 * bytes of block pat's pattern (pat != blk: another version of the block);
 * every completion == SHARD. */
static inline int dump_block_as(struct kvs_backend *b, uint32_t blk, uint32_t pat,
				unsigned char *buf, uint32_t nshards)
{
	for (uint32_t s = 0; s < nshards; s++) {
		int rc;

		fill_pattern(buf + (size_t)s * SHARD, pat, s, 0, SHARD);
		rc = submit_shard(b, blk, s, buf + (size_t)s * SHARD);
		if (rc < 0)
			return rc;
	}
	for (uint32_t s = 0; s < nshards; s++) {
		struct kvs_backend_completion c;
		int rc = wait_one(b, &c);
		if (rc < 0)
			return rc;
		if (c.result != SHARD || c.token < 100 || c.token >= 100 + nshards)
			return c.result < 0 ? (int)c.result : -EIO;
	}
	return 0;
}

/* Dump block blk (its first nshards shards) with its own pattern. */
static inline int dump_block(struct kvs_backend *b, uint32_t blk, unsigned char *buf,
			     uint32_t nshards)
{
	return dump_block_as(b, blk, blk, buf, nshards);
}

static inline void *alloc_aligned(size_t len)
{
	void *p = NULL;

	return posix_memalign(&p, 4096, len) == 0 ? p : NULL;
}

/* 1: io_uring engine usable; 0: plain build (no engine); -errno: io_uring refused
 * here (seccomp, kernel.io_uring_disabled) -- the uring cases then skip. */
static inline int uring_state(void)
{
	struct io_uring_params params;
	int fd;

	if (strcmp(KVS_TEST_VARIANT, "kernel") != 0)
		return 0;
	memset(&params, 0, sizeof(params));
	fd = (int)syscall(__NR_io_uring_setup, 1, &params);
	if (fd < 0)
		return -errno;
	close(fd);
	return 1;
}

#define SKIP_WITHOUT_URING()                                                            \
	do {                                                                            \
		int st_ = uring_state();                                                \
		if (st_ == 0)                                                           \
			KVS_SKIP("plain build: no io_uring engine");                    \
		if (st_ < 0)                                                            \
			KVS_SKIP("io_uring refused here: %s", kvs_strerror(st_));        \
	} while (0)

/* The path of block id's file under g_root (and its hex, when hex is not NULL). */
static inline void block_file(const struct kvs_block_id *id, char *path, size_t len,
			      char *hex)
{
	char h[33];

	for (int i = 0; i < 16; i++)
		snprintf(h + 2 * i, 3, "%02x", id->bytes[i]);
	snprintf(path, len, "%s/%.2s/%.2s/%s", g_root, h, h + 2, h);
	if (hex)
		memcpy(hex, h, sizeof(h));
}

/* An inotify descriptor watching block blk's file for reads (the open-ahead's
 * header read, where nothing else reads it: wait_opened). */
static inline int watch_reads(uint32_t blk)
{
	struct kvs_block_id id = block_of(blk);
	char path[400];
	int fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);

	if (fd < 0)
		return -errno;
	block_file(&id, path, sizeof(path), NULL);
	if (inotify_add_watch(fd, path, IN_ACCESS) < 0) {
		int rc = -errno;

		close(fd);
		return rc;
	}
	return fd;
}

/* The first line of /proc/self/task/<tid>/<what> into buf ("" if unreadable). */
static inline void task_line(const char *tid, const char *what, char *buf, int len)
{
	char path[300];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%s/%s", tid, what);
	buf[0] = '\0';
	if ((f = fopen(path, "re"))) {
		if (!fgets(buf, len, f))
			buf[0] = '\0';
		fclose(f);
	}
}

/* Whether every open-ahead thread of this process ("kvs-open") sleeps in a
 * futex: idle on its condition, its batch published, while the caller holds
 * none of its locks (/proc/self/task/<tid>/syscall: the syscall it is in). */
static inline bool openers_idle(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	bool idle = d != NULL;

	while (idle && (e = readdir(d))) {
		char comm[32], sys[64];

		if (e->d_name[0] == '.')
			continue;
		task_line(e->d_name, "comm", comm, sizeof(comm));
		if (strncmp(comm, "kvs-open", 8))
			continue;
		task_line(e->d_name, "syscall", sys, sizeof(sys));
		idle = atoi(sys) == SYS_futex && sys[0] >= '0' && sys[0] <= '9';
	}
	if (d)
		closedir(d);
	return idle;
}

/* Wait up to 10 s for the open-ahead of the watched file: its header read (an
 * inotify event), then the opener idle again, so that what it opened is
 * published.  0, or -ETIMEDOUT. */
static inline int wait_opened(int ifd)
{
	char ev[sizeof(struct inotify_event) + 256];
	struct pollfd pfd = { .fd = ifd, .events = POLLIN };
	uint64_t deadline = kvs_deadline_after(10 * KVS_NSEC_PER_SEC);

	if (poll(&pfd, 1, 10000) != 1 || read(ifd, ev, sizeof(ev)) <= 0)
		return -ETIMEDOUT;
	while (!openers_idle()) {
		if (kvs_now_ns() > deadline)
			return -ETIMEDOUT;
		usleep(1000); /* another thread's state: looked at, bounded */
	}
	return 0;
}

/* The temp files (".tmp." in the name) among the files of root's block tree
 * (root/xx/yy/FILE); the others are counted in *finals. */
static inline int count_temps(const char *root, int *finals)
{
	int temps = 0;
	DIR *d1 = opendir(root);
	struct dirent *e1;

	*finals = 0;
	while (d1 && (e1 = readdir(d1))) {
		char p1[512];
		DIR *d2;
		struct dirent *e2;

		if (e1->d_name[0] == '.')
			continue;
		snprintf(p1, sizeof(p1), "%s/%s", root, e1->d_name);
		d2 = opendir(p1);
		while (d2 && (e2 = readdir(d2))) {
			char p2[800];
			DIR *d3;
			struct dirent *e3;

			if (e2->d_name[0] == '.')
				continue;
			snprintf(p2, sizeof(p2), "%s/%s", p1, e2->d_name);
			d3 = opendir(p2);
			while (d3 && (e3 = readdir(d3))) {
				if (e3->d_name[0] == '.')
					continue;
				if (strstr(e3->d_name, ".tmp."))
					temps++;
				else
					(*finals)++;
			}
			if (d3)
				closedir(d3);
		}
		if (d2)
			closedir(d2);
	}
	if (d1)
		closedir(d1);
	return temps;
}

#endif
