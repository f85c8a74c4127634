/*
 * common/clock.h — monotonic time in nanoseconds, and absolute deadlines.
 *
 * Every wait in kvshare is bounded by an absolute CLOCK_MONOTONIC deadline in
 * nanoseconds (never a relative timeout recomputed per retry, which drifts).
 * KVS_DEADLINE_NONE is only for callers that really have none; library code
 * always has one.
 */
#ifndef KVS_COMMON_CLOCK_H
#define KVS_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

#define KVS_NSEC_PER_SEC 1000000000ull
#define KVS_NSEC_PER_MSEC 1000000ull
#define KVS_DEADLINE_NONE UINT64_MAX

static inline uint64_t kvs_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * KVS_NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

/* now + timeout_ns, saturating (a huge timeout is "no deadline", not a wrap). */
static inline uint64_t kvs_deadline_after(uint64_t timeout_ns)
{
	uint64_t now = kvs_now_ns();

	return timeout_ns > KVS_DEADLINE_NONE - now ? KVS_DEADLINE_NONE : now + timeout_ns;
}

static inline struct timespec kvs_ns_to_timespec(uint64_t ns)
{
	struct timespec ts = {
		.tv_sec = (time_t)(ns / KVS_NSEC_PER_SEC),
		.tv_nsec = (long)(ns % KVS_NSEC_PER_SEC),
	};
	return ts;
}

#endif
