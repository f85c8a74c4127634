/*
 * tests/tools_admin_util.h — what the CLI tests (tools_stat.c, tools_clean.c)
 * share: the kvshare binary run as an operator runs it (fork+exec, judged by its
 * exit code, stdout, parsed with jansson for --json, and stderr), and rank
 * processes (exec'd copies of the test program: children "rank" and "dumper")
 * holding caches while it runs.
 */
#ifndef KVS_TESTS_TOOLS_ADMIN_UTIL_H
#define KVS_TESTS_TOOLS_ADMIN_UTIL_H

#include <jansson.h>

#include "store_util.h"

#define SHARD 4096u /* a rank's shard bytes */
#define NBLK 8u     /* the blocks a rank loads or dumps */

extern const char *ta_cli; /* the kvshare binary: the test's first argument */

/* One CLI run's outcome. */
struct run {
	int code;          /* exit status, 128 + signal, or -ETIMEDOUT */
	char out[8 << 20]; /* ls of a busy node's /dev/shm is long */
	char err[8192];
};

/* Start the CLI with args (argv[1..]) and its stdout and stderr on pipes. */
pid_t cli_spawn(const char *const args[], int *out_fd, int *err_fd);
/* Stop a spawned CLI (SIGTERM: it must exit 0) and collect its output (len:
 * the stdout bytes read so far). */
kvs_test_rc cli_stop(struct run *run, pid_t pid, int ofd, int efd, size_t len);
/* Run the CLI to its end (bounded). */
kvs_test_rc cli_run(struct run *r, const char *const args[]);
/* cli_run, and the exit code must be code (else the output is shown). */
kvs_test_rc cli_expect(struct run *r, int code, const char *const args[]);
/* A --prometheus FILE: every sample line is `name{labels} value` with a TYPE
 * line for its family before it, and no FILE.tmp left; its text in buf. */
kvs_test_rc check_prom_file(const char *path, char *buf, size_t cap);
/* text (an output) contains what. */
kvs_test_rc has(const char *text, const char *what);
/* stderr is exactly one line containing what. */
kvs_test_rc one_line_err(const struct run *r, const char *what);
json_t *parse_json(const char *s);
/* Integer at a '/'-separated path of object keys (-999999, said, if none). */
long long jint(json_t *j, const char *path);
/* Whether uid's control file, its first data file, exist in /dev/shm. */
int ctl_exists(const char *uid);
int data_exists(const char *uid);

/* A rank's store config: 64 slots of SHARD on uid, numa off, two local ranks. */
void rank_cfg(struct kvs_store_config *cfg, const char *uid, int device, bool persist,
	      uint64_t latency_ns);
kvs_test_rc rank_child(int argc, char **argv);
kvs_test_rc dumper_child(int argc, char **argv);

/* Rank processes holding a cache until stopped or killed. */
struct ranks {
	pid_t pid[4];
	int n;
	int go; /* write end: closing it lets the ranks leave */
};

/* n ranks (devices 0..n-1) on uid, each after the previous one loaded (one
 * reads, the other hits); child "rank" (loads) or "dumper" (dumps). */
kvs_test_rc ranks_start_as(struct ranks *r, const char *uid, int n, bool persist,
			   const char *child);
kvs_test_rc ranks_start(struct ranks *r, const char *uid, int n, bool persist);
/* n ranks that load together, reads held latency_ns: their gets meet one read. */
kvs_test_rc ranks_start_together(struct ranks *r, const char *uid, int n,
				 uint64_t latency_ns);
/* Let the ranks close their stores and exit 0; or kill -9 them. */
kvs_test_rc ranks_stop(struct ranks *r);
kvs_test_rc ranks_kill(struct ranks *r);

/* main of a CLI test: `PROG /path/to/kvshare [case...]`, and its children. */
int tools_admin_main(int argc, char **argv, const struct kvs_test_case *cases, size_t ncases,
		     const struct kvs_test_child *children, size_t nchildren);

#endif
