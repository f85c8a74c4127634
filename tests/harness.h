/*
 * tests/harness.h — the one test harness of kvshare (header-only).
 *
 * A test program is a table of cases, each `static kvs_test_rc test_<case>(void)`
 * returning KVS_TEST_PASS, KVS_TEST_FAIL or KVS_TEST_SKIP (77, with the reason
 * printed).  KVS_TEST_MAIN(table) runs them all (or those named on the command
 * line, or dispatches to a child entry point, see below), prints one line per case
 * and a closing "N passed, N failed, N skipped" line -- followed, when anything
 * skipped, by " (skipped: a, b)" naming the skipped cases -- and exits 0 / 1 / 77
 * (77 when every case skipped).  Checks print file:line, both values and
 * kvs_strerror().
 *
 * The convention, enforced by the types: a test case, and every helper that can
 * fail or skip, returns kvs_test_rc -- a struct, so it cannot be mistaken for an
 * int.  KVS_CHECK*, KVS_FAILF and KVS_SKIP return one from the function they are
 * in; a caller propagates a helper's failure or skip with KVS_TRY(helper(...)),
 * which returns the helper's result unless it passed.  KVS_CHECK_OK(helper()),
 * if (helper()), rc == KVS_TEST_PASS and int rc = helper() do not compile, and a
 * discarded result is a warning (an error under KVS_WERROR).  Library calls and
 * helpers that compute a value (a count, a pointer, a predicate, a -errno) keep
 * returning plain values and are checked with KVS_CHECK*.
 *
 * Multi-process cases fork children (kvs_test_fork) or exec this same binary
 * (kvs_test_spawn: a fresh image, so shared segments land at other addresses) and
 * reap them with a deadline (kvs_test_reap: stragglers are killed, never waited
 * for forever).  An exec'd child enters through the table's "child" entries:
 * `prog --child <name> args...` calls the entry with argc/argv after the name.
 * Children return kvs_test_rc too, and their exit status is its .code; a child
 * whose parent needs another status (a protocol: "took over", "cannot install
 * the filter") returns KVS_TEST_EXIT(n), and the parent checks for n.
 */
#ifndef KVS_TESTS_HARNESS_H
#define KVS_TESTS_HARNESS_H

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "kvshare.h"

#ifndef KVS_TEST_VARIANT
#define KVS_TEST_VARIANT "unknown"
#endif

/* A discarded kvs_test_rc is a warning (-Wunused-result): a helper's failure
 * cannot be dropped by calling it as a statement. */
#if defined(__clang__)
#define KVS_TEST_NODISCARD __attribute__((warn_unused_result))
#elif defined(__has_c_attribute)
#if __has_c_attribute(nodiscard)
#define KVS_TEST_NODISCARD [[nodiscard]]
#endif
#endif
#ifndef KVS_TEST_NODISCARD
#define KVS_TEST_NODISCARD
#endif

/* The result of a test case, a helper or a child: code 0 pass, 1 fail, 77 skip. */
typedef struct KVS_TEST_NODISCARD kvs_test_rc {
	int code;
} kvs_test_rc;

#define KVS_TEST_PASS ((kvs_test_rc){ 0 })
#define KVS_TEST_FAIL ((kvs_test_rc){ 1 })
#define KVS_TEST_SKIP ((kvs_test_rc){ 77 })
/* A child's exit status other than pass / fail / skip, for a protocol with its
 * parent (e.g. 3 = "took over"); never a test case's result. */
#define KVS_TEST_EXIT(n) ((kvs_test_rc){ (n) })

/* Run a helper returning kvs_test_rc; return its result from the caller unless it
 * passed (a failure also names the call site). */
#define KVS_TRY(call)                                                                   \
	do {                                                                            \
		kvs_test_rc kvs_try_ = (call);                                          \
		if (kvs_try_.code != KVS_TEST_PASS.code) {                              \
			if (kvs_try_.code != KVS_TEST_SKIP.code)                        \
				fprintf(stderr, "%s:%d: from %s\n", __FILE__, __LINE__, #call); \
			return kvs_try_;                                                \
		}                                                                       \
	} while (0)

struct kvs_test_case {
	const char *name;
	kvs_test_rc (*fn)(void);
};

/* Entry points for exec'd children: `prog --child <name> args...`; the process
 * exits with the result's code. */
struct kvs_test_child {
	const char *name;
	kvs_test_rc (*fn)(int argc, char **argv);
};

/* KVS_FAILF, KVS_CHECK* and KVS_SKIP return a kvs_test_rc from the enclosing
 * function (a test case, a helper or a child entry). */
#define KVS_FAILF(...)                                                                  \
	do {                                                                            \
		fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                        \
		fprintf(stderr, __VA_ARGS__);                                           \
		fputc('\n', stderr);                                                    \
		return KVS_TEST_FAIL;                                                   \
	} while (0)

#define KVS_CHECK(cond)                                                                 \
	do {                                                                            \
		if (!(cond))                                                            \
			KVS_FAILF("check failed: %s", #cond);                           \
	} while (0)

#define KVS_CHECK_EQ(a, b)                                                              \
	do {                                                                            \
		long long kvs_a_ = (long long)(a), kvs_b_ = (long long)(b);             \
		if (kvs_a_ != kvs_b_)                                                   \
			KVS_FAILF("%s == %s: %lld != %lld", #a, #b, kvs_a_, kvs_b_);    \
	} while (0)

/* rc >= 0 expected: a library call or a value-returning helper (a kvs_test_rc
 * does not compile here; propagate it with KVS_TRY). */
#define KVS_CHECK_OK(rc)                                                                \
	do {                                                                            \
		long long kvs_rc_ = (long long)(rc);                                    \
		if (kvs_rc_ < 0)                                                        \
			KVS_FAILF("%s: %lld (%s)", #rc, kvs_rc_, kvs_strerror((int)kvs_rc_)); \
	} while (0)

/* rc == want, both usually negative error codes. */
#define KVS_CHECK_ERR(rc, want)                                                         \
	do {                                                                            \
		long long kvs_rc_ = (long long)(rc), kvs_w_ = (long long)(want);        \
		if (kvs_rc_ != kvs_w_)                                                  \
			KVS_FAILF("%s: got %lld (%s), want %lld (%s)", #rc, kvs_rc_,     \
				  kvs_strerror((int)kvs_rc_), kvs_w_, kvs_strerror((int)kvs_w_)); \
	} while (0)

#define KVS_SKIP(...)                                                                   \
	do {                                                                            \
		printf("SKIP: ");                                                       \
		printf(__VA_ARGS__);                                                    \
		printf("\n");                                                           \
		return KVS_TEST_SKIP;                                                   \
	} while (0)

/* A name unique to this test, variant and process: "t.<variant>.<tag>.<pid>". */
static inline const char *kvs_test_unique_id(char *buf, size_t len, const char *tag)
{
	snprintf(buf, len, "t.%s.%s.%d", KVS_TEST_VARIANT, tag, (int)getpid());
	return buf;
}

/*
 * In a child just forked by the test process parent: die with it.  A test that
 * aborts (a sanitizer report, a crash) must not leave children behind -- least
 * of all a SIGSTOPped one, which would hold CTest's output pipe open until the
 * test's timeout.  The setting survives exec and is cleared in the child's own
 * forks (a grandchild that must outlive its parent still does).  Tests fork
 * from their main thread, whose exit is the process's.
 */
static inline void kvs_test_child_dies_with(pid_t parent)
{
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
		_exit(126); /* no guard, or the parent is already gone */
}

/* Fork a child running fn(arg); the child exits with fn's result's code. */
static inline pid_t kvs_test_fork(kvs_test_rc (*fn)(void *), void *arg)
{
	pid_t parent = getpid();
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		kvs_test_child_dies_with(parent);
		int code = fn(arg).code;

		fflush(NULL); /* _exit does not: keep what the child printed */
		_exit(code);
	}
	return pid;
}

/* A child's hook (a test hook of the library taking a path) at the point where
 * the test kills it: one byte on kvs_test_park_fd says it is there, then it
 * waits for the kill. */
static int kvs_test_park_fd = -1;

static inline void kvs_test_park_hook(const char *where)
{
	(void)where;
	if (write(kvs_test_park_fd, "p", 1) != 1)
		_exit(3);
	for (;;)
		pause();
}

/* Exec this test binary as `--child <name> args...` (args NULL-terminated). */
static inline pid_t kvs_test_spawn(const char *name, const char *const args[])
{
	char *argv[64];
	int n = 0;
	pid_t parent = getpid();
	pid_t pid;

	argv[n++] = program_invocation_name; /* argv[0], in every file of a test */
	argv[n++] = (char *)"--child";
	argv[n++] = (char *)name;
	for (int i = 0; args && args[i] && n < 63; i++)
		argv[n++] = (char *)args[i];
	argv[n] = NULL;
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		kvs_test_child_dies_with(parent);
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	return pid;
}

/* kvs_test_spawn of `--child <name> <uid> <fd>`, fd the write end of a pipe
 * whose read end goes to *rfd: the child's word to the test.  -1 when the pipe
 * or the fork fails. */
static inline pid_t kvs_test_spawn_piped(const char *name, const char *uid, int *rfd)
{
	char fdstr[16];
	int fds[2];
	pid_t pid;

	*rfd = -1;
	if (pipe(fds))
		return -1;
	snprintf(fdstr, sizeof(fdstr), "%d", fds[1]);
	pid = kvs_test_spawn(name, (const char *const[]){ uid, fdstr, NULL });
	close(fds[1]);
	if (pid < 0) {
		close(fds[0]);
		return -1;
	}
	*rfd = fds[0];
	return pid;
}

/* The len bytes (at most PIPE_BUF: one write) a child writes to fd, within
 * timeout_ms: true when they came. */
static inline bool kvs_test_read_within(int fd, void *buf, size_t len, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, timeout_ms) == 1 && read(fd, buf, len) == (ssize_t)len;
}

/*
 * Wait (bounded, timeout_ns) until process pid sleeps in futex or futex_waitv:
 * the first field of /proc/<pid>/syscall is the syscall number ("running" while
 * it runs).  Proves a waiter is asleep in the kernel before a publish, so a test
 * exercises the wake rather than a spin.  Skips when /proc does not let us read
 * it (ptrace restrictions).
 */
static inline kvs_test_rc kvs_test_wait_in_futex(pid_t pid, uint64_t timeout_ns)
{
	char path[64], line[256] = "";
	uint64_t deadline = kvs_deadline_after(timeout_ns);
	long nr;

	snprintf(path, sizeof(path), "/proc/%d/syscall", (int)pid);
	while (kvs_now_ns() < deadline) {
		FILE *f = fopen(path, "re");

		if (!f) {
			if (errno == EACCES || errno == EPERM)
				KVS_SKIP("cannot read %s: %s", path, strerror(errno));
			KVS_FAILF("open %s: %s", path, strerror(errno));
		}
		line[0] = 0;
		if (!fgets(line, sizeof(line), f) || sscanf(line, "%ld", &nr) != 1)
			nr = -1;
		fclose(f);
#ifdef SYS_futex_waitv
		if (nr == SYS_futex_waitv)
			return KVS_TEST_PASS;
#endif
		if (nr == SYS_futex)
			return KVS_TEST_PASS;
		usleep(200);
	}
	KVS_FAILF("pid %d never slept in futex (last: %s)", (int)pid, line);
}

/*
 * Reap pid within timeout_ms.  Returns its exit status (0..255), 128 + signal if
 * it was killed by a signal, or -ETIMEDOUT after killing it (SIGKILL) and reaping.
 */
static inline int kvs_test_reap(pid_t pid, int timeout_ms)
{
	uint64_t deadline = kvs_deadline_after((uint64_t)timeout_ms * 1000000ull);
	int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	int status = 0;

	for (;;) {
		pid_t r = waitpid(pid, &status, WNOHANG);

		if (r == pid)
			break;
		if (r < 0 && errno != EINTR) {
			if (pidfd >= 0)
				close(pidfd);
			return -errno;
		}
		uint64_t now = kvs_now_ns();
		if (now >= deadline) {
			kill(pid, SIGKILL);
			while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
				;
			if (pidfd >= 0)
				close(pidfd);
			fprintf(stderr, "child %d killed after %d ms\n", (int)pid, timeout_ms);
			return -ETIMEDOUT;
		}
		if (pidfd >= 0) {
			struct pollfd p = { .fd = pidfd, .events = POLLIN };
			poll(&p, 1, (int)((deadline - now) / 1000000ull) + 1);
		} else {
			usleep(1000); /* no pidfd_open (kernel < 5.3): poll the child */
		}
	}
	if (pidfd >= 0)
		close(pidfd);
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return 128 + WTERMSIG(status);
}

/* A child started with the write end wr of a pipe (rd its read end) stops at
 * kvs_test_park_hook: wait for it to be there (a child that dies before is a
 * failure, not a hang: wr is closed here first), kill it -9 and reap it. */
static inline kvs_test_rc kvs_test_kill_parked(pid_t pid, int rd, int wr)
{
	char ch;

	close(wr);
	KVS_CHECK(pid > 0);
	KVS_CHECK_EQ(read(rd, &ch, 1), 1);
	close(rd);
	kill(pid, SIGKILL);
	KVS_CHECK_EQ(kvs_test_reap(pid, 10000), 128 + SIGKILL);
	return KVS_TEST_PASS;
}

static inline int kvs_test_run(int argc, char **argv, const struct kvs_test_case *cases,
			       size_t ncases, const struct kvs_test_child *children,
			       size_t nchildren)
{
	int passed = 0, failed = 0, skipped = 0;
	const char **skipped_names = calloc(ncases ? ncases : 1, sizeof(*skipped_names));

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 3 && strcmp(argv[1], "--child") == 0) {
		free(skipped_names);
		for (size_t i = 0; i < nchildren; i++)
			if (strcmp(children[i].name, argv[2]) == 0)
				return children[i].fn(argc - 3, argv + 3).code;
		fprintf(stderr, "no child entry '%s'\n", argv[2]);
		return 2;
	}
	if (!skipped_names) {
		fprintf(stderr, "out of memory\n");
		return KVS_TEST_FAIL.code;
	}
	for (size_t i = 0; i < ncases; i++) {
		int selected = argc < 2;
		for (int a = 1; a < argc && !selected; a++)
			selected = strcmp(argv[a], cases[i].name) == 0;
		if (!selected)
			continue;
		uint64_t t0 = kvs_now_ns();
		int code = cases[i].fn().code;
		double ms = (double)(kvs_now_ns() - t0) / 1e6;
		const char *what = code == KVS_TEST_PASS.code ? "ok"
				 : code == KVS_TEST_SKIP.code ? "skip" : "FAIL";
		printf("%-5s %s/%s (%.1f ms)\n", what, KVS_TEST_VARIANT, cases[i].name, ms);
		if (code == KVS_TEST_PASS.code)
			passed++;
		else if (code == KVS_TEST_SKIP.code)
			skipped_names[skipped++] = cases[i].name;
		else
			failed++;
	}
	/* The last line: CI parses its "N passed, N failed, N skipped" prefix. */
	printf("%d passed, %d failed, %d skipped", passed, failed, skipped);
	for (int i = 0; i < skipped; i++)
		printf("%s%s", i ? ", " : " (skipped: ", skipped_names[i]);
	fputs(skipped ? ")\n" : "\n", stdout);
	free(skipped_names);
	if (failed)
		return KVS_TEST_FAIL.code;
	return passed == 0 && skipped > 0 ? KVS_TEST_SKIP.code : KVS_TEST_PASS.code;
}

#define KVS_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#define KVS_TEST_MAIN(cases)                                                            \
	int main(int argc, char **argv)                                                 \
	{                                                                               \
		return kvs_test_run(argc, argv, cases, KVS_ARRAY_LEN(cases), NULL, 0);  \
	}

#define KVS_TEST_MAIN_WITH_CHILDREN(cases, children)                                    \
	int main(int argc, char **argv)                                                 \
	{                                                                               \
		return kvs_test_run(argc, argv, cases, KVS_ARRAY_LEN(cases), children,  \
				    KVS_ARRAY_LEN(children));                           \
	}

/* A binary with a second group of cases (another engine's, run where it
 * exists): `PROG FLAG [case...]` runs group, `PROG [case...]` cases, each its own
 * CTest test (tests/io.cmake, kvs_io_test_group). */
static inline int kvs_test_run_groups(int argc, char **argv, const char *flag,
				      const struct kvs_test_case *cases, size_t ncases,
				      const struct kvs_test_case *group, size_t ngroup,
				      const struct kvs_test_child *children, size_t nchildren)
{
	if (argc >= 2 && strcmp(argv[1], flag) == 0) {
		argv[1] = argv[0];
		return kvs_test_run(argc - 1, argv + 1, group, ngroup, children, nchildren);
	}
	return kvs_test_run(argc, argv, cases, ncases, children, nchildren);
}

#endif
