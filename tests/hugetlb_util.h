/*
 * tests/hugetlb_util.h — the hugetlbfs mount and pool as a test reads them itself
 * from /proc, independently of the library under test (numa_* and core_hugetlb).
 */
#ifndef KVS_TESTS_HUGETLB_UTIL_H
#define KVS_TESTS_HUGETLB_UTIL_H

#include <mntent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The mount of the 2 MiB hugetlbfs from /proc/mounts; 0 if found. */
static inline int hugetlb_test_mount(char *buf, size_t len)
{
	struct mntent ent, *m;
	char line[4096];
	int rc = -1;
	FILE *f = setmntent("/proc/self/mounts", "re");

	if (!f)
		return -1;
	while (rc != 0 && (m = getmntent_r(f, &ent, line, sizeof(line)))) {
		if (strcmp(m->mnt_type, "hugetlbfs") == 0 && strstr(m->mnt_opts, "pagesize=2M") &&
		    strlen(m->mnt_dir) < len) {
			strcpy(buf, m->mnt_dir);
			rc = 0;
		}
	}
	endmntent(f);
	return rc;
}

/* One "Name:   value" line of /proc/meminfo; -1 if absent. */
static inline long long hugetlb_test_meminfo(const char *name)
{
	char line[256];
	long long v = -1;
	size_t n = strlen(name);
	FILE *f = fopen("/proc/meminfo", "re");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, name, n) == 0 && line[n] == ':')
			v = strtoll(line + n + 1, NULL, 10);
	fclose(f);
	return v;
}

#endif
