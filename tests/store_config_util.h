/*
 * tests/store_config_util.h — what the store's config tests (store_config.c,
 * the parser; store_resolve.c, resolution) share: a fresh config whose log
 * keeps its last line and counts error lines, and a parse that must succeed.
 */
#ifndef KVS_TESTS_STORE_CONFIG_UTIL_H
#define KVS_TESTS_STORE_CONFIG_UTIL_H

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "store/store.h"
#include "harness.h"

#define GIB (UINT64_C(1) << 30)

static char last_log[KVS_LOG_LINE_MAX];
static int error_lines;

static inline void test_log(void *arg, int level, const char *msg)
{
	(void)arg;
	if (level == KVS_LOG_ERROR)
		error_lines++;
	snprintf(last_log, sizeof(last_log), "%s", msg);
}

static inline void fresh(struct kvs_store_config *cfg)
{
	kvs_store_config_init(cfg);
	cfg->log = test_log;
}

static inline kvs_test_rc parse_ok(struct kvs_store_config *cfg, const char *kv)
{
	char err[256] = "not cleared";
	int rc = kvs_store_config_parse(cfg, kv, err, sizeof(err));

	if (rc != 0)
		KVS_FAILF("parse '%s': %d (%s): %s", kv, rc, kvs_strerror(rc), err);
	if (err[0])
		KVS_FAILF("parse '%s' succeeded but err holds '%s'", kv, err);
	return KVS_TEST_PASS;
}

#endif
