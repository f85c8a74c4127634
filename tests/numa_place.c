/*
 * tests/numa_place.c — NUMA facts and placement: PCI bus id normalisation and
 * the GPU -> node lookup (on whatever PCI devices this machine has), the node
 * count, binding to a second node (skips on one-node machines), and the link
 * rule: the plain build must not load libnuma or libhugetlbfs.
 */
#include <ctype.h>
#include <dirent.h>

#include "numa_util.h"

static kvs_test_rc test_pci_normalize(void)
{
	static const struct {
		const char *in, *out;
	} good[] = {
		{ "0000:3b:00.0", "0000:3b:00.0" },
		{ "00000000:3B:00.0", "0000:3b:00.0" }, /* NVML's 8-digit domain */
		{ "0000:3B:1F.7", "0000:3b:1f.7" },
		{ "3b:00.0", "0000:3b:00.0" },          /* no domain */
		{ "10000:01:00.0", "10000:01:00.0" },   /* VMD domains are 5 digits in sysfs */
	};
	static const char *const bad[] = { "", "3b", "3b:00", "0000:3b:00.8", "0000:3b:20.0",
					   "0000:3b:00.0x", "../../x", "0000:3b:00:00.0",
					   "0000:3b:00.", ":3b:00.0", "g000:3b:00.0",
					   "000000000:3b:00.0" };
	char out[32];

	for (size_t i = 0; i < KVS_ARRAY_LEN(good); i++) {
		KVS_CHECK_OK(kvs_numa_pci_normalize(good[i].in, out, sizeof(out)));
		if (strcmp(out, good[i].out) != 0)
			KVS_FAILF("%s -> %s, want %s", good[i].in, out, good[i].out);
	}
	for (size_t i = 0; i < KVS_ARRAY_LEN(bad); i++)
		if (kvs_numa_pci_normalize(bad[i], out, sizeof(out)) != -EINVAL)
			KVS_FAILF("'%s' accepted", bad[i]);
	KVS_CHECK_ERR(kvs_numa_pci_normalize("0000:3b:00.0", out, 12), -ENAMETOOLONG);
	KVS_CHECK_ERR(kvs_numa_pci_normalize(NULL, out, sizeof(out)), -EINVAL);
	return KVS_TEST_PASS;
}

static kvs_test_rc test_node_of_pci(void)
{
	DIR *d = opendir("/sys/bus/pci/devices");
	struct dirent *e;
	char id[64] = "", upper[80];
	int checked = 0;

	KVS_CHECK_ERR(kvs_numa_node_of_pci("ffff:ff:1f.7"), -ENOENT);
	KVS_CHECK_ERR(kvs_numa_node_of_pci("not-a-bus-id"), -EINVAL);
	if (!d)
		KVS_SKIP("no /sys/bus/pci/devices");
	while ((e = readdir(d)) && checked < 4) {
		if (e->d_name[0] == '.' || strlen(e->d_name) >= sizeof(id))
			continue;
		strcpy(id, e->d_name);
		int node = kvs_numa_node_of_pci(id);
		/* As CUDA / NVML print it: 8-digit domain, upper case. */
		snprintf(upper, sizeof(upper), "0000%s", id);
		for (char *c = upper; *c; c++)
			*c = (char)toupper((unsigned char)*c);
		int node2 = kvs_numa_node_of_pci(upper);
		printf("  %s (%s): node %d / %d\n", id, upper, node, node2);
		KVS_CHECK(node >= KVS_NUMA_NODE_NONE && node < KVS_NUMA_MAX_NODES);
		KVS_CHECK_EQ(node, node2);
		if (kvs_numa_node_count() == 1)
			KVS_CHECK_EQ(node, KVS_NUMA_NODE_NONE); /* one node: nothing to choose */
		checked++;
	}
	closedir(d);
	if (!checked)
		KVS_SKIP("no PCI devices in sysfs");
	return KVS_TEST_PASS;
}

static kvs_test_rc test_node_count(void)
{
	int n = kvs_numa_node_count();

	printf("  %d node(s)\n", n);
	KVS_CHECK(n >= 1 && n <= KVS_NUMA_MAX_NODES);
	if (!KVS_KERNEL)
		KVS_CHECK_EQ(n, 1);
	return KVS_TEST_PASS;
}

/* Place a segment on the last node and find its pages there. */
static kvs_test_rc test_bind_other_node(void)
{
	struct kvs_numa_seg_opts o;
	struct kvs_numa_seg seg;
	struct kvs_numa_seg_info info;
	char id[64];
	int n = kvs_numa_node_count();

	if (n < 2)
		KVS_SKIP("one NUMA node: nothing to place elsewhere");
	kvs_numa_seg_opts_init(&o);
	o.hugetlb = KVS_HUGETLB_OFF; /* the per-node hugepage pools may be empty */
	o.numa = KVS_NUMA_REQUIRED;
	kvs_test_unique_id(id, sizeof(id), "bind");
	KVS_CHECK_OK(kvs_numa_seg_create(id, n - 1, 4u << 20, &o, &seg));
	int rc = kvs_numa_seg_query(&seg, &info);
	int32_t node = seg.node;
	uint64_t bytes = seg.bytes;
	kvs_numa_seg_detach(&seg);
	KVS_CHECK_OK(kvs_numa_seg_unlink(id, n - 1, KVS_NUMA_BACKING_SHM, 0, NULL));
	KVS_CHECK_OK(rc);
	KVS_CHECK_EQ(node, n - 1);
	KVS_CHECK_EQ(info.node_bytes[n - 1], bytes);
	return KVS_TEST_PASS;
}

/* The plain build is libc only; the kernel build loads both libraries. */
static kvs_test_rc test_link(void)
{
	char line[512];
	int numa = 0, huge = 0;
	FILE *f = fopen("/proc/self/maps", "re");

	KVS_CHECK(f != NULL);
	while (fgets(line, sizeof(line), f)) {
		numa |= strstr(line, "/libnuma.so") != NULL;
		huge |= strstr(line, "/libhugetlbfs") != NULL;
	}
	fclose(f);
	KVS_CHECK_EQ(numa, KVS_KERNEL);
	KVS_CHECK_EQ(huge, KVS_KERNEL);
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "pci_normalize", test_pci_normalize },
	{ "node_of_pci", test_node_of_pci },
	{ "node_count", test_node_count },
	{ "bind_other_node", test_bind_other_node },
	{ "link", test_link },
};

KVS_TEST_MAIN(cases)
