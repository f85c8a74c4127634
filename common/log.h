/*
 * common/log.h — the library's only way to say something: the user's callback.
 *
 * kvshare never prints, exits or reads the environment: a rule of the whole
 * library, stated in include/kvshare.h, "Conventions".  Every handle carries a
 * struct kvs_log copied from its config; a NULL callback drops messages.
 * Messages are formatted into a bounded stack buffer (truncated, never
 * allocated) so logging is safe on error paths and under locks.
 */
#ifndef KVS_COMMON_LOG_H
#define KVS_COMMON_LOG_H

#include <stdarg.h>
#include <stdio.h>

#include "clock.h"
#include "kvshare.h"

struct kvs_log {
	kvs_log_fn fn;
	void *arg;
};

#define KVS_LOG_LINE_MAX 512

__attribute__((format(printf, 3, 4)))
static inline void kvs_logf(const struct kvs_log *log, int level, const char *fmt, ...)
{
	char line[KVS_LOG_LINE_MAX];
	va_list ap;

	if (!log || !log->fn)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	log->fn(log->arg, level, line);
}

/*
 * At most one line per interval from one call site, for errors that come in
 * floods (a backend that is down fails every transfer): the lines in between are
 * counted, the next line that passes says how many it stands for, and
 * kvs_log_limit_flush says what is left at teardown.  A limiter belongs to one
 * thread (or to its owner's lock): plain fields, no atomics.
 */
struct kvs_log_limit {
	uint64_t last_ns; /* when the last line passed; 0: none yet */
	uint32_t dropped; /* lines dropped since */
};

__attribute__((format(printf, 5, 6)))
static inline void kvs_log_limited(const struct kvs_log *log, struct kvs_log_limit *lim,
				   uint64_t interval_ns, int level, const char *fmt, ...)
{
	char line[KVS_LOG_LINE_MAX];
	uint64_t now = kvs_now_ns();
	va_list ap;

	if (lim->last_ns && now - lim->last_ns < interval_ns) {
		lim->dropped++;
		return;
	}
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (lim->dropped)
		kvs_logf(log, level, "%s (and %u more like it in the last %llu s)", line,
			 lim->dropped, (unsigned long long)((now - lim->last_ns) / KVS_NSEC_PER_SEC));
	else
		kvs_logf(log, level, "%s", line);
	lim->last_ns = now;
	lim->dropped = 0;
}

/* The lines a limiter dropped since its last one, said once ("<n> more <what>"). */
static inline void kvs_log_limit_flush(const struct kvs_log *log, struct kvs_log_limit *lim,
				       int level, const char *what)
{
	if (lim->dropped)
		kvs_logf(log, level, "%u more %s since the last such line", lim->dropped, what);
	lim->dropped = 0;
}

#define kvs_log_error(log, ...) kvs_logf((log), KVS_LOG_ERROR, __VA_ARGS__)
#define kvs_log_warn(log, ...)  kvs_logf((log), KVS_LOG_WARN, __VA_ARGS__)
#define kvs_log_info(log, ...)  kvs_logf((log), KVS_LOG_INFO, __VA_ARGS__)
#define kvs_log_debug(log, ...) kvs_logf((log), KVS_LOG_DEBUG, __VA_ARGS__)

#endif
