/*
 * tests/harness.h — the one test harness of kvshare (header-only).
 *
 * A test program is a table of cases, each `static int test_<case>(void)` returning
 * KVS_TEST_PASS, KVS_TEST_FAIL or KVS_TEST_SKIP (77, with the reason printed).
 * KVS_TEST_MAIN(table) runs them all (or those named on the command line, or
 * dispatches to a child entry point, see below), prints one line per case and a
 * closing "N passed, N failed, N skipped" line, and exits 0 / 1 / 77 (77 when every
 * case skipped).  Checks print file:line, both values and kvs_strerror().
 *
 * Multi-process cases fork children (kvs_test_fork) or exec this same binary
 * (kvs_test_spawn: a fresh image, so shared segments land at other addresses) and
 * reap them with a deadline (kvs_test_reap: stragglers are killed, never waited
 * for forever).  An exec'd child enters through the table's "child" entries:
 * `prog --child <name> args...` calls the entry with argc/argv after the name.
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
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "kvshare.h"

#ifndef KVS_TEST_VARIANT
#define KVS_TEST_VARIANT "unknown"
#endif

#define KVS_TEST_PASS 0
#define KVS_TEST_FAIL 1
#define KVS_TEST_SKIP 77

struct kvs_test_case {
	const char *name;
	int (*fn)(void);
};

/* Entry points for exec'd children: `prog --child <name> args...`. */
struct kvs_test_child {
	const char *name;
	int (*fn)(int argc, char **argv);
};

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

/* rc >= 0 expected. */
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

/* Fork a child running fn(arg); the child exits with fn's return. */
static inline pid_t kvs_test_fork(int (*fn)(void *), void *arg)
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid == 0)
		_exit(fn(arg));
	return pid;
}

static char *kvs_test_argv0;

/* Exec this test binary as `--child <name> args...` (args NULL-terminated). */
static inline pid_t kvs_test_spawn(const char *name, const char *const args[])
{
	char *argv[64];
	int n = 0;
	pid_t pid;

	argv[n++] = kvs_test_argv0;
	argv[n++] = (char *)"--child";
	argv[n++] = (char *)name;
	for (int i = 0; args && args[i] && n < 63; i++)
		argv[n++] = (char *)args[i];
	argv[n] = NULL;
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		execv("/proc/self/exe", argv);
		_exit(127);
	}
	return pid;
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

static inline int kvs_test_run(int argc, char **argv, const struct kvs_test_case *cases,
			       size_t ncases, const struct kvs_test_child *children,
			       size_t nchildren)
{
	int passed = 0, failed = 0, skipped = 0;

	kvs_test_argv0 = argv[0];
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 3 && strcmp(argv[1], "--child") == 0) {
		for (size_t i = 0; i < nchildren; i++)
			if (strcmp(children[i].name, argv[2]) == 0)
				return children[i].fn(argc - 3, argv + 3);
		fprintf(stderr, "no child entry '%s'\n", argv[2]);
		return 2;
	}
	for (size_t i = 0; i < ncases; i++) {
		int selected = argc < 2;
		for (int a = 1; a < argc && !selected; a++)
			selected = strcmp(argv[a], cases[i].name) == 0;
		if (!selected)
			continue;
		uint64_t t0 = kvs_now_ns();
		int rc = cases[i].fn();
		double ms = (double)(kvs_now_ns() - t0) / 1e6;
		const char *what = rc == KVS_TEST_PASS ? "ok" : rc == KVS_TEST_SKIP ? "skip" : "FAIL";
		printf("%-5s %s/%s (%.1f ms)\n", what, KVS_TEST_VARIANT, cases[i].name, ms);
		if (rc == KVS_TEST_PASS)
			passed++;
		else if (rc == KVS_TEST_SKIP)
			skipped++;
		else
			failed++;
	}
	printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
	if (failed)
		return KVS_TEST_FAIL;
	return passed == 0 && skipped > 0 ? KVS_TEST_SKIP : KVS_TEST_PASS;
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

#endif
