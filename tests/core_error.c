/*
 * tests/core_error.c — kvs_strerror() covers every kvshare code and errno values,
 * and is safe to keep across calls (static texts / thread-local buffer).
 */
#include "harness.h"

static kvs_test_rc test_own_codes(void)
{
	static const int codes[] = { KVS_ELAYOUT, KVS_ECONFIG, KVS_EOWNERDEAD, KVS_ENOHUGE,
				     KVS_ECORRUPT, KVS_EINCOMPLETE };
	const char *unknown = kvs_strerror(-(KVS_E_BASE + 999));

	for (size_t i = 0; i < KVS_ARRAY_LEN(codes); i++) {
		const char *s = kvs_strerror(-codes[i]);
		KVS_CHECK(s != NULL && s[0] != '\0');
		KVS_CHECK(strcmp(s, unknown) != 0);
		for (size_t j = 0; j < i; j++)
			KVS_CHECK(strcmp(s, kvs_strerror(-codes[j])) != 0);
	}
	return KVS_TEST_PASS;
}

static kvs_test_rc test_errno_values(void)
{
	KVS_CHECK(strcmp(kvs_strerror(-ENOSPC), strerror(ENOSPC)) == 0);
	KVS_CHECK(strcmp(kvs_strerror(-ETIMEDOUT), strerror(ETIMEDOUT)) == 0);
	KVS_CHECK(strcmp(kvs_strerror(0), "success") == 0);
	KVS_CHECK(kvs_strerror(12345678) != NULL);
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "own_codes", test_own_codes },
	{ "errno_values", test_errno_values },
};

KVS_TEST_MAIN(cases)
