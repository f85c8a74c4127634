/*
 * tests/numa_util.h — helpers shared by the numa_* tests: a log callback that
 * keeps what the library said (so a test can check that a fallback was
 * reported) and byte patterns; the hugetlbfs mount and pool come from
 * hugetlb_util.h.
 */
#ifndef KVS_TESTS_NUMA_UTIL_H
#define KVS_TESTS_NUMA_UTIL_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "hugetlb_util.h"
#include "numa/numa.h"

/* Everything logged, newline-separated, truncated at the buffer size. */
struct numa_test_log {
	pthread_mutex_t lock;
	char text[8192];
	size_t len;
};

static void numa_test_log_fn(void *arg, int level, const char *msg)
{
	struct numa_test_log *l = arg;

	pthread_mutex_lock(&l->lock);
	int n = snprintf(l->text + l->len, sizeof(l->text) - l->len, "[%d] %s\n", level, msg);
	if (n > 0)
		l->len += (size_t)n < sizeof(l->text) - l->len ? (size_t)n : sizeof(l->text) - l->len - 1;
	pthread_mutex_unlock(&l->lock);
	printf("  log[%d] %s\n", level, msg);
}

static inline void numa_test_log_init(struct numa_test_log *l, struct kvs_log *log)
{
	pthread_mutex_init(&l->lock, NULL);
	l->text[0] = '\0';
	l->len = 0;
	log->fn = numa_test_log_fn;
	log->arg = l;
}

static inline int numa_test_log_has(struct numa_test_log *l, const char *needle)
{
	pthread_mutex_lock(&l->lock);
	int found = strstr(l->text, needle) != NULL;
	pthread_mutex_unlock(&l->lock);
	return found;
}

/* The pattern byte of offset off under seed. */
static inline uint8_t numa_test_byte(uint64_t seed, uint64_t off)
{
	uint64_t x = (off + 1) * 0x9E3779B97F4A7C15ull ^ seed;

	x ^= x >> 29;
	return (uint8_t)(x * 0xBF58476D1CE4E5B9ull >> 56);
}

#endif
