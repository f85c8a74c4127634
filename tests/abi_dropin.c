/*
 * tests/abi_dropin.c — the drop-in promise from a user's side.
 *
 * Linked against the plain libkvshare.so.1 with no RUNPATH; CTest runs it with
 * LD_LIBRARY_PATH pointing at the plain and at the kernel library.  argv[1] is
 * the variant that must be loaded; every case must pass with both.
 */
#include <dlfcn.h>

#include "harness.h"

static const char *want_variant;

static int test_loaded_variant(void)
{
	Dl_info info;

	KVS_CHECK(dladdr((void *)kvs_version, &info) != 0);
	printf("loaded %s (%s %s)\n", info.dli_fname, kvs_variant(), kvs_version());
	KVS_CHECK(strcmp(kvs_variant(), want_variant) == 0);
	KVS_CHECK(strcmp(kvs_version(), "0.1.0") == 0);
	return KVS_TEST_PASS;
}

static int test_strerror(void)
{
	KVS_CHECK(strstr(kvs_strerror(-KVS_ECONFIG), "configuration") != NULL);
	KVS_CHECK(strcmp(kvs_strerror(-EINVAL), strerror(EINVAL)) == 0);
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "loaded_variant", test_loaded_variant },
	{ "strerror", test_strerror },
};

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s plain|kernel\n", argv[0]);
		return 2;
	}
	want_variant = argv[1];
	return kvs_test_run(1, argv, cases, KVS_ARRAY_LEN(cases), NULL, 0);
}
