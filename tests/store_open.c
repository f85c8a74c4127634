/*
 * tests/store_open.c — kvs_store_open fails fast and safe, in the user's words.
 *
 * Everything that can be checked is checked before the data plane exists: a
 * capacity the node cannot hold (larger than the machine) is refused with the
 * numbers and the key, nothing allocated, no segment left; so are a missing or
 * unwritable backend root, no roots at all and a CUDA engine without a device;
 * copy_engine=auto falls back to the host engine, said once.  The open that fails
 * is timed and the time printed (timing is not asserted: shared machines), and
 * what it left behind (files in /dev/shm) is asserted instead.  The memory
 * cgroup limit is tried for real: a child in a 256 MiB cgroup asks for 1 GiB
 * (without the guard the kernel's OOM killer ends it, inside its cgroup only),
 * and a rank attaching to a cache that filled most of its cgroup is not refused
 * (the guard is for caches that do not exist yet).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "harness.h"
#include "kvshare.h"

/* Every line the open logs from the opening thread, joined (a C caller's view
 * of what it said); lines of the store's own threads (its registration, after
 * the open) are not kept: the test reads lines while they run. */
static char lines[8192];
static pthread_t opener;                       /* under log_mu */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;

static void keep_log(void *arg, int level, const char *msg)
{
	size_t n;

	(void)arg;
	pthread_mutex_lock(&log_mu);
	if (pthread_equal(pthread_self(), opener)) {
		n = strlen(lines);
		snprintf(lines + n, sizeof(lines) - n, "[%d] %s\n", level, msg);
	}
	pthread_mutex_unlock(&log_mu);
}

/* Files in /dev/shm whose name starts "kvshare.<uid>.", counted; removed too
 * when unlink (what a killed rank left). */
static int shm_files(const char *uid, bool unlink_them)
{
	char want[96];
	struct dirent *e;
	DIR *d = opendir("/dev/shm");
	int n = 0;

	snprintf(want, sizeof(want), "kvshare.%s.", uid);
	if (!d)
		return -errno;
	while ((e = readdir(d)))
		if (strncmp(e->d_name, want, strlen(want)) == 0) {
			n++;
			if (unlink_them)
				unlinkat(dirfd(d), e->d_name, 0);
		}
	closedir(d);
	return n;
}

/* cfg from kv, its log kept in lines (emptied) from this thread; a parse
 * error is the only line. */
static int parse_kv(const char *kv, struct kvs_store_config *cfg)
{
	char err[256];
	int rc;

	pthread_mutex_lock(&log_mu);
	lines[0] = '\0';
	opener = pthread_self();
	pthread_mutex_unlock(&log_mu);
	kvs_store_config_init(cfg);
	cfg->log = keep_log;
	rc = kvs_store_config_parse(cfg, kv, err, sizeof(err));
	if (rc)
		snprintf(lines, sizeof(lines), "parse: %s\n", err);
	return rc;
}

/* Open the store kv describes; rc, the log in lines, the time in *ms. */
static int open_kv(const char *kv, struct kvs_store **s, double *ms)
{
	struct kvs_store_config cfg;
	uint64_t t0;
	int rc;

	rc = parse_kv(kv, &cfg);
	if (rc)
		return rc;
	t0 = kvs_now_ns();
	rc = kvs_store_open(&cfg, s);
	*ms = (double)(kvs_now_ns() - t0) / 1e6;
	return rc;
}

/*
 * A capacity larger than the machine (100000 GiB, the typo) is refused
 * before anything is allocated: -ENOMEM (or -ENOSPC when /dev/shm is the
 * smaller limit), the log names the key and the limit it ran into, and no file
 * of the cache is left.  Before the check this pre-faulted until the OOM killer
 * came.  Also with the data plane a little over MemAvailable, so the guard is
 * the machine's number, not a fixed ceiling.
 */
static kvs_test_rc test_capacity_too_big(void)
{
	static const char *const kv[] = {
		"unique_id=kvstopen%d,device_id=0,shard_size=256k,cache_buffer_capacity_gb=100000,"
		"copy_engine=host,hugetlb=off,backend=none",
		"unique_id=kvstopen%d,device_id=0,shard_size=2m,cache_buffer_capacity_gb=%llu,"
		"copy_engine=host,hugetlb=auto,backend=none",
	};
	FILE *f = fopen("/proc/meminfo", "re");
	unsigned long long kb = 0;
	char line[128];

	KVS_CHECK(f != NULL);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			break;
	fclose(f);
	KVS_CHECK(kb > 0);
	for (int i = 0; i < 2; i++) {
		int id = (int)getpid() % 100000 * 2 + i;
		struct kvs_store *s = NULL;
		char uid[32], buf[256];
		double ms;
		int rc;

		snprintf(uid, sizeof(uid), "kvstopen%d", id);
		snprintf(buf, sizeof(buf), kv[i], id, kb / (1024 * 1024) + 2);
		rc = open_kv(buf, &s, &ms);
		printf("  %s\n    -> %d after %.1f ms:\n%s", buf, rc, ms, lines);
		if (rc == 0)
			kvs_store_close(s);
		KVS_CHECK(rc == -ENOMEM || rc == -ENOSPC);
		KVS_CHECK(strstr(lines, "cache_buffer_capacity_gb") != NULL);
		KVS_CHECK(strstr(lines, "MemAvailable") || strstr(lines, "cgroup") ||
			  strstr(lines, "free space in /dev/shm"));
		KVS_CHECK_EQ(shm_files(uid, true), 0);
	}
	return KVS_TEST_PASS;
}


/* Write text to dir/name: 0 or -errno. */
static int put(const char *dir, const char *name, const char *text)
{
	char path[PATH_MAX];
	int fd, rc = 0;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (write(fd, text, strlen(text)) != (ssize_t)strlen(text))
		rc = -errno;
	close(fd);
	return rc;
}

/* A new memory cgroup below ours, limited to limit bytes, in dir: 0 or -errno
 * (no writable memory controller: the caller skips). */
static int cgroup_make(char *dir, size_t len, unsigned long long limit)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	char line[512], num[32];
	int rc = -ENOENT;

	if (!f)
		return -errno;
	snprintf(num, sizeof(num), "%llu", limit);
	while (rc && fgets(line, sizeof(line), f)) {
		char *p = strchr(line, ':');
		bool v2;

		line[strcspn(line, "\n")] = '\0';
		if (!p || (!(v2 = strncmp(p, "::", 2) == 0) && strncmp(p, ":memory:", 8) != 0))
			continue;
		snprintf(dir, len, "/sys/fs/cgroup%s%s/kvshare-test-%d", v2 ? "" : "/memory",
			 strchr(p + 1, ':') + 1, (int)getpid());
		if (mkdir(dir, 0755) != 0) {
			rc = -errno;
			continue;
		}
		rc = put(dir, v2 ? "memory.max" : "memory.limit_in_bytes", num);
		if (rc)
			rmdir(dir);
	}
	fclose(f);
	return rc;
}

/*
 * The end of a forked case: reap the child (bounded, 20 s), remove its
 * directory and the segments of cache "<prefix><pid>" (what a killed child
 * left).  Its exit code, 128 + the signal that killed it, or -ETIMEDOUT.
 */
static int child_done(pid_t pid, const char *dir, const char *prefix)
{
	char uid[48];
	int code = kvs_test_reap(pid, 20000);

	rmdir(dir);
	snprintf(uid, sizeof(uid), "%s%d", prefix, (int)pid);
	shm_files(uid, true);
	return code;
}

/*
 * A rank inside a memory cgroup of 256 MiB asks for a 1 GiB cache: refused,
 * naming the cgroup, with the machine's MemAvailable far above it.  Before the
 * guard the pre-fault ran into the cgroup's OOM killer (the child dies of
 * SIGKILL).  Skips without a writable memory cgroup (not root, or none).
 */
static kvs_test_rc test_cgroup_limit(void)
{
	char dir[PATH_MAX];
	int rc = cgroup_make(dir, sizeof(dir), 256ull << 20);
	pid_t pid;

	if (rc)
		KVS_SKIP("no memory cgroup could be made below ours (%s): needs root and a "
			 "writable cgroupfs", strerror(-rc));
	pid = fork();
	KVS_CHECK(pid >= 0);
	if (pid == 0) {
		struct kvs_store *s = NULL;
		char me[32], kv[256];
		double ms;

		snprintf(me, sizeof(me), "%d", (int)getpid());
		if (put(dir, "cgroup.procs", me))
			_exit(3);
		snprintf(kv, sizeof(kv), "unique_id=kvstcg%d,device_id=0,shard_size=1m,"
			 "cache_buffer_capacity_gb=1,copy_engine=host,hugetlb=off,backend=none",
			 (int)getpid());
		rc = open_kv(kv, &s, &ms);
		printf("  in a 256 MiB cgroup: %s\n    -> %d after %.1f ms:\n%s", kv, rc, ms, lines);
		fflush(stdout);
		if (rc == 0)
			kvs_store_close(s);
		_exit(rc == -ENOMEM && strstr(lines, "cgroup") ? 0 : 1);
	}
	rc = child_done(pid, dir, "kvstcg");
	if (rc > 128)
		KVS_FAILF("the rank was killed by signal %d (the cgroup's OOM killer: the open "
			  "allocated past the limit)", rc - 128);
	if (rc == 3)
		KVS_SKIP("cannot move a process into %s", dir);
	KVS_CHECK_EQ(rc, 0);
	return KVS_TEST_PASS;
}

/* A rank of cache uid in cgroup dir: device, after a byte on wait_fd (-1: at
 * once); then a byte on ready_fd, and it closes after a byte on done_fd (-1:
 * at once).  Exit 0 when its open succeeded, 1 when not, 3 when it could not
 * join the cgroup. */
static int fit_rank(const char *dir, const char *uid, int device, int wait_fd, int ready_fd,
		    int done_fd)
{
	struct kvs_store *s = NULL;
	char me[32], kv[256], c;
	double ms;
	int rc;

	snprintf(me, sizeof(me), "%d", (int)getpid());
	if (put(dir, "cgroup.procs", me))
		return 3;
	if (wait_fd >= 0 && read(wait_fd, &c, 1) != 1)
		return 1;
	snprintf(kv, sizeof(kv), "unique_id=%s,device_id=%d,local_rank_size=2,shard_size=1m,"
		 "cache_buffer_capacity_gb=0.15625,copy_engine=host,hugetlb=off,backend=none",
		 uid, device);
	rc = open_kv(kv, &s, &ms);
	printf("  device %d in the 256 MiB cgroup: -> %d after %.1f ms%s%s", device, rc, ms,
	       lines[0] ? ":\n" : "\n", lines);
	fflush(stdout);
	if (write(ready_fd, "r", 1) != 1 || (done_fd >= 0 && read(done_fd, &c, 1) != 1))
		rc = rc ? rc : -EPIPE;
	if (s)
		kvs_store_close(s);
	return rc == 0 ? 0 : 1;
}

/*
 * The guard is for caches that do not exist yet: in a 256 MiB cgroup, rank 0
 * creates a 160 MiB cache, and rank 1 attaches to it although 160 MiB more
 * would not fit (it shares those pages).  Before, every open checked the fit
 * before finding the cache, and rank 1 was refused (-ENOMEM naming the cgroup;
 * with hugetlb=required every attacher of a cache that took most of the pool
 * was refused likewise).
 */
static kvs_test_rc test_attach_when_full(void)
{
	char dir[PATH_MAX], uid[32];
	int created[2], attached[2];
	int rc = cgroup_make(dir, sizeof(dir), 256ull << 20);
	pid_t a, b;

	if (rc)
		KVS_SKIP("no memory cgroup could be made below ours (%s): needs root and a "
			 "writable cgroupfs", strerror(-rc));
	KVS_CHECK(pipe(created) == 0 && pipe(attached) == 0);
	snprintf(uid, sizeof(uid), "kvstfull%d", (int)getpid());
	a = fork();
	if (a == 0)
		_exit(fit_rank(dir, uid, 0, -1, created[1], attached[0]));
	b = fork();
	if (b == 0)
		_exit(fit_rank(dir, uid, 1, created[0], attached[1], -1));
	KVS_CHECK(a > 0 && b > 0);
	int rb = kvs_test_reap(b, 20000);
	int ra = kvs_test_reap(a, 20000);

	close(created[0]);
	close(created[1]);
	close(attached[0]);
	close(attached[1]);
	shm_files(uid, true);
	rmdir(dir);
	if (ra == 3 || rb == 3)
		KVS_SKIP("cannot move a process into %s", dir);
	KVS_CHECK_EQ(ra, 0);
	KVS_CHECK_EQ(rb, 0);
	return KVS_TEST_PASS;
}

/*
 * What can be checked without the data plane is checked before it: on a 4 GiB
 * store (hugetlb=off: a pre-fault of seconds here), a missing backend root, no
 * backend_roots at all and copy_engine=cuda without a device are refused with
 * the key or the path named, and no segment file was ever made (before the
 * reorder each came after the 4 GiB pre-fault).
 */
static kvs_test_rc test_checked_first(void)
{
	static const struct {
		const char *extra;
		int rc;      /* 0: -ENODEV or 0 (a CUDA device may be there) */
		const char *named;
	} cases[] = {
		{ "backend=posix,backend_roots=/nonexistent/kvs-open-test", -ENOENT,
		  "/nonexistent/kvs-open-test" },
		{ "backend=posix", -EINVAL, "backend_roots" },
		{ "backend=none,copy_engine=cuda", 0, "copy_engine" },
	};
	struct kvs_store *s = NULL;
	double ms;

	/* descriptor 0 open, so that a failed open closing it shows (the posix
	 * backend's failed open once closed its zeroed fd cache: stdin, 16 times) */
	if (fcntl(0, F_GETFD) < 0)
		KVS_CHECK_EQ(open("/dev/null", O_RDONLY), 0);
	/* nothing sized at all: the keys, not "invalid slot_count = 0" */
	KVS_CHECK_EQ(open_kv("unique_id=kvstnosize,device_id=0,backend=none", &s, &ms), -EINVAL);
	printf("  unique_id=kvstnosize,device_id=0,backend=none\n    -> -22:\n%s", lines);
	KVS_CHECK(strstr(lines, "store: no shard size given: set shard_size") != NULL);
	KVS_CHECK_EQ(open_kv("unique_id=kvstnosize,device_id=0,shard_size=1m,backend=none", &s,
			     &ms), -EINVAL);
	KVS_CHECK(strstr(lines, "store: no capacity given: set cache_buffer_capacity_gb") != NULL);

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int id = (int)getpid() % 100000 * 4 + (int)i;
		char uid[32], kv[320];
		int rc;

		snprintf(uid, sizeof(uid), "kvstopen%d", id);
		snprintf(kv, sizeof(kv), "unique_id=%s,device_id=0,shard_size=1m,"
			 "cache_buffer_capacity_gb=4,hugetlb=off,%s", uid, cases[i].extra);
		rc = open_kv(kv, &s, &ms);
		printf("  %s\n    -> %d after %.1f ms:\n%s", kv, rc, ms, lines);
		if (rc == 0) {
			kvs_store_close(s);
			if (cases[i].rc == 0)
				continue; /* copy_engine=cuda on a machine with a device */
		}
		KVS_CHECK_EQ(rc, cases[i].rc ? cases[i].rc : -ENODEV);
		if (!strstr(lines, cases[i].named))
			KVS_FAILF("the log does not name '%s'", cases[i].named);
		KVS_CHECK_EQ(shm_files(uid, true), 0);
		if (fcntl(0, F_GETFD) < 0)
			KVS_FAILF("the failed open closed descriptor 0");
	}
	return KVS_TEST_PASS;
}

/*
 * kvs_store_config_check: what an open would refuse before it allocates is
 * refused the same way (the same errors, the same lines in
 * kvs_store_last_error), a configuration without a geometry yet is checked
 * with a placeholder one, and nothing is left behind: no segment of the
 * unique_id (it never attaches or creates), the copy engine never opened
 * (copy_engine=cuda passes on a machine without a device).
 */
static kvs_test_rc test_config_check(void)
{
	char root[] = "/tmp/kvs-open-check.XXXXXX";
	static const struct {
		const char *extra; /* after unique_id, device_id; "%s" is the root */
		int rc;
		const char *named;
	} cases[] = {
		{ "cache_buffer_capacity_gb=4,backend=posix,backend_roots=%s", 0, NULL },
		{ "cache_buffer_capacity_gb=4,backend=posix,backend_roots=%s,copy_engine=cuda", 0,
		  NULL },
		{ "cache_buffer_capacity_gb=4,backend=posix,backend_roots=%s/missing", -ENOENT,
		  "/missing" },
		{ "backend=posix,backend_roots=%s", -EINVAL, "cache_buffer_capacity_gb" },
		{ "cache_buffer_capacity_gb=4,backend=posix", -EINVAL, "backend_roots" },
	};

	KVS_CHECK(mkdtemp(root) != NULL);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct kvs_store_config cfg;
		char uid[32], extra[256], kv[400];
		uint64_t t0;
		int rc;

		snprintf(uid, sizeof(uid), "kvstcheck%d", (int)getpid() % 100000 * 8 + (int)i);
		snprintf(extra, sizeof(extra), cases[i].extra, root);
		snprintf(kv, sizeof(kv), "unique_id=%s,device_id=0,%s", uid, extra);
		KVS_CHECK_EQ(parse_kv(kv, &cfg), 0);
		t0 = kvs_now_ns();
		rc = kvs_store_config_check(&cfg);
		printf("  check %s\n    -> %d after %.1f ms:\n%s", kv, rc,
		       (double)(kvs_now_ns() - t0) / 1e6, lines);
		KVS_CHECK_EQ(rc, cases[i].rc);
		if (cases[i].named) {
			if (!strstr(lines, cases[i].named) ||
			    !strstr(kvs_store_last_error(), cases[i].named))
				KVS_FAILF("the log and kvs_store_last_error() do not name '%s': %s",
					  cases[i].named, kvs_store_last_error());
		} else {
			KVS_CHECK(kvs_store_last_error()[0] == '\0');
		}
		KVS_CHECK_EQ(shm_files(uid, true), 0);
	}
	KVS_CHECK_EQ(rmdir(root), 0); /* the backend's check left nothing in it */
	return KVS_TEST_PASS;
}

/*
 * A root this user cannot write (a root-owned 0755 directory, the store opened
 * by an unprivileged user in a child): refused at open with -EACCES naming the
 * root and the fix, nothing allocated.  Before, the open succeeded and the
 * first dump failed ("creating temp file 00/42/....tmp: Permission denied").
 * Skips unless root (to make the directory and drop to nobody).
 */
static kvs_test_rc test_root_unwritable(void)
{
	char dir[] = "/tmp/kvs-open-ro.XXXXXX";
	int rc;
	pid_t pid;

	if (geteuid() != 0)
		KVS_SKIP("needs root (to own a directory another user then cannot write)");
	KVS_CHECK(mkdtemp(dir) != NULL);
	KVS_CHECK_EQ(chmod(dir, 0755), 0);
	pid = fork();
	KVS_CHECK(pid >= 0);
	if (pid == 0) {
		struct kvs_store *s = NULL;
		char kv[320];
		double ms;

		if (setgid(65534) != 0 || setuid(65534) != 0)
			_exit(3);
		snprintf(kv, sizeof(kv), "unique_id=kvstro%d,device_id=0,shard_size=1m,"
			 "cache_buffer_capacity_gb=1,hugetlb=off,copy_engine=host,backend=posix,"
			 "backend_roots=%s", (int)getpid(), dir);
		rc = open_kv(kv, &s, &ms);
		printf("  as uid 65534: %s\n    -> %d after %.1f ms:\n%s", kv, rc, ms, lines);
		fflush(stdout);
		if (rc == 0)
			kvs_store_close(s);
		_exit(rc == -EACCES && strstr(lines, dir) && strstr(lines, "write access") ? 0 : 1);
	}
	rc = child_done(pid, dir, "kvstro");
	if (rc == 3)
		KVS_SKIP("cannot become uid/gid 65534");
	KVS_CHECK_EQ(rc, 0);
	return KVS_TEST_PASS;
}

/*
 * copy_engine=auto (the default) on a node without a usable CUDA device opens
 * with the host engine and says so once; with a device it is CUDA.
 */
static kvs_test_rc test_copy_engine_auto(void)
{
	struct kvs_store *s = NULL;
	char kv[256];
	double ms;
	int rc, engine;

	snprintf(kv, sizeof(kv), "unique_id=kvstauto%d,device_id=0,shard_size=64k,"
		 "cache_buffer_capacity_gb=0.01,hugetlb=off,backend=none", (int)getpid());
	rc = open_kv(kv, &s, &ms);
	printf("  %s\n    -> %d after %.1f ms:\n%s", kv, rc, ms, lines);
	KVS_CHECK_OK(rc);
	engine = kvs_store_copy_engine(s);
	kvs_store_close(s);
	if (engine == KVS_COPY_ENGINE_CUDA)
		return KVS_TEST_PASS;
	KVS_CHECK_EQ(engine, KVS_COPY_ENGINE_HOST);
	KVS_CHECK(strstr(lines, "copy_engine=auto: no usable CUDA device") != NULL);
	return KVS_TEST_PASS;
}

/*
 * A low RLIMIT_MEMLOCK (an unprivileged user, 64 KiB: Debian's default is 8 MiB
 * or less) makes io_uring refuse the data plane as fixed buffers; the store goes
 * on without them, so that is a WARNING naming the limit, and no line of the
 * open is an ERROR.  Kernel build with io_uring only; needs root (to drop to
 * uid 65534, which has no CAP_IPC_LOCK).
 */
static kvs_test_rc test_memlock_low(void)
{
	char dir[] = "/tmp/kvs-open-ml.XXXXXX";
	int rc;
	pid_t pid;

	if (!KVS_KERNEL)
		KVS_SKIP("the plain build has no io_uring (no fixed buffers)");
	if (geteuid() != 0)
		KVS_SKIP("needs root (to drop to a user without CAP_IPC_LOCK)");
	KVS_CHECK(mkdtemp(dir) != NULL);
	KVS_CHECK_EQ(chown(dir, 65534, 65534), 0);
	pid = fork();
	KVS_CHECK(pid >= 0);
	if (pid == 0) {
		struct rlimit rl = { 64 << 10, 64 << 10 };
		struct kvs_store *s = NULL;
		char kv[320];
		double ms;

		if (setrlimit(RLIMIT_MEMLOCK, &rl) != 0 || setgid(65534) != 0 || setuid(65534) != 0)
			_exit(3);
		snprintf(kv, sizeof(kv), "unique_id=kvstml%d,device_id=0,shard_size=1m,"
			 "cache_buffer_capacity_gb=0.0625,hugetlb=off,copy_engine=host,backend=posix,"
			 "io_engine=uring,backend_roots=%s", (int)getpid(), dir);
		rc = open_kv(kv, &s, &ms);
		printf("  as uid 65534, RLIMIT_MEMLOCK 64 KiB: %s\n    -> %d after %.1f ms:\n%s",
		       kv, rc, ms, lines);
		fflush(stdout);
		if (rc == -EPERM || rc == -ENOSYS || rc == -EOPNOTSUPP)
			_exit(4); /* no io_uring for this user here */
		if (rc)
			_exit(1);
		kvs_store_close(s);
		_exit(strstr(lines, "RLIMIT_MEMLOCK") && !strstr(lines, "[0]") ? 0 : 1);
	}
	rc = child_done(pid, dir, "kvstml");
	if (rc == 3)
		KVS_SKIP("cannot set RLIMIT_MEMLOCK or become uid 65534");
	if (rc == 4)
		KVS_SKIP("io_uring refused to uid 65534 here");
	KVS_CHECK_EQ(rc, 0);
	return KVS_TEST_PASS;
}

/*
 * A C caller without a log callback reads what a failed open said: every ERROR
 * line, in order (kvs_store_last_error); "" again after a good open.
 */
static kvs_test_rc test_last_error(void)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	const char *e;
	char err[256];

	kvs_store_config_init(&cfg);
	KVS_CHECK_OK(kvs_store_config_parse(&cfg, "unique_id=kvstle,device_id=0,shard_size=64k,"
					    "cache_buffer_capacity_gb=0.01,hugetlb=off,"
					    "copy_engine=host,backend=posix,"
					    "backend_roots=/nonexistent/kvs-last-error",
					    err, sizeof(err)));
	KVS_CHECK_EQ(kvs_store_open(&cfg, &s), -ENOENT);
	e = kvs_store_last_error();
	printf("  kvs_store_last_error():\n%s\n", e);
	KVS_CHECK(strstr(e, "backend: root /nonexistent/kvs-last-error: No such file") == e);
	KVS_CHECK(strstr(e, "\nstore: opening the backend: No such file or directory") != NULL);
	KVS_CHECK_OK(kvs_store_config_parse(&cfg, "backend=none", err, sizeof(err)));
	KVS_CHECK_OK(kvs_store_open(&cfg, &s));
	KVS_CHECK_EQ(strcmp(kvs_store_last_error(), ""), 0);
	kvs_store_close(s);
	return KVS_TEST_PASS;
}

/*
 * A rank whose geometry differs from the cache's (one typed
 * cache_buffer_capacity_gb 0.02, the other 0.01; or block_size) is told so in
 * keys, both sides: "slot_count is 163 in the segment, 327 here" named fields
 * the user never typed.
 */
static kvs_test_rc test_mismatch_in_keys(void)
{
	static const char *const second[] = {
		"cache_buffer_capacity_gb=0.02,block_size=64k",
		"cache_buffer_capacity_gb=0.01,block_size=128k",
	};
	struct kvs_store *a = NULL;
	char kv[256];
	double ms;

	snprintf(kv, sizeof(kv), "unique_id=kvstmm%d,device_id=0,local_rank_size=2,shard_size=64k,"
		 "block_size=64k,cache_buffer_capacity_gb=0.01,hugetlb=off,copy_engine=host,"
		 "backend=none", (int)getpid());
	KVS_CHECK_OK(open_kv(kv, &a, &ms));
	for (size_t i = 0; i < sizeof(second) / sizeof(second[0]); i++) {
		struct kvs_store *b = NULL;
		int rc;

		snprintf(kv, sizeof(kv), "unique_id=kvstmm%d,device_id=1,local_rank_size=2,"
			 "shard_size=64k,hugetlb=off,copy_engine=host,backend=none,%s",
			 (int)getpid(), second[i]);
		rc = open_kv(kv, &b, &ms);
		printf("  %s\n    -> %d:\n%s", kv, rc, lines);
		if (rc == 0)
			kvs_store_close(b);
		KVS_CHECK_EQ(rc, -KVS_ECONFIG);
		KVS_CHECK(strstr(lines, "was made with shard_size=65536, block_size=65536 (1 shards), "
				 "cache_buffer_capacity_gb=0.009949 (163 slots)") != NULL);
		KVS_CHECK(strstr(lines, i == 0 ? "asks for shard_size=65536, block_size=65536 (1 "
						 "shards), cache_buffer_capacity_gb=0.01996 (327 slots)"
					       : "block_size=131072 (2 shards)") != NULL);
	}
	kvs_store_close(a);
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "capacity_too_big", test_capacity_too_big },
	{ "cgroup_limit", test_cgroup_limit },
	{ "attach_when_full", test_attach_when_full },
	{ "checked_first", test_checked_first },
	{ "config_check", test_config_check },
	{ "root_unwritable", test_root_unwritable },
	{ "copy_engine_auto", test_copy_engine_auto },
	{ "memlock_low", test_memlock_low },
	{ "last_error", test_last_error },
	{ "mismatch_in_keys", test_mismatch_in_keys },
};

KVS_TEST_MAIN(cases)
