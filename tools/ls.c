/*
 * tools/ls.c — `kvshare ls` (the node's caches and their state) and `kvshare
 * clean` (remove the stale ones).
 *
 * Both look without attaching: every control file /dev/shm/kvshare.<id>.ctl is
 * described by kvs_cache_inspect(), which opens it read-only, tests the rank
 * entries' liveness locks and validates a private copy of the header; it never
 * adopts, reaps or writes.  A cache is "live" while a rank entry's lock is held
 * by a process that is not a watcher (liveness comes from those locks:
 * docs/core.md, "Lifecycle and liveness"; watchers — monitors, a scheduler's
 * lookups — never keep a cache, so one held by watchers only is "stale", and
 * clean removes it: docs/core.md, "Looking without disturbing").  Data
 * files are found through the header's record (hugetlb_dir for hugetlbfs ones),
 * so a cache's size is its control file plus its recorded data segments; a
 * cache whose header records none (being created, its creator killed in the
 * pre-fault, another build's) counts the files named for it in /dev/shm and the
 * hugetlbfs mounts, which are what clean frees with it.  Data files with no
 * control file (removed by hand, or left by an older kvshare that removed only
 * the recorded ones) are listed by ls; nothing here removes them, since without
 * a control file there is no lock to exclude a new creator of the same name.
 *
 * A control file's name that holds no regular file (a FIFO, a socket, ...) is
 * never opened (kvs_cache_inspect says -KVS_ECORRUPT): ls lists it, and clean
 * and stat name it, as no cache; nothing here removes it.
 *
 * clean removes through kvs_cache_remove(), which takes the lifecycle lock and
 * refuses (-EBUSY) a cache any rank is attached to, whatever it was a moment
 * before (and judges the cache the name leads to then, should it have been
 * removed and made again meanwhile): the inspection only explains a refusal
 * ("live: 3 ranks attached (pids ...)") and decides what --dry-run would do.
 *
 * Dirty slots.  A slot a dump_wait=cached dump filled is DIRTY until its block
 * is in the backend; a cache holding any is the only record of those blocks,
 * so it outlives its last rank (stale, kept) for the next store that opens it
 * to write them (docs/store.md, "Dumps").  ls shows the count (DIRTY,
 * slots_dirty: kvs_cache_inspect), and clean refuses such a cache
 * (kvs_cache_remove: -ENOTEMPTY) with a line naming it, the count and the way
 * out, `kvshare clean --discard-dirty ID`, which removes it and drops them
 * (KVS_CACHE_DISCARD_DIRTY; the count dropped printed).  As for a live cache,
 * the refusal of a cache the user named is a failure (exit 1), while a bare
 * clean skips such caches, each named, and exits 0; --dry-run says which of
 * the two would happen.
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvshare.h"
#include "tools/cli.h"

#define SHM_DIR "/dev/shm"
#define CTL_PREFIX "kvshare."
#define CTL_SUFFIX ".ctl"

static const char *const ls_usage =
	"usage: kvshare ls [--json]\n"
	"\n"
	"List this node's kvshare caches (control files " SHM_DIR "/kvshare.<id>.ctl) without\n"
	"attaching to any: state (live: a process is attached, by the rank liveness locks;\n"
	"stale: none), live ranks, slots, dirty slots (dumped, their blocks not in the backend\n"
	"yet: a cache holding any is kept for the next store to write them), size (control +\n"
	"data), backing, owner uid, layout.\n"
	"A cache of another kvshare layout, a corrupt one or one being created is listed\n"
	"as such.  Data files whose control file is gone are listed at the end.\n"
	"\n"
	"  -j, --json   JSON\n"
	"  -h, --help   this text\n"
	"\n"
	"Exit: 0 ok, 1 failure, 2 bad usage.\n";

static const char *const clean_usage =
	"usage: kvshare clean [--dry-run] [--discard-dirty] [UNIQUE_ID]\n"
	"\n"
	"Remove stale caches (no process attached): their control file and their data\n"
	"files, the ones their header records and any other named for them in " SHM_DIR "\n"
	"and the hugetlbfs mounts (a creator killed before it recorded one).  A live\n"
	"cache is never removed: clean says why (\"live: 3 ranks attached (pids ...)\").\n"
	"A stale cache holding dirty slots (dumped by a dump_wait=cached dump, their blocks\n"
	"not in the backend yet: the next store to open the cache writes them) is not\n"
	"removed either, unless --discard-dirty says to drop them: clean names the count.\n"
	"Without UNIQUE_ID, every stale kvshare cache of the node is removed; live ones, and\n"
	"without --discard-dirty the ones holding dirty slots, are skipped.\n"
	"\n"
	"  -n, --dry-run       say what would be removed; remove nothing\n"
	"      --discard-dirty remove stale caches holding dirty slots too, dropping those\n"
	"                      blocks (they never reach the backend)\n"
	"  -h, --help          this text\n"
	"\n"
	"Exit: 0 ok (UNIQUE_ID removed, or everything stale removed but the caches kept\n"
	"for their dirty slots, each named), 1 failure (no such cache, UNIQUE_ID live or\n"
	"holding dirty slots, a removal failed), 2 bad usage.\n";

/* One cache found on the node. */
struct entry {
	int rc;                    /* kvs_cache_inspect's result (0, -EACCES, ...) */
	struct stat st;            /* of the control file (rc != 0: all we know) */
	struct kvs_cache_info info;
};

static char last_log[512];
/* The warnings of a removal, held until its result is known (held_len bytes):
 * printed after it, unless clean says the same itself (the refusal of a cache
 * holding dirty slots, which the library also logs). */
static char held[4096];
static size_t held_len;

/* Library log lines: the last one is kept for messages; warnings (e.g. "data
 * segments left behind") are worth showing. */
static void cli_log(void *arg, int level, const char *msg)
{
	int n;

	(void)arg;
	snprintf(last_log, sizeof(last_log), "%s", msg);
	if (level > KVS_LOG_WARN || held_len >= sizeof(held) - 1)
		return;
	n = snprintf(held + held_len, sizeof(held) - held_len, "kvshare: %s\n", msg);
	if (n > 0) /* truncated: the buffer is full */
		held_len += (size_t)n < sizeof(held) - held_len ? (size_t)n : sizeof(held) - 1 - held_len;
}

/* "kvshare.<id>.ctl" -> id (into buf), or false. */
static bool ctl_id(const char *name, char *buf, size_t len)
{
	size_t n = strlen(name), pre = strlen(CTL_PREFIX), suf = strlen(CTL_SUFFIX);

	if (n <= pre + suf || strncmp(name, CTL_PREFIX, pre) || strcmp(name + n - suf, CTL_SUFFIX))
		return false;
	n -= pre + suf;
	if (n >= len || n > KVS_UNIQUE_ID_MAX)
		return false;
	memcpy(buf, name + pre, n);
	buf[n] = '\0';
	return true;
}

/* ---- data files by name: kvshare.<id>.data.<n> in /dev/shm and hugetlbfs ---- */

/* hugetlbfs mounts from /proc/mounts, plus /dev/shm: up to max directories. */
static int data_dirs(char dirs[][256], int max)
{
	FILE *f = fopen("/proc/mounts", "re");
	char dev[256], dir[256], type[64];
	int n = 0;

	snprintf(dirs[n++], 256, SHM_DIR);
	if (!f)
		return n;
	while (n < max && fscanf(f, "%255s %255s %63s %*[^\n]", dev, dir, type) == 3)
		if (strcmp(type, "hugetlbfs") == 0)
			snprintf(dirs[n++], 256, "%s", dir);
	fclose(f);
	return n;
}

/* "kvshare.<id>.data.<n>" -> id (into buf, KVS_UNIQUE_ID_MAX + 1 bytes), or
 * false.  The last ".data.": an id may hold one. */
static bool data_id(const char *name, char *buf)
{
	const char *dot = NULL, *p = name + strlen(CTL_PREFIX);
	size_t n;

	if (strncmp(name, CTL_PREFIX, strlen(CTL_PREFIX)))
		return false;
	for (const char *q = strstr(p, ".data."); q; q = strstr(q + 1, ".data."))
		dot = q;
	if (!dot || !dot[6] || strspn(dot + 6, "0123456789") != strlen(dot + 6))
		return false;
	n = (size_t)(dot - p);
	if (n == 0 || n > KVS_UNIQUE_ID_MAX)
		return false;
	memcpy(buf, p, n);
	buf[n] = '\0';
	return true;
}

/* Call fn(path, id, arg) for each data file name of any cache. */
static void data_files(void (*fn)(const char *path, const char *id, void *arg), void *arg)
{
	char dirs[16][256], id[KVS_UNIQUE_ID_MAX + 1], path[4608];
	int nd = data_dirs(dirs, 16);

	for (int i = 0; i < nd; i++) {
		DIR *d = opendir(dirs[i]);
		struct dirent *de;

		if (!d)
			continue;
		while ((de = readdir(d))) {
			if (!data_id(de->d_name, id))
				continue;
			snprintf(path, sizeof(path), "%s/%s", dirs[i], de->d_name);
			fn(path, id, arg);
		}
		closedir(d);
	}
}

struct named_walk {
	const char *id;
	uint64_t bytes;
};

static void named_one(const char *path, const char *id, void *arg)
{
	struct named_walk *w = arg;
	struct stat st;

	if (strcmp(id, w->id) == 0 && lstat(path, &st) == 0 && S_ISREG(st.st_mode))
		w->bytes += (uint64_t)st.st_size;
}

/* The bytes of e's data files: the ones its header records (READY), else the
 * ones named for it (a cache being created, or whose creator died before it
 * recorded them; another build's): what a removal frees. */
static uint64_t data_bytes(const struct entry *e)
{
	struct named_walk w = { e->info.unique_id, 0 };

	if (e->rc)
		return 0;
	if (e->info.state == KVS_CACHE_INFO_READY)
		return e->info.data_bytes;
	data_files(named_one, &w);
	return w.bytes;
}

static int entry_cmp(const void *a, const void *b)
{
	return strcmp(((const struct entry *)a)->info.unique_id, ((const struct entry *)b)->info.unique_id);
}

/* Every cache of the node, sorted by unique_id.  Returns the count or -errno. */
static int scan(struct entry **out)
{
	DIR *d = opendir(SHM_DIR);
	struct dirent *de;
	struct entry *v = NULL;
	size_t n = 0, cap = 0;
	char id[KVS_UNIQUE_ID_MAX + 8], path[512];

	*out = NULL;
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		struct entry *e;
		int rc;

		if (!ctl_id(de->d_name, id, sizeof(id)))
			continue;
		if (n == cap) {
			struct entry *nv = realloc(v, (cap = cap ? 2 * cap : 16) * sizeof(*v));

			if (!nv) {
				free(v);
				closedir(d);
				return -ENOMEM;
			}
			v = nv;
		}
		e = &v[n];
		memset(e, 0, sizeof(*e));
		rc = kvs_cache_inspect(id, &e->info);
		if (rc == -ENOENT || rc == -EINVAL)
			continue; /* removed meanwhile, or not a name kvshare makes */
		e->rc = rc;
		snprintf(path, sizeof(path), SHM_DIR "/%s", de->d_name);
		if (lstat(path, &e->st) && rc == 0)
			memset(&e->st, 0, sizeof(e->st));
		snprintf(e->info.unique_id, sizeof(e->info.unique_id), "%s", id);
		n++;
	}
	closedir(d);
	if (n)
		qsort(v, n, sizeof(*v), entry_cmp);
	*out = v;
	return (int)n;
}

static const char *header_name(uint32_t state)
{
	switch (state) {
	case KVS_CACHE_INFO_READY: return "ready";
	case KVS_CACHE_INFO_CREATING: return "creating";
	case KVS_CACHE_INFO_LAYOUT: return "layout";
	default: return "corrupt";
	}
}

/* What the header state adds to live/stale, for people. */
static void note_of(const struct entry *e, char *buf, size_t len)
{
	const struct kvs_cache_info *in = &e->info;

	buf[0] = '\0';
	if (e->rc == -KVS_ECORRUPT) { /* no regular file at the name: never opened */
		kvs_cli_not_cache(buf, len, in->unique_id);
		return;
	}
	if (e->rc) {
		snprintf(buf, len, "cannot read: %s", kvs_strerror(e->rc));
		return;
	}
	switch (in->state) {
	case KVS_CACHE_INFO_READY:
		if (in->flags & KVS_CACHE_INFO_PERSIST)
			snprintf(buf, len, "persistent");
		break;
	case KVS_CACHE_INFO_CREATING:
		snprintf(buf, len, in->ranks_live ? "being created" : "creator died during creation");
		break;
	case KVS_CACHE_INFO_LAYOUT:
		snprintf(buf, len, "layout v%u: made by another kvshare build (not this one's layout)",
			 in->layout_version);
		break;
	default:
		snprintf(buf, len, "corrupt: %s", in->detail);
		break;
	}
}

/* Live entries that keep the cache: every one but those recorded as watchers
 * (one not readable counts: never call a cache stale under a process). */
static uint32_t keepers(const struct kvs_cache_info *in)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < in->ranks_live; i++)
		n += !in->live[i].recorded || in->live[i].device_id >= 0;
	return n;
}

/* "live: 2 ranks + 1 watcher attached (pids 10, 11, 12)". */
static void live_why(const struct kvs_cache_info *in, char *buf, size_t len)
{
	uint32_t gpu = 0, watch = 0, unknown = 0;
	size_t k;

	for (uint32_t i = 0; i < in->ranks_live; i++) {
		if (!in->live[i].recorded)
			unknown++;
		else if (in->live[i].device_id >= 0)
			gpu++;
		else
			watch++;
	}
	if (unknown == in->ranks_live)
		k = (size_t)snprintf(buf, len, "live: %u process%s attached", in->ranks_live,
				     in->ranks_live == 1 ? "" : "es");
	else if (watch == 0 && unknown == 0)
		k = (size_t)snprintf(buf, len, "live: %u rank%s attached", gpu, gpu == 1 ? "" : "s");
	else
		k = (size_t)snprintf(buf, len, "live: %u rank%s + %u watcher%s%s attached", gpu,
				     gpu == 1 ? "" : "s", watch, watch == 1 ? "" : "s",
				     unknown ? " + others" : "");
	if (unknown == in->ranks_live) {
		if (k < len)
			snprintf(buf + k, len - k, " (pids unknown: header not readable by this build)");
		return;
	}
	for (uint32_t i = 0, first = 1; i < in->ranks_live && k < len; i++) {
		if (!in->live[i].recorded)
			continue;
		k += (size_t)snprintf(buf + k, len - k, "%s%d", first ? " (pids " : ", ",
				      (int)in->live[i].pid);
		first = 0;
	}
	if (k < len)
		snprintf(buf + k, len - k, ")");
}

static uint64_t entry_bytes(const struct entry *e)
{
	return e->rc ? (uint64_t)e->st.st_size : e->info.ctl_bytes + data_bytes(e);
}

/* ---- orphan data files: kvshare.<id>.data.<n> with no kvshare.<id>.ctl ---- */

struct orphan_walk {
	void (*fn)(const char *path, void *arg);
	void *arg;
	int count;
};

static void orphan_one(const char *path, const char *id, void *arg)
{
	struct orphan_walk *w = arg;
	char ctl[512];

	snprintf(ctl, sizeof(ctl), SHM_DIR "/" CTL_PREFIX "%s" CTL_SUFFIX, id);
	if (access(ctl, F_OK) == 0 || errno != ENOENT)
		return;
	if (w->fn)
		w->fn(path, w->arg);
	w->count++;
}

/* Call fn(path) for each orphan data file.  Returns the count. */
static int orphans(void (*fn)(const char *path, void *arg), void *arg)
{
	struct orphan_walk w = { fn, arg, 0 };

	data_files(orphan_one, &w);
	return w.count;
}

static void orphan_print(const char *path, void *arg)
{
	(void)arg;
	printf("  %s\n", path);
}

static void orphan_json(const char *path, void *arg)
{
	json_array_append_new(arg, json_string(path));
}

/* ------------------------------------------------------------------------ */
/* ls                                                                        */

static json_t *entry_json(const struct entry *e)
{
	const struct kvs_cache_info *in = &e->info;
	json_t *o = json_object(), *pids;
	char mode[8], note[256];

	json_object_set_new(o, "unique_id", json_string(in->unique_id));
	json_object_set_new(o, "state", json_string(e->rc ? "unknown" : keepers(in) ? "live" : "stale"));
	if (e->rc) {
		note_of(e, note, sizeof(note));
		json_object_set_new(o, "error", json_string(note));
		json_object_set_new(o, "owner_uid", json_integer(e->st.st_uid));
		json_object_set_new(o, "ctl_bytes", json_integer((json_int_t)e->st.st_size));
		return o;
	}
	json_object_set_new(o, "header", json_string(header_name(in->state)));
	json_object_set_new(o, "detail", json_string(in->detail));
	json_object_set_new(o, "ranks_live", json_integer(in->ranks_live));
	/* ranks (device_id >= 0): GPU ones, and CPU-only ones (their store copies with
	 * the host engine) */
	json_object_set_new(o, "gpu_ranks_live", json_integer(in->gpu_ranks_live - in->cpu_ranks_live));
	json_object_set_new(o, "cpu_ranks_live", json_integer(in->cpu_ranks_live));
	json_object_set_new(o, "ranks_dead", json_integer(in->ranks_dead));
	pids = json_array(); /* not before: an unreadable entry returned above (it leaked) */
	for (uint32_t i = 0; i < in->ranks_live; i++)
		if (in->live[i].recorded)
			json_array_append_new(pids, json_integer(in->live[i].pid));
	json_object_set_new(o, "pids", pids);
	json_object_set_new(o, "layout_version", json_integer(in->layout_version));
	json_object_set_new(o, "slot_count", json_integer((json_int_t)in->slot_count));
	json_object_set_new(o, "slot_bytes", json_integer((json_int_t)in->slot_bytes));
	/* dumped, their blocks not in the backend yet: the cache is kept for them */
	json_object_set_new(o, "slots_dirty", json_integer((json_int_t)in->slots_dirty));
	json_object_set_new(o, "capacity_bytes", json_integer((json_int_t)(in->slot_count * in->slot_bytes)));
	json_object_set_new(o, "ctl_bytes", json_integer((json_int_t)in->ctl_bytes));
	json_object_set_new(o, "data_bytes", json_integer((json_int_t)data_bytes(e)));
	json_object_set_new(o, "size_bytes", json_integer((json_int_t)entry_bytes(e)));
	json_object_set_new(o, "segments", json_integer(in->seg_count));
	json_object_set_new(o, "backing", in->state != KVS_CACHE_INFO_READY ? json_null() :
			    json_string(in->flags & KVS_CACHE_INFO_HUGETLB ? "hugetlb" : "shm"));
	json_object_set_new(o, "hugetlb_dir", json_string(in->hugetlb_dir));
	json_object_set_new(o, "owner_uid", json_integer(in->uid));
	json_object_set_new(o, "gid", json_integer(in->gid));
	snprintf(mode, sizeof(mode), "%04o", in->mode);
	json_object_set_new(o, "mode", json_string(mode));
	json_object_set_new(o, "creator_uid", json_integer(in->creator_uid));
	json_object_set_new(o, "local_rank_size", json_integer(in->local_rank_size));
	json_object_set_new(o, "persist", json_boolean(in->flags & KVS_CACHE_INFO_PERSIST));
	json_object_set_new(o, "adoptions", json_integer(in->adoptions));
	return o;
}

static int ls_parse(int argc, char **argv, bool *json)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int ch;

	*json = false;
	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":jh", longopts, NULL)) != -1) {
		switch (ch) {
		case 'j':
			*json = true;
			break;
		case 'h':
			fputs(ls_usage, stdout);
			return -1;
		default:
			fprintf(stderr, "kvshare ls: unknown option '%s' (kvshare ls --help)\n", argv[optind - 1]);
			return KVS_CLI_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "kvshare ls: unexpected argument '%s' (kvshare ls takes none)\n", argv[optind]);
		return KVS_CLI_USAGE;
	}
	return 0;
}

int kvs_cli_ls(int argc, char **argv)
{
	struct entry *v;
	bool json;
	int n, rc = ls_parse(argc, argv, &json);
	uint64_t total = 0;
	uint32_t live = 0;
	char b1[32], b2[32], note[256], ranks[48];

	if (rc)
		return rc < 0 ? KVS_CLI_OK : rc;
	n = scan(&v);
	if (n < 0) {
		fprintf(stderr, "kvshare ls: reading " SHM_DIR ": %s\n", kvs_strerror(n));
		return KVS_CLI_FAIL;
	}
	if (json) {
		json_t *o = json_object(), *arr = json_array(), *orph = json_array();

		for (int i = 0; i < n; i++)
			json_array_append_new(arr, entry_json(&v[i]));
		orphans(orphan_json, orph);
		json_object_set_new(o, "caches", arr);
		json_object_set_new(o, "orphan_data_files", orph);
		rc = json_dumpf(o, stdout, JSON_INDENT(2));
		fputc('\n', stdout);
		json_decref(o);
		free(v);
		return rc ? KVS_CLI_FAIL : KVS_CLI_OK;
	}
	printf("%-40s %-6s %-9s %10s %8s %10s %10s %-8s %6s %6s  %s\n", "UNIQUE_ID", "STATE", "RANKS",
	       "SLOTS", "DIRTY", "SLOT", "SIZE", "BACKING", "UID", "LAYOUT", "NOTE");
	for (int i = 0; i < n; i++) {
		const struct entry *e = &v[i];
		const struct kvs_cache_info *in = &e->info;
		bool ready = e->rc == 0 && in->state == KVS_CACHE_INFO_READY;
		char slots[24] = "-", dirty[24] = "-", slot[16] = "-", layout[12] = "-";

		note_of(e, note, sizeof(note));
		if (e->rc)
			snprintf(ranks, sizeof(ranks), "?");
		else if (in->ranks_live && ready)
			snprintf(ranks, sizeof(ranks), in->cpu_ranks_live ? "%u (%u gpu, %u cpu)" : "%u (%u gpu)",
				 in->ranks_live, in->gpu_ranks_live - in->cpu_ranks_live,
				 in->cpu_ranks_live); /* cpu: CPU-only ranks (host copies) */
		else
			snprintf(ranks, sizeof(ranks), "%u", in->ranks_live);
		if (ready) {
			snprintf(slots, sizeof(slots), "%" PRIu64, in->slot_count);
			snprintf(dirty, sizeof(dirty), "%" PRIu64, in->slots_dirty);
			kvs_cli_human_bytes(slot, sizeof(slot), in->slot_bytes);
		}
		if (e->rc == 0 && in->layout_version)
			snprintf(layout, sizeof(layout), "%u", in->layout_version);
		printf("%-40s %-6s %-9s %10s %8s %10s %10s %-8s %6u %6s%s%s\n", in->unique_id,
		       e->rc ? "?" : keepers(in) ? "live" : "stale", ranks, slots, dirty, slot,
		       kvs_cli_human_bytes(b1, sizeof(b1), entry_bytes(e)),
		       !ready ? "-" : in->flags & KVS_CACHE_INFO_HUGETLB ? "hugetlb" : "shm",
		       e->rc ? (unsigned)e->st.st_uid : in->uid, layout, note[0] ? "  " : "", note);
		total += entry_bytes(e);
		live += e->rc == 0 && keepers(in) > 0;
	}
	printf("%d cache%s: %u live, %d stale or unreadable; %s in all\n", n, n == 1 ? "" : "s", live,
	       n - (int)live, kvs_cli_human_bytes(b2, sizeof(b2), total));
	if (orphans(NULL, NULL) > 0) {
		printf("data files without a control file (not removed by kvshare clean: remove by hand "
		       "once no process maps them):\n");
		orphans(orphan_print, NULL);
	}
	free(v);
	return KVS_CLI_OK;
}

/* ------------------------------------------------------------------------ */
/* clean                                                                     */

struct clean_sum {
	int removed, would, live, dirty, failed;
	uint64_t bytes;
};

/* A stale cache holding dirty slots, not removed (no --discard-dirty): one line
 * naming it, the count and the way out; single (named by the user): a failure,
 * on stderr, else skipped as a live one is, on stdout. */
static void dirty_refused(const char *uid, uint64_t dirty, bool dry, bool single)
{
	char why[300];

	snprintf(why, sizeof(why), "it holds %" PRIu64 " dirty slot%s (dumped, their blocks not in the "
		 "backend yet; the next store to open it writes them); kvshare clean --discard-dirty "
		 "%s removes it and drops them", dirty, dirty == 1 ? "" : "s", uid);
	if (single)
		fprintf(stderr, "kvshare clean: %s: %s: %s\n", uid,
			dry ? "would not be removed" : "not removed", why);
	else
		printf("skipped %s: %s\n", uid, why);
}

/* Clean one inspected cache.  single: the user named it (live is a failure);
 * discard: remove it even if it holds dirty slots (--discard-dirty). */
static void clean_one(const struct entry *e, bool dry, bool single, bool discard,
		      struct clean_sum *sum)
{
	const struct kvs_cache_info *in = &e->info;
	struct kvs_cache_config cfg;
	struct kvs_cache_info now;
	char why[1024], b1[32], note[256], dropped[96] = "";
	uint64_t bytes, dirty;
	int rc;

	if (e->rc == -KVS_ECORRUPT) {
		fprintf(stderr, "kvshare clean: %s: %s: not removed (remove it by hand once you know "
			"whose it is)\n", in->unique_id, kvs_cli_not_cache(note, sizeof(note), in->unique_id));
		sum->failed++;
		return;
	}
	if (e->rc) {
		fprintf(stderr, "kvshare clean: %s: cannot read its control segment: %s\n", in->unique_id,
			kvs_strerror(e->rc));
		sum->failed++;
		return;
	}
	if (keepers(in)) {
		live_why(in, why, sizeof(why));
		if (single)
			fprintf(stderr, "kvshare clean: %s: %s: not removed\n", in->unique_id, why);
		else
			printf("skipped %s: %s\n", in->unique_id, why);
		sum->live++;
		return;
	}
	dirty = in->state == KVS_CACHE_INFO_READY ? in->slots_dirty : 0;
	if (dirty && !discard) {
		dirty_refused(in->unique_id, dirty, dry, single);
		sum->dirty++;
		return;
	}
	if (dirty)
		snprintf(dropped, sizeof(dropped), "; %s %" PRIu64 " dirty slot%s",
			 dry ? "would discard" : "discarded", dirty, dirty == 1 ? "" : "s");
	note_of(e, note, sizeof(note));
	bytes = entry_bytes(e); /* before the removal: data files found by name go with it */
	kvs_cli_human_bytes(b1, sizeof(b1), bytes);
	if (dry) {
		printf("would remove %s (stale, %s%s%s%s)\n", in->unique_id, b1, note[0] ? "; " : "", note,
		       dropped);
		sum->would++;
		sum->bytes += bytes;
		return;
	}
	kvs_cache_config_init(&cfg);
	memcpy(cfg.unique_id, in->unique_id, strlen(in->unique_id) + 1);
	cfg.attach_timeout_ns = 5ull * 1000000000ull;
	cfg.log = cli_log;
	if (discard) /* also dirty slots made since the inspection: the library logs their count */
		cfg.flags |= KVS_CACHE_DISCARD_DIRTY;
	last_log[0] = '\0';
	held_len = 0;
	rc = kvs_cache_remove(&cfg);
	if (rc != -ENOTEMPTY) /* that one clean says itself, below */
		fputs(held, stderr);
	held[held_len = 0] = '\0';
	if (rc == 0) {
		printf("removed %s (stale, %s%s%s%s)\n", in->unique_id, b1, note[0] ? "; " : "", note,
		       dropped);
		sum->removed++;
		sum->bytes += bytes;
	} else if (rc == -EBUSY) {
		fprintf(stderr, "kvshare clean: %s: live: a process attached since it was inspected: "
			"not removed\n", in->unique_id);
		sum->live++;
	} else if (rc == -ENOENT) {
		printf("%s: already gone\n", in->unique_id);
	} else if (rc == -ENOTEMPTY) {
		/* dumped since it was inspected (a rank came and went): count them now */
		dirty_refused(in->unique_id, kvs_cache_inspect(in->unique_id, &now) == 0 ? now.slots_dirty : 0,
			      false, single);
		sum->dirty++;
	} else {
		fprintf(stderr, "kvshare clean: %s: %s%s%s\n", in->unique_id, kvs_strerror(rc),
			last_log[0] ? ": " : "", last_log);
		sum->failed++;
	}
}

int kvs_cli_clean(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "dry-run", no_argument, NULL, 'n' },
		{ "discard-dirty", no_argument, NULL, 'D' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct clean_sum sum = { 0 };
	struct entry *v = NULL;
	bool dry = false, discard = false;
	char b1[32], kept[128] = "";
	int ch, n;

	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":nh", longopts, NULL)) != -1) {
		switch (ch) {
		case 'n':
			dry = true;
			break;
		case 'D':
			/* dropping acknowledged dumps takes the option's whole name,
			 * not one of getopt_long's abbreviations (--dis) */
			if (strcmp(argv[optind - 1], "--discard-dirty") != 0) {
				fprintf(stderr, "kvshare clean: '%s': spell --discard-dirty out in full "
					"(it drops dumped blocks)\n", argv[optind - 1]);
				return KVS_CLI_USAGE;
			}
			discard = true;
			break;
		case 'h':
			fputs(clean_usage, stdout);
			return KVS_CLI_OK;
		default:
			fprintf(stderr, "kvshare clean: unknown option '%s' (kvshare clean --help)\n",
				argv[optind - 1]);
			return KVS_CLI_USAGE;
		}
	}
	if (argc - optind > 1) {
		fprintf(stderr, "kvshare clean: one UNIQUE_ID at most (unexpected '%s')\n", argv[optind + 1]);
		return KVS_CLI_USAGE;
	}
	if (optind < argc) {
		struct entry e;
		const char *uid = argv[optind];
		int rc;

		memset(&e, 0, sizeof(e));
		rc = kvs_cache_inspect(uid, &e.info);
		if (rc == -EINVAL) {
			fprintf(stderr, "kvshare clean: invalid unique_id '%s' (want [A-Za-z0-9_.-]{1,64})\n", uid);
			return KVS_CLI_USAGE;
		}
		if (rc == -ENOENT) {
			fprintf(stderr, "kvshare clean: no cache '%s' on this node (no " SHM_DIR
				"/kvshare.%s.ctl; kvshare ls lists them)\n", uid, uid);
			return KVS_CLI_FAIL;
		}
		e.rc = rc;
		snprintf(e.info.unique_id, sizeof(e.info.unique_id), "%s", uid);
		clean_one(&e, dry, true, discard, &sum);
		return sum.removed + sum.would == 1 ? KVS_CLI_OK : KVS_CLI_FAIL;
	}
	n = scan(&v);
	if (n < 0) {
		fprintf(stderr, "kvshare clean: reading " SHM_DIR ": %s\n", kvs_strerror(n));
		return KVS_CLI_FAIL;
	}
	for (int i = 0; i < n; i++)
		clean_one(&v[i], dry, false, discard, &sum);
	free(v);
	if (sum.dirty)
		snprintf(kept, sizeof(kept), "; %d stale cache%s %s for %s dirty slots (kvshare clean "
			 "--discard-dirty ID drops them)", sum.dirty, sum.dirty == 1 ? "" : "s",
			 dry ? "would be kept" : "kept", sum.dirty == 1 ? "its" : "their");
	if (dry)
		printf("would remove %d stale cache%s (%s); %d live left alone%s\n", sum.would,
		       sum.would == 1 ? "" : "s", kvs_cli_human_bytes(b1, sizeof(b1), sum.bytes), sum.live,
		       kept);
	else
		printf("removed %d stale cache%s (%s); %d live left alone%s%s\n", sum.removed,
		       sum.removed == 1 ? "" : "s", kvs_cli_human_bytes(b1, sizeof(b1), sum.bytes), sum.live,
		       kept, sum.failed ? "; some removals failed" : "");
	return sum.failed ? KVS_CLI_FAIL : KVS_CLI_OK; /* dirty ones are skipped, as live ones are */
}
