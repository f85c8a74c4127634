/*
 * tools/count_backend.h — a backend that wraps another and counts what passes
 * through it, for benchmarks that measure the backend where it is: `kvshare
 * bench` (tools/bench_backend.c) and perf/tp_scaling.c.
 *
 * A user backend (KVS_BACKEND_USER, struct kvs_backend_ops): kvs_count_ops with
 * a struct kvs_count_arg as user_arg.  Its open asks the caller to open the
 * wrapped backend for the store's geometry; every accepted submit and every
 * completion is counted in a struct kvs_count the caller places (shared memory
 * mapped before the ranks fork, so the counts are the node's); with qd > 0 a
 * handle accepts at most qd transfers in flight (-EAGAIN beyond, as a real
 * store's client bounds its share).  Everything else passes through.
 *
 * Threads: a handle belongs to its store's dispatcher (one thread, the
 * backend contract); the counters are shared by every handle of every rank.
 */
#ifndef KVS_TOOLS_COUNT_BACKEND_H
#define KVS_TOOLS_COUNT_BACKEND_H

#include <stdatomic.h>
#include <stdint.h>

#include "kvshare.h"

/* Node-wide counters.  All relaxed: counts read by the parent after waitpid
 * (which orders them); the maximum is a CAS loop over one word; nothing else is
 * published through them. */
struct kvs_count {
	_Atomic uint64_t reads, read_bytes; /* accepted read submits, their bytes */
	_Atomic uint64_t writes;            /* accepted write submits */
	_Atomic uint64_t failures;          /* completions with an error (reads or writes) */
	_Atomic int64_t inflight, max_inflight; /* transfers in flight, node-wide */
	_Atomic uint64_t read_ns;           /* the reads' submit-to-reap times, summed */
};

struct kvs_count_arg {
	struct kvs_count *count;
	uint32_t qd;       /* transfers in flight per handle; 0: unbounded */
	/* Open the wrapped backend for cfg (the store's: its geometry, its log);
	 * 0 and *inner, or a negative errno. */
	int (*open_inner)(const struct kvs_backend_config *cfg, void *arg,
			  struct kvs_backend **inner);
	void *arg;
};

extern const struct kvs_backend_ops kvs_count_ops;

#endif
