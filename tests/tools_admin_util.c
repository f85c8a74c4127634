/*
 * tests/tools_admin_util.c — what the CLI tests (tools_stat.c, tools_clean.c)
 * share: running the kvshare binary and judging its output, and the rank
 * processes (exec'd copies of the test program) that hold caches for it.
 */
#include <fcntl.h>
#include <sys/wait.h>

#include "tools_admin_util.h"

const char *ta_cli;

/* ---- running the CLI ---- */

/* Drain fd into buf (NUL-terminated, truncated). */
static void drain(int fd, char *buf, size_t cap, size_t *len)
{
	char scratch[4096];
	ssize_t n;

	for (;;) {
		if (*len + 1 < cap)
			n = read(fd, buf + *len, cap - 1 - *len);
		else
			n = read(fd, scratch, sizeof(scratch));
		if (n <= 0)
			break;
		if (*len + 1 < cap)
			*len += (size_t)n;
	}
	buf[*len] = '\0';
}

pid_t cli_spawn(const char *const args[], int *out_fd, int *err_fd)
{
	int o[2], e[2];
	char *argv[32];
	int n = 0;
	pid_t pid;

	argv[n++] = (char *)ta_cli;
	for (int i = 0; args[i] && n < 31; i++)
		argv[n++] = (char *)args[i];
	argv[n] = NULL;
	if (pipe2(o, O_CLOEXEC) || pipe2(e, O_CLOEXEC))
		return -1;
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		dup2(o[1], 1);
		dup2(e[1], 2);
		execv(ta_cli, argv);
		_exit(127);
	}
	close(o[1]);
	close(e[1]);
	*out_fd = o[0];
	*err_fd = e[0];
	return pid;
}

/* Run the CLI with args to completion (10 s at most). */
/* End a spawned `stat --watch`: SIGTERM, the rest of its output into run
 * (appended to its first len bytes of stdout), and a clean exit (0). */
kvs_test_rc cli_stop(struct run *run, pid_t pid, int ofd, int efd, size_t len)
{
	size_t el = 0;

	kill(pid, SIGTERM);
	drain(ofd, run->out, sizeof(run->out), &len);
	drain(efd, run->err, sizeof(run->err), &el);
	close(ofd);
	close(efd);
	KVS_CHECK_EQ(kvs_test_reap(pid, 10000), 0);
	return KVS_TEST_PASS;
}

kvs_test_rc cli_run(struct run *r, const char *const args[])
{
	int ofd, efd;
	size_t ol = 0, el = 0;
	struct pollfd p[2];
	pid_t pid = cli_spawn(args, &ofd, &efd);

	KVS_CHECK(pid > 0);
	r->out[0] = r->err[0] = '\0';
	p[0] = (struct pollfd){ .fd = ofd, .events = POLLIN };
	p[1] = (struct pollfd){ .fd = efd, .events = POLLIN };
	uint64_t deadline = kvs_deadline_after(10 * ST_SEC);
	while ((p[0].fd >= 0 || p[1].fd >= 0) && kvs_now_ns() < deadline) {
		if (poll(p, 2, 100) <= 0)
			continue;
		for (int i = 0; i < 2; i++) {
			char *buf = i ? r->err : r->out;
			size_t cap = i ? sizeof(r->err) : sizeof(r->out), *len = i ? &el : &ol;
			ssize_t n;

			if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP)))
				continue;
			if (*len + 1 >= cap) { /* full: keep draining (the CLI must not get EPIPE) */
				char scratch[4096];

				n = read(p[i].fd, scratch, sizeof(scratch));
				if (n > 0)
					continue;
			} else {
				n = read(p[i].fd, buf + *len, cap - 1 - *len);
			}
			if (n > 0) {
				*len += (size_t)n;
				buf[*len] = '\0';
			} else {
				close(p[i].fd);
				p[i].fd = -1;
			}
		}
	}
	for (int i = 0; i < 2; i++)
		if (p[i].fd >= 0)
			close(p[i].fd);
	r->code = kvs_test_reap(pid, 10000);
	return KVS_TEST_PASS;
}

/* Run and expect exit code `code`; print what it said on a mismatch. */
kvs_test_rc cli_expect(struct run *r, int code, const char *const args[])
{
	KVS_TRY(cli_run(r, args));
	if (r->code != code)
		KVS_FAILF("kvshare %s ...: exit %d, want %d\n--- stdout\n%s--- stderr\n%s", args[0], r->code,
			  code, r->out, r->err);
	return KVS_TEST_PASS;
}

/* Every sample line is `name{labels} value` with a TYPE line for its family
 * before it; returns the file's text in buf. */
kvs_test_rc check_prom_file(const char *path, char *buf, size_t cap)
{
	char tmp[300], *save, *line, *copy, family[128] = "";
	FILE *f = fopen(path, "re");
	size_t n;

	KVS_CHECK(f != NULL);
	n = fread(buf, 1, cap - 1, f);
	buf[n] = '\0';
	fclose(f);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	KVS_CHECK(access(tmp, F_OK) != 0); /* renamed, not left behind */
	copy = strdup(buf);
	KVS_CHECK(copy != NULL);
	for (line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char name[128], *brace;
		double v;

		if (strncmp(line, "# TYPE ", 7) == 0) {
			KVS_CHECK(sscanf(line + 7, "%127s", family) == 1);
			KVS_CHECK(strncmp(family, "kvshare_", 8) == 0);
			continue;
		}
		if (strncmp(line, "# HELP ", 7) == 0)
			continue;
		brace = strchr(line, '{');
		if (!brace || brace - line >= (long)sizeof(name))
			KVS_FAILF("bad sample line: %s", line);
		memcpy(name, line, (size_t)(brace - line));
		name[brace - line] = '\0';
		if (strncmp(name, family, strlen(family)) != 0)
			KVS_FAILF("sample %s outside its family %s", name, family);
		if (!strstr(line, "unique_id=\"") || !strchr(brace, '}') ||
		    sscanf(strchr(brace, '}') + 1, " %lf", &v) != 1)
			KVS_FAILF("bad sample line: %s", line);
	}
	free(copy);
	return KVS_TEST_PASS;
}

kvs_test_rc has(const char *text, const char *what)
{
	if (!strstr(text, what))
		KVS_FAILF("'%s' not found in:\n%s", what, text);
	return KVS_TEST_PASS;
}

/* stderr is exactly one line containing what. */
kvs_test_rc one_line_err(const struct run *r, const char *what)
{
	const char *nl = strchr(r->err, '\n');

	if (!nl || nl[1] != '\0' || !strstr(r->err, what))
		KVS_FAILF("stderr is not one line naming '%s':\n%s", what, r->err);
	return KVS_TEST_PASS;
}

json_t *parse_json(const char *s)
{
	json_error_t e;
	json_t *j = json_loads(s, 0, &e);

	if (!j)
		fprintf(stderr, "JSON error line %d: %s\n%s\n", e.line, e.text, s);
	return j;
}

/* Integer at a '/'-separated path of object keys. */
long long jint(json_t *j, const char *path)
{
	char buf[256], *save, *k;

	snprintf(buf, sizeof(buf), "%s", path);
	for (k = strtok_r(buf, "/", &save); k && j; k = strtok_r(NULL, "/", &save))
		j = json_object_get(j, k);
	if (!j || !json_is_integer(j)) {
		fprintf(stderr, "JSON: no integer at %s\n", path);
		return -999999;
	}
	return (long long)json_integer_value(j);
}

int ctl_exists(const char *uid)
{
	char path[256];

	snprintf(path, sizeof(path), "/dev/shm/kvshare.%s.ctl", uid);
	return access(path, F_OK) == 0;
}

int data_exists(const char *uid)
{
	char path[256];

	snprintf(path, sizeof(path), "/dev/shm/kvshare.%s.data.0", uid);
	return access(path, F_OK) == 0;
}

/* ---- rank processes ---- */

void rank_cfg(struct kvs_store_config *cfg, const char *uid, int device, bool persist,
	      uint64_t latency_ns)
{
	st_cfg(cfg, uid, device, SHARD, 64, 1);
	st_latency(cfg, latency_ns);
	cfg->cache.numa = KVS_NUMA_OFF;
	cfg->cache.local_rank_size = 2;
	if (persist)
		cfg->cache.flags |= KVS_CACHE_PERSIST;
}

/* exec'd: --child rank <uid> <device> <persist> <ready fd> <go fd> [<load fd>
 * <latency ns>]: open a rank store, (with a load fd: say "o" on ready fd and
 * wait for the load fd's EOF, so that ranks load at once), load blocks
 * 0..NBLK-1 (--child dumper: dump them), say "x" on ready fd, wait for go fd's
 * EOF (or a kill), close the store. */
static kvs_test_rc rank_body(int argc, char **argv, bool dump)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task t;
	char ch;

	if (argc != 5 && argc != 7)
		KVS_FAILF("usage: --child rank <uid> <device> <persist> <ready fd> <go fd> "
			  "[<load fd> <latency ns>]");
	/* Never outlive the test (a failed check leaves no rank behind); the go
	 * pipe's EOF is the normal way out. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	rank_cfg(&cfg, argv[0], atoi(argv[1]), atoi(argv[2]) != 0,
		 argc == 7 ? strtoull(argv[6], NULL, 10) : 20000);
	KVS_TRY(st_open(&cfg, &s));
	if (argc == 7) {
		KVS_CHECK_EQ(write(atoi(argv[3]), "o", 1), 1);
		while (read(atoi(argv[5]), &ch, 1) > 0)
			;
	}
	KVS_TRY(st_task_whole(&t, NBLK, 1, SHARD));
	for (uint32_t i = 0; i < NBLK; i++) {
		struct kvs_block_id b = st_block(12, i);
		st_task_set(&t, i, &b, 0);
	}
	if (dump)
		KVS_TRY(st_dump(s, &t, 20000));
	else
		KVS_TRY(st_load(s, &t, 20000, 0));
	KVS_CHECK_EQ(write(atoi(argv[3]), "x", 1), 1);
	while (read(atoi(argv[4]), &ch, 1) > 0)
		;
	kvs_store_close(s);
	st_task_free(&t);
	return KVS_TEST_PASS;
}

kvs_test_rc rank_child(int argc, char **argv)
{
	return rank_body(argc, argv, false);
}

kvs_test_rc dumper_child(int argc, char **argv)
{
	return rank_body(argc, argv, true);
}

/* Start n ranks (devices 0..n-1) on uid, each after the previous one loaded
 * (so the counts are deterministic: one reads, the other hits), and wait until
 * all are ready.  child: "rank" (loads) or "dumper" (dumps). */
kvs_test_rc ranks_start_as(struct ranks *r, const char *uid, int n, bool persist,
			   const char *child)
{
	int ready[2], go[2];
	char dev[12], rfd[8], gfd[8], ch;

	KVS_CHECK_OK(pipe(ready));
	KVS_CHECK_OK(pipe(go));
	fcntl(ready[0], F_SETFD, FD_CLOEXEC);
	fcntl(go[1], F_SETFD, FD_CLOEXEC);
	snprintf(rfd, sizeof(rfd), "%d", ready[1]);
	snprintf(gfd, sizeof(gfd), "%d", go[0]);
	r->n = 0;
	for (int i = 0; i < n; i++) {
		snprintf(dev, sizeof(dev), "%d", i);
		const char *av[] = { uid, dev, persist ? "1" : "0", rfd, gfd, NULL };
		r->pid[r->n] = kvs_test_spawn(child, av);
		KVS_CHECK(r->pid[r->n] > 0);
		r->n++;
		KVS_CHECK_EQ(read(ready[0], &ch, 1), 1);
	}
	close(ready[0]);
	close(ready[1]);
	close(go[0]);
	r->go = go[1];
	return KVS_TEST_PASS;
}

kvs_test_rc ranks_start(struct ranks *r, const char *uid, int n, bool persist)
{
	return ranks_start_as(r, uid, n, persist, "rank");
}

/* Start n ranks (devices 0..n-1) on uid that load together: each opens, then
 * all are let go at once, so their gets of each shard meet one read in flight
 * (reads held latency_ns). */
kvs_test_rc ranks_start_together(struct ranks *r, const char *uid, int n,
				 uint64_t latency_ns)
{
	int ready[2], go[2], load[2];
	char dev[12], rfd[8], gfd[8], lfd[8], lat[24], ch;

	KVS_CHECK_OK(pipe(ready));
	KVS_CHECK_OK(pipe(go));
	KVS_CHECK_OK(pipe(load));
	fcntl(ready[0], F_SETFD, FD_CLOEXEC);
	fcntl(go[1], F_SETFD, FD_CLOEXEC);
	fcntl(load[1], F_SETFD, FD_CLOEXEC);
	snprintf(rfd, sizeof(rfd), "%d", ready[1]);
	snprintf(gfd, sizeof(gfd), "%d", go[0]);
	snprintf(lfd, sizeof(lfd), "%d", load[0]);
	snprintf(lat, sizeof(lat), "%llu", (unsigned long long)latency_ns);
	r->n = 0;
	for (int i = 0; i < n; i++) {
		snprintf(dev, sizeof(dev), "%d", i);
		const char *av[] = { uid, dev, "0", rfd, gfd, lfd, lat, NULL };
		r->pid[r->n] = kvs_test_spawn("rank", av);
		KVS_CHECK(r->pid[r->n] > 0);
		r->n++;
		KVS_CHECK_EQ(read(ready[0], &ch, 1), 1); /* "o": opened */
	}
	close(load[0]);
	close(load[1]); /* EOF: everyone loads now */
	for (int i = 0; i < n; i++)
		KVS_CHECK_EQ(read(ready[0], &ch, 1), 1); /* "x": loaded */
	close(ready[0]);
	close(ready[1]);
	close(go[0]);
	r->go = go[1];
	return KVS_TEST_PASS;
}

/* Let the ranks close their stores and exit 0. */
kvs_test_rc ranks_stop(struct ranks *r)
{
	close(r->go);
	for (int i = 0; i < r->n; i++)
		KVS_CHECK_EQ(kvs_test_reap(r->pid[i], 20000), 0);
	return KVS_TEST_PASS;
}

kvs_test_rc ranks_kill(struct ranks *r)
{
	for (int i = 0; i < r->n; i++) {
		kill(r->pid[i], SIGKILL);
		KVS_CHECK_EQ(kvs_test_reap(r->pid[i], 10000), 128 + SIGKILL);
	}
	close(r->go);
	return KVS_TEST_PASS;
}

/* `PROG /path/to/kvshare [case...]`; exec'd children get `--child ...`. */
int tools_admin_main(int argc, char **argv, const struct kvs_test_case *cases, size_t ncases,
		     const struct kvs_test_child *children, size_t nchildren)
{
	if (argc >= 2 && argv[1][0] == '/') {
		ta_cli = argv[1];
		argv[1] = argv[0];
		argc--;
		argv++;
		if (access(ta_cli, X_OK)) {
			fprintf(stderr, "%s: not an executable: %s\n", argv[0], strerror(errno));
			return 1;
		}
	} else if (!(argc >= 3 && strcmp(argv[1], "--child") == 0)) {
		fprintf(stderr, "usage: %s /path/to/kvshare [case...]\n", argv[0]);
		return 2;
	}
	return kvs_test_run(argc, argv, cases, ncases, children, nchildren);
}
