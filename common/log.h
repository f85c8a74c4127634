/*
 * common/log.h — the library's only way to say something: the user's callback.
 *
 * kvshare never prints, exits or reads the environment (STYLE.md rule 5).  Every
 * handle carries a struct kvs_log copied from its config; a NULL callback drops
 * messages.  Messages are formatted into a bounded stack buffer (truncated, never
 * allocated) so logging is safe on error paths and under locks.
 */
#ifndef KVS_COMMON_LOG_H
#define KVS_COMMON_LOG_H

#include <stdarg.h>
#include <stdio.h>

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

#define kvs_log_error(log, ...) kvs_logf((log), KVS_LOG_ERROR, __VA_ARGS__)
#define kvs_log_warn(log, ...)  kvs_logf((log), KVS_LOG_WARN, __VA_ARGS__)
#define kvs_log_info(log, ...)  kvs_logf((log), KVS_LOG_INFO, __VA_ARGS__)
#define kvs_log_debug(log, ...) kvs_logf((log), KVS_LOG_DEBUG, __VA_ARGS__)

#endif
