/*
 * io/io.h — what other modules (core/'s store pipeline, tools/) include from io/.
 *
 * The backend interface itself is public (include/kvshare.h, "Backend stores"):
 * core/ drives every backend through kvs_backend_open/submit_read/submit_write/
 * poll/close like any user would.  This header adds the names used in logs and
 * stats.  The copy engines have their own header (io/copy.h).
 */
#ifndef KVS_IO_IO_H
#define KVS_IO_IO_H

#include <stdint.h>

#include "kvshare.h"

/* "posix", "none", "latency", "fault", "user", "redis" or "?" (static strings). */
const char *kvs_io_kind_name(uint32_t kind);

/* "auto", "uring", "pool" or "?" (static strings). */
const char *kvs_io_engine_name(uint32_t engine);

#endif
