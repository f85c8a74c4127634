/*
 * fuzz/fuzz_store_config.c — libFuzzer target: arbitrary bytes as the store's
 * "key=value,..." string (kvs_store_config_parse), then resolution
 * (kvs_store_config_resolve) of whatever the parse left in the config.
 *
 * The string is what an inference engine passes through from its users, so the
 * parser must refuse anything malformed without reading past the string,
 * overflowing a number or a list, or leaving the config in a state resolution
 * cannot handle.  Per input the harness:
 *
 *   1. copies the bytes to a NUL-terminated buffer of exactly size + 1 bytes
 *      (ASan sees any read past the terminator);
 *   2. parses it into a freshly initialised config, with an err buffer whose
 *      size the first byte picks (0..63, and sometimes NULL), and checks the
 *      contract: 0 or -EINVAL; on -EINVAL exactly one error line was logged and
 *      err holds its prefix, NUL-terminated within errlen; on success err is "";
 *   3. parses the same string again into another fresh config with a full err
 *      buffer: same result, same config bytes (the parser is deterministic and
 *      reads nothing but its arguments);
 *   4. resolves the config (a partial one after an error too) and checks what
 *      resolution promises: 0 or -EINVAL; on 0 the backend's shard geometry is
 *      the cache's, a fault wrapper points at the harness's inner config with
 *      the same geometry, roots point into the resolved config's own string,
 *      unique_id is NUL-terminated, tensor_count <= KVS_MAX_TENSORS.
 *
 * A broken promise aborts (libFuzzer records a crash).  Nothing is allocated
 * by the library here, so LeakSanitizer checks the harness's own buffer.
 * FUZZ_STORE_CONFIG_VERBOSE=1 prints the library's log and each result.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/store.h"
#include "kvshare.h"

static int verbose = -1;
static int error_lines;
static volatile size_t log_bytes; /* keeps the strlen below */
static char first_line[KVS_LOG_LINE_MAX];

static void die(const char *what)
{
	fprintf(stderr, "fuzz_store_config: %s\n", what);
	abort();
}

static void fuzz_log(void *arg, int level, const char *msg)
{
	(void)arg;
	log_bytes += strlen(msg); /* the line must be NUL-terminated (ASan checks the read) */
	if (level == KVS_LOG_ERROR && error_lines++ == 0)
		snprintf(first_line, sizeof(first_line), "%s", msg);
	if (verbose)
		fprintf(stderr, "fuzz_store_config: [kvs %d] %s\n", level, msg);
}

static void fresh(struct kvs_store_config *cfg)
{
	kvs_store_config_init(cfg);
	cfg->log = fuzz_log;
}

/* Everything resolution promises about a config it accepted. */
static void check_resolved(const struct kvs_store_config *out,
			   const struct kvs_backend_config *inner)
{
	const struct kvs_backend_config *b = &out->backend;

	if (!memchr(out->cache.unique_id, '\0', sizeof(out->cache.unique_id)) ||
	    strlen(out->cache.unique_id) > KVS_UNIQUE_ID_MAX)
		die("resolved unique_id too long or not NUL-terminated");
	if (out->cache.tensor_count > KVS_MAX_TENSORS)
		die("resolved tensor_count above KVS_MAX_TENSORS");
	if (b->shard_bytes != out->cache.slot_bytes ||
	    b->shards_per_block != out->cache.shards_per_block)
		die("backend geometry differs from the cache's");
	if (!out->share_buffer && out->cache.local_rank_size != 1)
		die("share_buffer_enable=0 left local_rank_size != 1");
	if (b->kind == KVS_BACKEND_FAULT) {
		if (b->fault_inner != inner)
			die("fault wrapper does not point at the inner config given");
		if (inner->kind == KVS_BACKEND_FAULT || inner->fault_error_ppm ||
		    inner->fault_short_ppm || inner->fault_delay_ns)
			die("inner backend still has faults");
		if (inner->shard_bytes != b->shard_bytes ||
		    inner->shards_per_block != b->shards_per_block)
			die("inner backend geometry differs");
	} else if (b->fault_error_ppm || b->fault_short_ppm || b->fault_delay_ns) {
		die("fault_* set but the backend is not wrapped");
	}
	if (b->nroots > KVS_BACKEND_MAX_ROOTS)
		die("more roots than KVS_BACKEND_MAX_ROOTS");
	for (uint32_t i = 0; i < b->nroots; i++) {
		const char *r = b->roots[i];

		if (r < out->backend_roots || r >= out->backend_roots + sizeof(out->backend_roots))
			die("a root points outside the resolved config");
		if (r[0] != '/')
			die("a root is not absolute");
		log_bytes += strlen(r);
	}
	if (out->cache.slot_bytes && out->capacity_bytes &&
	    out->cache.slot_count != out->capacity_bytes / out->cache.slot_bytes)
		die("slot_count is not capacity / slot_bytes");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* resolve's out must not move (roots point into it): static storage */
	static struct kvs_store_config cfg, again, out;
	static struct kvs_backend_config inner;
	char err[64], full[KVS_LOG_LINE_MAX];
	size_t errlen = size ? data[0] % sizeof(err) : 0;
	char *errp = size && data[0] >= 0xc0 ? NULL : err;
	char *kv;
	int rc, rc2;

	if (verbose < 0)
		verbose = getenv("FUZZ_STORE_CONFIG_VERBOSE") != NULL;
	kv = malloc(size + 1);
	if (!kv)
		return 0;
	memcpy(kv, data, size);
	kv[size] = '\0';

	fresh(&cfg);
	memset(err, 'x', sizeof(err));
	error_lines = 0;
	rc = kvs_store_config_parse(&cfg, kv, errp, errlen);
	if (verbose)
		fprintf(stderr, "fuzz_store_config: parse -> %d\n", rc);
	if (rc != 0 && rc != -EINVAL)
		die("parse returned neither 0 nor -EINVAL");
	if (rc == 0 && error_lines != 0)
		die("parse succeeded but logged an error");
	if (rc == -EINVAL && error_lines != 1)
		die("parse failed without exactly one error line");
	if (errp && errlen == 0 && err[0] != 'x')
		die("err written with errlen 0");
	if (errp && errlen) {
		if (!memchr(err, '\0', errlen))
			die("err is not NUL-terminated within errlen");
		if (errlen < sizeof(err) && err[errlen] != 'x')
			die("err written past errlen");
		if (rc == 0 && err[0])
			die("err not cleared on success");
		if (rc == -EINVAL && strncmp(err, first_line, strlen(err)) != 0)
			die("err is not the logged line");
	}

	fresh(&again);
	error_lines = 0;
	rc2 = kvs_store_config_parse(&again, kv, full, sizeof(full));
	if (rc2 != rc || memcmp(&again, &cfg, sizeof(cfg)) != 0)
		die("a second parse of the same string differs");
	if (rc2 == -EINVAL && strcmp(full, first_line) != 0)
		die("err differs from the logged line");

	memset(&inner, 0xa5, sizeof(inner));
	error_lines = 0;
	rc = kvs_store_config_resolve(&cfg, &out, &inner, NULL);
	if (verbose)
		fprintf(stderr, "fuzz_store_config: resolve -> %d\n", rc);
	if (rc != 0 && rc != -EINVAL)
		die("resolve returned neither 0 nor -EINVAL");
	if (rc == -EINVAL && error_lines != 1)
		die("resolve failed without exactly one error line");
	if (rc == 0)
		check_resolved(&out, &inner);
	free(kv);
	return 0;
}
