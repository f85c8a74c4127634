/*
 * tests/tools_clean.c — `kvshare ls` and `kvshare clean` end to end (and stat
 * where a cache is dirty or not a cache), as an operator runs them: the CLI
 * binary (its path is this program's first argument, from CMake) is fork+exec'd
 * and judged by its exit code, stdout (parsed with jansson for --json) and
 * stderr, against caches held or left by real rank processes (exec'd copies of
 * this program; tools_admin_util.c).
 *
 *   ls_clean         a live and two stale caches: ls (both forms) states them,
 *                    --dry-run removes nothing, clean of the live one says why and
 *                    keeps it, clean of a stale one removes it and its data
 *   clean_all        a bare `clean` removes every stale cache and no live one, in a
 *                    private /dev/shm (mount namespace: the machine's other caches
 *                    are never touched); skipped without CAP_SYS_ADMIN
 *   clean_dead_creator  a creator killed -9 in its pre-fault (its data file made,
 *                    on a hugetlbfs of the test's own where possible, never
 *                    recorded): ls counts it, clean ID removes it with the
 *                    control file and the pages come back (before: "removed",
 *                    exit 0, and the file and its 16 pages left)
 *   clean_dirty      a rank killed -9 right after its dump_wait=cached dumps
 *                    returned (their writes held by a slow backend) leaves a stale
 *                    cache holding 8 DIRTY slots: ls (both forms) and stat (text,
 *                    --json, --prometheus) count them; clean ID and clean
 *                    --dry-run ID refuse it in one line naming the count and
 *                    `kvshare clean --discard-dirty ID` (exit 1, nothing
 *                    removed); with --discard-dirty --dry-run it would go, and
 *                    clean --discard-dirty ID removes it, naming the 8 dropped
 *                    (before: removed like any stale cache, the blocks lost)
 *   clean_all_dirty  the same cache beside a live and two stale ones, in a private
 *                    /dev/shm: a bare `clean` (and --dry-run) removes the stale
 *                    ones and skips the dirty one as it does the live one (a
 *                    line naming the count and the way out, exit 0); a bare
 *                    `clean --discard-dirty` then removes it, the live one kept
 *   not_a_cache      a FIFO named like a cache's control file: ls, clean (also
 *                    --dry-run) and stat each return at once, name it as no
 *                    cache and leave it (before: each hung in a blocking open)
 *   bad_input        usage errors (2) and failures (1): one line on stderr each;
 *                    --help of each subcommand
 */
#include <fcntl.h>
#include <limits.h>
#include <mntent.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>

#include "hugetlb_util.h"
#include "numa/numa.h"
#include "tools_admin_util.h"

/* ---- a cache holding dirty slots ---- */

/* exec'd: --child dirtier <uid> <ready fd>: open a rank store (device 0) whose
 * backend holds every write a minute, dump blocks 0..NBLK-1 with
 * dump_wait=cached (done once they are in the cache: DIRTY, their writes in
 * flight), say "x" on ready fd and wait to be killed -9. */
static kvs_test_rc dirtier_child(int argc, char **argv)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct st_task t;

	if (argc != 2)
		KVS_FAILF("usage: --child dirtier <uid> <ready fd>");
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	rank_cfg(&cfg, argv[0], 0, false, 60 * ST_SEC);
	cfg.dump_wait = KVS_DUMP_WAIT_CACHED;
	KVS_TRY(st_open(&cfg, &s));
	KVS_TRY(st_task_whole(&t, NBLK, 1, SHARD));
	for (uint32_t i = 0; i < NBLK; i++) {
		struct kvs_block_id b = st_block(13, i);
		st_task_set(&t, i, &b, 0);
	}
	KVS_TRY(st_dump(s, &t, 20000));
	KVS_CHECK_EQ(write(atoi(argv[1]), "x", 1), 1);
	pause(); /* until killed */
	KVS_FAILF("the dirtier was not killed");
}

/* While the dirtier lives: stat --json of its cache counts the DIRTY slots
 * apart from the READY and the empty ones. */
static kvs_test_rc dirty_live_stat(struct run *run, const char *uid)
{
	const char *a[] = { "stat", uid, "--json", NULL };
	json_t *j;

	KVS_TRY(cli_expect(run, 0, a));
	j = parse_json(run->out);
	KVS_CHECK(j != NULL);
	KVS_CHECK_EQ(jint(j, "slots/dirty"), NBLK);
	KVS_CHECK_EQ(jint(j, "slots/ready"), 0);
	KVS_CHECK_EQ(jint(j, "slots/empty"), 64 - NBLK); /* was 64: DIRTY ones counted empty */
	json_decref(j);
	return KVS_TEST_PASS;
}

/* A stale cache uid holding NBLK DIRTY slots: its only rank's cached dumps
 * returned, then it was killed -9 with their writes in flight.  With run, the
 * live cache's stat is checked first (dirty_live_stat). */
static kvs_test_rc dirty_cache(char *uid, size_t len, struct run *run)
{
	char fdstr[16], ch;
	int fds[2];
	pid_t pid;

	kvs_test_unique_id(uid, len, "tdirty");
	KVS_CHECK_OK(pipe(fds));
	fcntl(fds[0], F_SETFD, FD_CLOEXEC);
	snprintf(fdstr, sizeof(fdstr), "%d", fds[1]);
	const char *av[] = { uid, fdstr, NULL };
	pid = kvs_test_spawn("dirtier", av);
	KVS_CHECK(pid > 0);
	close(fds[1]);
	if (read(fds[0], &ch, 1) != 1) { /* it failed (said why): no "x" */
		close(fds[0]);
		KVS_CHECK_EQ(kvs_test_reap(pid, 10000), 0);
		KVS_FAILF("the dirtier ended before its dumps returned");
	}
	close(fds[0]);
	kvs_test_rc rc = run ? dirty_live_stat(run, uid) : KVS_TEST_PASS;
	kill(pid, SIGKILL);
	KVS_CHECK_EQ(kvs_test_reap(pid, 10000), 128 + SIGKILL);
	KVS_CHECK(ctl_exists(uid) && data_exists(uid));
	return rc;
}

/* ---- ls and clean ---- */

static json_t *ls_find(json_t *ls, const char *uid)
{
	json_t *arr = json_object_get(ls, "caches");

	for (size_t i = 0; i < json_array_size(arr); i++) {
		json_t *e = json_array_get(arr, i);

		if (strcmp(json_string_value(json_object_get(e, "unique_id")), uid) == 0)
			return e;
	}
	return NULL;
}

/* A line of `kvshare ls` naming uid has state `state`. */
static kvs_test_rc ls_line(const char *out, const char *uid, const char *state)
{
	char want[160];

	snprintf(want, sizeof(want), "\n%-40s %-6s ", uid, state);
	return has(out, want);
}

/* A live cache (held by this process, device 0), a stale one (its rank killed),
 * a stale persistent one (cleanly closed). */
static kvs_test_rc caches_make(char *live, char *stale, char *pers, struct kvs_store **held)
{
	struct kvs_store_config cfg;
	struct kvs_store *s = NULL;
	struct ranks r;

	kvs_test_unique_id(live, 80, "tlive");
	kvs_test_unique_id(stale, 80, "tstale");
	kvs_test_unique_id(pers, 80, "tpers");
	rank_cfg(&cfg, live, 0, false, 20000);
	KVS_TRY(st_open(&cfg, held));
	KVS_TRY(ranks_start(&r, stale, 1, false));
	KVS_TRY(ranks_kill(&r));
	rank_cfg(&cfg, pers, 0, true, 20000);
	KVS_TRY(st_open(&cfg, &s));
	kvs_store_close(s);
	KVS_CHECK(ctl_exists(live) && ctl_exists(stale) && ctl_exists(pers));
	return KVS_TEST_PASS;
}

static kvs_test_rc test_ls_clean(void)
{
	struct run *run = calloc(1, sizeof(*run));
	struct kvs_store *held = NULL;
	char live[80], stale[80], pers[80], want[256];
	json_t *j, *e;

	KVS_CHECK(run);
	KVS_TRY(caches_make(live, stale, pers, &held));

	const char *a_lsj[] = { "ls", "--json", NULL };
	KVS_TRY(cli_expect(run, 0, a_lsj));
	j = parse_json(run->out);
	KVS_CHECK(j != NULL);
	e = ls_find(j, live);
	KVS_CHECK(e != NULL);
	KVS_CHECK(strcmp(json_string_value(json_object_get(e, "state")), "live") == 0);
	KVS_CHECK(strcmp(json_string_value(json_object_get(e, "header")), "ready") == 0);
	KVS_CHECK_EQ(jint(e, "ranks_live"), 1);
	KVS_CHECK_EQ(jint(e, "gpu_ranks_live"), 0); /* this process copies with the host engine */
	KVS_CHECK_EQ(jint(e, "cpu_ranks_live"), 1);
	KVS_CHECK_EQ(json_integer_value(json_array_get(json_object_get(e, "pids"), 0)), getpid());
	KVS_CHECK_EQ(jint(e, "owner_uid"), geteuid());
	KVS_CHECK_EQ(jint(e, "slot_count"), 64);
	KVS_CHECK(jint(e, "size_bytes") > 64 * SHARD);
	KVS_CHECK(strcmp(json_string_value(json_object_get(e, "backing")), "shm") == 0);
	e = ls_find(j, stale);
	KVS_CHECK(e != NULL);
	KVS_CHECK(strcmp(json_string_value(json_object_get(e, "state")), "stale") == 0);
	KVS_CHECK_EQ(jint(e, "ranks_live"), 0);
	KVS_CHECK(json_is_false(json_object_get(e, "persist")));
	e = ls_find(j, pers);
	KVS_CHECK(e != NULL);
	KVS_CHECK(strcmp(json_string_value(json_object_get(e, "state")), "stale") == 0);
	KVS_CHECK(json_is_true(json_object_get(e, "persist")));
	json_decref(j);

	const char *a_ls[] = { "ls", NULL };
	KVS_TRY(cli_expect(run, 0, a_ls));
	KVS_TRY(ls_line(run->out, live, "live"));
	KVS_TRY(has(run->out, " 1 (0 gpu, 1 cpu) ")); /* was "1 (1 gpu)": a CPU-only rank */
	KVS_TRY(ls_line(run->out, stale, "stale"));
	KVS_TRY(ls_line(run->out, pers, "stale"));

	/* --dry-run removes nothing, named or not. */
	const char *a_dry1[] = { "clean", "--dry-run", stale, NULL };
	KVS_TRY(cli_expect(run, 0, a_dry1));
	snprintf(want, sizeof(want), "would remove %s (stale", stale);
	KVS_TRY(has(run->out, want));
	const char *a_dry[] = { "clean", "--dry-run", NULL };
	KVS_TRY(cli_expect(run, 0, a_dry));
	KVS_TRY(has(run->out, want));
	snprintf(want, sizeof(want), "skipped %s: live: 1 rank attached (pids %d)", live, (int)getpid());
	KVS_TRY(has(run->out, want));
	KVS_CHECK(ctl_exists(live) && ctl_exists(stale) && ctl_exists(pers));
	KVS_CHECK(data_exists(stale));

	/* The live cache: refused, with the reason; untouched. */
	const char *a_live[] = { "clean", live, NULL };
	KVS_TRY(cli_expect(run, 1, a_live));
	snprintf(want, sizeof(want), "live: 1 rank attached (pids %d): not removed", (int)getpid());
	KVS_TRY(one_line_err(run, want));
	KVS_CHECK(ctl_exists(live) && data_exists(live));

	/* The stale ones: removed, data too. */
	const char *a_stale[] = { "clean", stale, NULL };
	KVS_TRY(cli_expect(run, 0, a_stale));
	snprintf(want, sizeof(want), "removed %s (stale", stale);
	KVS_TRY(has(run->out, want));
	KVS_CHECK(!ctl_exists(stale) && !data_exists(stale));
	const char *a_pers[] = { "clean", pers, NULL };
	KVS_TRY(cli_expect(run, 0, a_pers));
	KVS_CHECK(!ctl_exists(pers) && !data_exists(pers));
	KVS_TRY(cli_expect(run, 1, a_stale)); /* gone now */
	KVS_TRY(one_line_err(run, "no cache"));

	/* The live one still works. */
	KVS_CHECK(ctl_exists(live) && data_exists(live));
	KVS_CHECK_OK(kvs_cache_check(kvs_store_cache(held)));
	kvs_store_close(held);
	KVS_CHECK(!ctl_exists(live));
	free(run);
	return KVS_TEST_PASS;
}

/* In a child of the test (it alone changes its mounts): a private mount
 * namespace with its own /dev/shm, so that the machine's other caches are never
 * touched.  Skips without CAP_SYS_ADMIN. */
static kvs_test_rc private_shm(void)
{
	if (unshare(CLONE_NEWNS))
		KVS_SKIP("unshare(CLONE_NEWNS): %s (needs CAP_SYS_ADMIN)", strerror(errno));
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
	    mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777"))
		KVS_SKIP("a private tmpfs on /dev/shm: %s", strerror(errno));
	return KVS_TEST_PASS;
}

/* Run fn in a forked child (one that may call private_shm): its result. */
static kvs_test_rc in_child(kvs_test_rc (*fn)(void *))
{
	pid_t pid = kvs_test_fork(fn, NULL);
	int rc;

	KVS_CHECK(pid > 0);
	rc = kvs_test_reap(pid, 60000);
	if (rc == KVS_TEST_SKIP.code)
		return KVS_TEST_SKIP;
	KVS_CHECK_EQ(rc, 0);
	return KVS_TEST_PASS;
}

/* In a private mount namespace with its own /dev/shm: a bare `clean` removes
 * every stale cache and keeps the live one; `ls` then lists only that one. */
static kvs_test_rc clean_all_child(void *arg)
{
	struct run *run = calloc(1, sizeof(*run));
	struct kvs_store *held = NULL;
	char live[80], stale[80], pers[80];
	json_t *j;

	(void)arg;
	KVS_CHECK(run);
	KVS_TRY(private_shm());
	KVS_TRY(caches_make(live, stale, pers, &held));
	const char *a[] = { "clean", NULL };
	KVS_TRY(cli_expect(run, 0, a));
	KVS_TRY(has(run->out, "removed 2 stale caches"));
	KVS_TRY(has(run->out, "1 live left alone"));
	KVS_CHECK(ctl_exists(live) && data_exists(live));
	KVS_CHECK(!ctl_exists(stale) && !data_exists(stale) && !ctl_exists(pers) && !data_exists(pers));
	const char *als[] = { "ls", "--json", NULL };
	KVS_TRY(cli_expect(run, 0, als));
	j = parse_json(run->out);
	KVS_CHECK(j != NULL);
	KVS_CHECK_EQ(json_array_size(json_object_get(j, "caches")), 1);
	KVS_CHECK(ls_find(j, live) != NULL);
	json_decref(j);
	KVS_CHECK_OK(kvs_cache_check(kvs_store_cache(held)));
	kvs_store_close(held);
	KVS_TRY(cli_expect(run, 0, als));
	KVS_TRY(has(run->out, "\"caches\": []"));
	free(run);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_clean_all(void)
{
	return in_child(clean_all_child);
}

/* ---- a creator killed in its pre-fault ---- */

#define PF_PAGES 16 /* the creator's data segment: 16 pages of 2 MiB */


/* exec'd: --child prefaulter <uid> <fd> <huge>: create a cache of PF_PAGES * 2
 * MiB (on hugetlbfs when huge is 1: the mount is found when the program
 * starts, hence exec), stopped in its pre-fault. */
static kvs_test_rc prefaulter_child(int argc, char **argv)
{
	struct kvs_cache_config cfg;
	struct kvs_cache *c = NULL;

	if (argc != 3)
		KVS_FAILF("usage: --child prefaulter <uid> <fd> <huge>");
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	kvs_cache_config_init(&cfg);
	snprintf(cfg.unique_id, sizeof(cfg.unique_id), "%s", argv[0]);
	cfg.slot_bytes = 65536;
	cfg.slot_count = PF_PAGES * 32;
	cfg.numa = KVS_NUMA_OFF;
	cfg.hugetlb = atoi(argv[2]) ? KVS_HUGETLB_REQUIRED : KVS_HUGETLB_OFF;
	cfg.log = st_log;
	kvs_test_park_fd = atoi(argv[1]);
	kvs_numa_test_prefault_hook = kvs_test_park_hook;
	KVS_CHECK_OK(kvs_cache_open(&cfg, &c));
	KVS_FAILF("the creator was not stopped in its pre-fault");
}

/* Pages of the hugetlbfs at mnt in use (reserved or allocated): its size= limit
 * less its free blocks. */
static long long huge_used(const char *mnt)
{
	struct statfs sfs;

	return statfs(mnt, &sfs) ? -1 : (long long)(sfs.f_blocks - sfs.f_bfree);
}

/* In a private mount namespace: a tmpfs /dev/shm and (where the kernel and the
 * pool allow) a hugetlbfs of our own, size=64M: a creator killed -9 in its
 * pre-fault leaves a named control file and a data file its header never
 * recorded, PF_PAGES pages held.  ls counts that file in the cache's size;
 * clean --dry-run removes nothing; clean ID removes both files and gives the
 * pages back.  Before, clean said "removed" and exit 0 and left the data file
 * with its pages. */
static kvs_test_rc dead_creator_body(struct run *run, const char *mnt)
{
	char uid[80], data[256], fdstr[16], want[200];
	bool huge = mnt != NULL;
	int fds[2];
	json_t *j, *e;
	pid_t pid;

	printf("  the creator's data segment on %s\n", huge ? mnt : "/dev/shm (no hugetlbfs here)");
	kvs_test_unique_id(uid, sizeof(uid), "tprefault");
	snprintf(data, sizeof(data), "%s/kvshare.%s.data.0", huge ? mnt : "/dev/shm", uid);
	KVS_CHECK_OK(pipe(fds));
	fcntl(fds[0], F_SETFD, FD_CLOEXEC);
	snprintf(fdstr, sizeof(fdstr), "%d", fds[1]);
	const char *av[] = { uid, fdstr, huge ? "1" : "0", NULL };
	pid = kvs_test_spawn("prefaulter", av);
	KVS_TRY(kvs_test_kill_parked(pid, fds[0], fds[1])); /* in its pre-fault */
	KVS_CHECK(ctl_exists(uid) && access(data, F_OK) == 0);
	if (huge)
		KVS_CHECK_EQ(huge_used(mnt), PF_PAGES);

	const char *a_lsj[] = { "ls", "--json", NULL };
	KVS_TRY(cli_expect(run, 0, a_lsj));
	j = parse_json(run->out);
	KVS_CHECK(j != NULL);
	e = ls_find(j, uid);
	KVS_CHECK(e != NULL);
	KVS_CHECK(strcmp(json_string_value(json_object_get(e, "state")), "stale") == 0);
	KVS_CHECK(strcmp(json_string_value(json_object_get(e, "header")), "creating") == 0);
	KVS_CHECK_EQ(jint(e, "data_bytes"), PF_PAGES << 21); /* found by its name */
	json_decref(j);
	const char *a_dry[] = { "clean", "--dry-run", uid, NULL };
	KVS_TRY(cli_expect(run, 0, a_dry));
	snprintf(want, sizeof(want), "would remove %s (stale, ", uid);
	KVS_TRY(has(run->out, want));
	KVS_TRY(has(run->out, "creator died during creation"));
	KVS_CHECK(ctl_exists(uid) && access(data, F_OK) == 0);

	const char *a_clean[] = { "clean", uid, NULL };
	KVS_TRY(cli_expect(run, 0, a_clean));
	snprintf(want, sizeof(want), "removed %s (stale, ", uid);
	if (access(data, F_OK) == 0)
		KVS_FAILF("clean said:\n%s%sand left %s", run->out, run->err, data);
	KVS_CHECK(!ctl_exists(uid));
	KVS_TRY(has(run->out, want));
	KVS_TRY(has(run->err, "removed 1 data file its header did not record"));
	if (huge)
		KVS_CHECK_EQ(huge_used(mnt), 0); /* the pages are back */
	return KVS_TEST_PASS;
}

/* Detach every hugetlbfs mount of this (private) mount namespace. */
static kvs_test_rc detach_hugetlbfs(void)
{
	FILE *m = setmntent("/proc/self/mounts", "re");
	struct mntent *e;
	char dirs[8][PATH_MAX];
	int n = 0;

	KVS_CHECK(m != NULL);
	while ((e = getmntent(m)) && n < 8)
		if (strcmp(e->mnt_type, "hugetlbfs") == 0)
			snprintf(dirs[n++], sizeof(dirs[0]), "%s", e->mnt_dir);
	endmntent(m);
	for (int i = 0; i < n; i++)
		if (umount2(dirs[i], MNT_DETACH))
			KVS_FAILF("umount2(%s) in a private namespace: %s", dirs[i], strerror(errno));
	return KVS_TEST_PASS;
}

static kvs_test_rc dead_creator_child(void *arg)
{
	struct run *run = calloc(1, sizeof(*run));
	char mnt[] = "/tmp/kvs-hugetlbfs.XXXXXX";
	bool huge = false;
	kvs_test_rc rc;

	(void)arg;
	KVS_CHECK(run);
	KVS_TRY(private_shm());
	/* ours the only hugetlbfs in this namespace: the creator takes the first
	 * it finds (the machine's /dev/hugepages, on a machine set up as .ci/run
	 * does, would take the data file out of this case's sight) */
	KVS_TRY(detach_hugetlbfs());
	if (KVS_KERNEL && hugetlb_test_meminfo("HugePages_Free") >= PF_PAGES && mkdtemp(mnt)) {
		huge = mount("none", mnt, "hugetlbfs", 0, "pagesize=2M,size=64M") == 0;
		if (!huge)
			rmdir(mnt);
	}
	rc = dead_creator_body(run, huge ? mnt : NULL);
	if (huge) { /* whatever the body did: the pages go with the mount */
		umount2(mnt, MNT_DETACH);
		rmdir(mnt);
	}
	free(run);
	return rc;
}

static kvs_test_rc test_clean_dead_creator(void)
{
	return in_child(dead_creator_child);
}

/* ---- dirty slots ---- */

/* The refusal of a cache holding dirty slots: a line naming uid, the count and
 * the way out; named by the user (single): the one line on stderr, else a
 * "skipped" line among stdout's. */
static kvs_test_rc dirty_refusal(const struct run *r, const char *uid, bool dry, bool single)
{
	char want[300], fix[200];

	snprintf(fix, sizeof(fix), "dirty slots (dumped, their blocks not in the backend yet; the next "
		 "store to open it writes them); kvshare clean --discard-dirty %s removes it and "
		 "drops them\n", uid);
	if (!single) {
		snprintf(want, sizeof(want), "skipped %s: it holds %u %s", uid, NBLK, fix);
		return has(r->out, want);
	}
	snprintf(want, sizeof(want), "kvshare clean: %s: %s: it holds %u %s", uid,
		 dry ? "would not be removed" : "not removed", NBLK, fix);
	return one_line_err(r, want);
}

static kvs_test_rc test_clean_dirty(void)
{
	struct run *run = calloc(1, sizeof(*run));
	char uid[80], want[300], prom[128];
	json_t *j, *e;

	KVS_CHECK(run);
	KVS_TRY(dirty_cache(uid, sizeof(uid), run));

	/* ls and stat count them */
	const char *a_lsj[] = { "ls", "--json", NULL }, *a_ls[] = { "ls", NULL };
	KVS_TRY(cli_expect(run, 0, a_lsj));
	j = parse_json(run->out);
	KVS_CHECK(j != NULL);
	e = ls_find(j, uid);
	KVS_CHECK(e != NULL);
	KVS_CHECK(strcmp(json_string_value(json_object_get(e, "state")), "stale") == 0);
	KVS_CHECK_EQ(jint(e, "slots_dirty"), NBLK);
	json_decref(j);
	KVS_TRY(cli_expect(run, 0, a_ls));
	snprintf(want, sizeof(want), "\n%-40s %-6s %-9s %10s %8u ", uid, "stale", "0", "64", NBLK);
	KVS_TRY(has(run->out, want));
	KVS_TRY(has(run->out, " DIRTY "));
	const char *a_stat[] = { "stat", uid, NULL }, *a_statj[] = { "stat", uid, "--json", NULL };
	KVS_TRY(cli_expect(run, 1, a_stat)); /* stale: described, exit 1 */
	snprintf(want, sizeof(want), "dirty      %u slots dumped, their blocks not in the backend yet", NBLK);
	KVS_TRY(has(run->out, want));
	KVS_TRY(cli_expect(run, 1, a_statj));
	j = parse_json(run->out);
	KVS_CHECK(j != NULL);
	KVS_CHECK_EQ(jint(j, "slots_dirty"), NBLK);
	json_decref(j);
	snprintf(prom, sizeof(prom), "/tmp/kvs-dirty-%d.prom", (int)getpid());
	const char *a_prom[] = { "stat", uid, "--prometheus", prom, NULL };
	KVS_TRY(cli_expect(run, 1, a_prom));
	KVS_TRY(check_prom_file(prom, run->out, sizeof(run->out)));
	unlink(prom);
	snprintf(want, sizeof(want), "kvshare_slots{unique_id=\"%s\",state=\"dirty\"} %u\n", uid, NBLK);
	KVS_TRY(has(run->out, want));

	/* refused, with the count and the way out; nothing removed */
	const char *a_dry[] = { "clean", "--dry-run", uid, NULL }, *a_clean[] = { "clean", uid, NULL };
	KVS_TRY(cli_expect(run, 1, a_dry));
	KVS_TRY(dirty_refusal(run, uid, true, true));
	KVS_CHECK(run->out[0] == '\0');
	KVS_TRY(cli_expect(run, 1, a_clean));
	KVS_TRY(dirty_refusal(run, uid, false, true));
	KVS_CHECK(run->out[0] == '\0');
	KVS_CHECK(ctl_exists(uid) && data_exists(uid));

	/* --discard-dirty: --dry-run says it would go, then it goes */
	const char *a_ddry[] = { "clean", "--dry-run", "--discard-dirty", uid, NULL };
	KVS_TRY(cli_expect(run, 0, a_ddry));
	snprintf(want, sizeof(want), "would remove %s (stale, ", uid);
	KVS_TRY(has(run->out, want));
	snprintf(want, sizeof(want), "; would discard %u dirty slots)\n", NBLK);
	KVS_TRY(has(run->out, want));
	KVS_CHECK(ctl_exists(uid) && data_exists(uid));
	const char *a_discard[] = { "clean", "--discard-dirty", uid, NULL };
	KVS_TRY(cli_expect(run, 0, a_discard));
	snprintf(want, sizeof(want), "removed %s (stale, ", uid);
	KVS_TRY(has(run->out, want));
	snprintf(want, sizeof(want), "; discarded %u dirty slots)\n", NBLK);
	KVS_TRY(has(run->out, want));
	snprintf(want, sizeof(want), "removed with %u slots dumped but not in the backend", NBLK);
	KVS_TRY(has(run->err, want)); /* the library's own count, under the lifecycle lock */
	KVS_CHECK(!ctl_exists(uid) && !data_exists(uid));
	free(run);
	return KVS_TEST_PASS;
}

/* In a private /dev/shm: the dirty cache beside caches_make's three.  A bare
 * clean (and its --dry-run) removes the two stale ones and skips the live one
 * and the dirty one (saying why), exit 0; a bare clean --discard-dirty then
 * removes the dirty one and keeps the live one. */
static kvs_test_rc clean_all_dirty_child(void *arg)
{
	struct run *run = calloc(1, sizeof(*run));
	struct kvs_store *held = NULL;
	char live[80], stale[80], pers[80], dirty[80], want[200];

	(void)arg;
	KVS_CHECK(run);
	KVS_TRY(private_shm());
	KVS_TRY(caches_make(live, stale, pers, &held));
	KVS_TRY(dirty_cache(dirty, sizeof(dirty), NULL));
	const char *a_dry[] = { "clean", "--dry-run", NULL };
	KVS_TRY(cli_expect(run, 0, a_dry));
	KVS_TRY(dirty_refusal(run, dirty, true, false));
	KVS_TRY(has(run->out, "would remove 2 stale caches"));
	KVS_TRY(has(run->out, "1 live left alone; 1 stale cache would be kept for its dirty slots "
			      "(kvshare clean --discard-dirty ID drops them)"));
	KVS_CHECK(ctl_exists(stale) && ctl_exists(pers) && ctl_exists(dirty));
	const char *a[] = { "clean", NULL };
	KVS_TRY(cli_expect(run, 0, a));
	KVS_TRY(dirty_refusal(run, dirty, false, false));
	KVS_TRY(has(run->out, "removed 2 stale caches"));
	KVS_TRY(has(run->out, "1 live left alone; 1 stale cache kept for its dirty slots"));
	KVS_CHECK(!ctl_exists(stale) && !ctl_exists(pers));
	KVS_CHECK(ctl_exists(live) && ctl_exists(dirty) && data_exists(dirty));
	const char *a_discard[] = { "clean", "--discard-dirty", NULL };
	KVS_TRY(cli_expect(run, 0, a_discard));
	snprintf(want, sizeof(want), "removed %s (stale, ", dirty);
	KVS_TRY(has(run->out, want));
	KVS_TRY(has(run->out, "removed 1 stale cache"));
	KVS_CHECK(!ctl_exists(dirty) && !data_exists(dirty));
	KVS_CHECK(ctl_exists(live) && data_exists(live));
	KVS_CHECK_OK(kvs_cache_check(kvs_store_cache(held)));
	kvs_store_close(held);
	free(run);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_clean_all_dirty(void)
{
	return in_child(clean_all_dirty_child);
}

/* ---- not a cache ---- */

/* A FIFO named like a test id's control file (nobody ever writes to it): ls,
 * clean (named, --dry-run named and not) and stat each answer at once, naming
 * it as no cache, and leave it.  Before, each opened it with a blocking open
 * and hung for ever (cli_run kills a CLI that is not done in 10 s). */
static kvs_test_rc test_not_a_cache(void)
{
	struct run *run = calloc(1, sizeof(*run));
	char uid[80], path[256], want[400];
	struct stat st;
	json_t *j, *e;
	kvs_test_rc rc = KVS_TEST_PASS;

	KVS_CHECK(run);
	kvs_test_unique_id(uid, sizeof(uid), "tfifo");
	snprintf(path, sizeof(path), "/dev/shm/kvshare.%s.ctl", uid);
	KVS_CHECK_OK(mkfifo(path, 0600));
	snprintf(want, sizeof(want), "%s is a FIFO, not a regular file: not a kvshare cache", path);

	const char *a_ls[] = { "ls", NULL }, *a_lsj[] = { "ls", "--json", NULL };
	const char *a_clean[] = { "clean", uid, NULL }, *a_dry1[] = { "clean", "--dry-run", uid, NULL };
	const char *a_dry[] = { "clean", "--dry-run", NULL }, *a_stat[] = { "stat", uid, NULL };
	struct {
		const char *const *args;
		int code;
		bool one_line; /* stderr: the one line naming it (else stdout names it) */
	} runs[] = {
		{ a_ls, 0, false },
		{ a_clean, 1, true },
		{ a_dry1, 1, true },
		{ a_dry, 1, false }, /* a line among the others' */
		{ a_stat, 1, true },
	};
	for (size_t i = 0; i < KVS_ARRAY_LEN(runs) && rc.code == 0; i++) {
		rc = cli_expect(run, runs[i].code, runs[i].args);
		if (rc.code == 0 && runs[i].one_line)
			rc = one_line_err(run, want);
		else if (rc.code == 0)
			rc = has(i == 0 ? run->out : run->err, want);
		if (rc.code == 0 && lstat(path, &st) != 0)
			rc = KVS_TEST_FAIL;
	}
	if (rc.code == 0)
		rc = cli_expect(run, 0, a_lsj);
	if (rc.code == 0) {
		j = parse_json(run->out);
		e = j ? ls_find(j, uid) : NULL;
		if (!e || strcmp(json_string_value(json_object_get(e, "state")), "unknown") ||
		    !strstr(json_string_value(json_object_get(e, "error")), want))
			rc = KVS_TEST_FAIL;
		json_decref(j);
	}
	KVS_CHECK(lstat(path, &st) == 0 && S_ISFIFO(st.st_mode)); /* left as it was */
	unlink(path); /* never left behind: it would hang an old CLI */
	free(run);
	if (rc.code)
		KVS_FAILF("a FIFO at %s: see above", path);
	return KVS_TEST_PASS;
}

/* ---- bad input ---- */

static kvs_test_rc test_bad_input(void)
{
	static const struct {
		int code;
		const char *what; /* in the one stderr line */
		const char *args[6];
	} bad[] = {
		{ 2, "missing UNIQUE_ID", { "stat", NULL } },
		{ 2, "unknown option '--bogus'", { "stat", "x", "--bogus", NULL } },
		{ 2, "unknown option '-z'", { "stat", "x", "-z", NULL } },
		{ 2, "bad --watch 'abc'", { "stat", "x", "--watch", "abc", NULL } },
		{ 2, "bad --watch '0'", { "stat", "x", "--watch", "0", NULL } },
		{ 2, "bad --watch '5s'", { "stat", "x", "--watch", "5s", NULL } },
		{ 2, "bad --watch 'nan'", { "stat", "x", "--watch", "nan", NULL } },
		{ 2, "needs a value", { "stat", "x", "--watch", NULL } },
		{ 2, "needs a value", { "stat", "x", "--prometheus", NULL } },
		{ 2, "one UNIQUE_ID only", { "stat", "x", "y", NULL } },
		{ 2, "invalid unique_id '../etc'", { "stat", "../etc", NULL } },
		{ 2, "--quiet without --prometheus", { "stat", "x", "--quiet", NULL } },
		{ 1, "no cache 't.none.0'", { "stat", "t.none.0", NULL } },
		{ 2, "unknown option '--all'", { "ls", "--all", NULL } },
		{ 2, "unexpected argument 'x'", { "ls", "x", NULL } },
		{ 2, "unknown option '--force'", { "clean", "--force", NULL } },
		{ 2, "spell --discard-dirty out", { "clean", "--discard", "x", NULL } },
		{ 2, "one UNIQUE_ID at most", { "clean", "a", "b", NULL } },
		{ 2, "invalid unique_id 'a/b'", { "clean", "a/b", NULL } },
		{ 1, "no cache 't.none.0'", { "clean", "t.none.0", NULL } },
		{ 1, "no cache 't.none.0'", { "clean", "--dry-run", "t.none.0", NULL } },
	};
	static const char *const helps[] = { "stat", "ls", "clean" };
	struct run *run = calloc(1, sizeof(*run));

	KVS_CHECK(run);
	for (size_t i = 0; i < KVS_ARRAY_LEN(bad); i++) {
		KVS_TRY(cli_expect(run, bad[i].code, bad[i].args));
		KVS_TRY(one_line_err(run, bad[i].what));
		KVS_CHECK(run->out[0] == '\0');
	}
	for (size_t i = 0; i < KVS_ARRAY_LEN(helps); i++) {
		const char *a[] = { helps[i], "--help", NULL };
		char want[64];

		KVS_TRY(cli_expect(run, 0, a));
		snprintf(want, sizeof(want), "usage: kvshare %s", helps[i]);
		KVS_TRY(has(run->out, want));
		KVS_CHECK(run->err[0] == '\0');
	}
	free(run);
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "bad_input", test_bad_input },
	{ "ls_clean", test_ls_clean },
	{ "clean_all", test_clean_all },
	{ "clean_dead_creator", test_clean_dead_creator },
	{ "clean_dirty", test_clean_dirty },
	{ "clean_all_dirty", test_clean_all_dirty },
	{ "not_a_cache", test_not_a_cache },
};

static const struct kvs_test_child children[] = {
	{ "rank", rank_child },
	{ "prefaulter", prefaulter_child },
	{ "dirtier", dirtier_child },
};

int main(int argc, char **argv)
{
	return tools_admin_main(argc, argv, cases, KVS_ARRAY_LEN(cases), children,
				KVS_ARRAY_LEN(children));
}
