/*
 * tests/chaos.h — what the chaos run's two sides share (tests/chaos.c says what
 * the run is): its geometry, the rank -> controller record (one atomic pipe
 * write), the options, the seeded choices; and the rank's entry point
 * (tests/chaos_rank.c).
 */
#ifndef KVS_TESTS_CHAOS_H
#define KVS_TESTS_CHAOS_H
#include <limits.h>

#include "store_util.h"

/* Geometry: 16 KiB shards of two 8 KiB tensors, 4 shards a block; 384 slots (32
 * reserved for prefetch/prealloc) for a universe of 160 blocks (640 shards), so
 * CLOCK evicts all the time; half the universe is hot (half the picks), so ranks
 * meet on the same slots as owners and waiters. */
#define SHARD (16 * 1024)
#define SPB 4
#define TENSORS 2
#define SLOTS 384
#define RESERVED 32
#define BLOCKS 160
#define HOT_BLOCKS 32
#define CHAOS_TAG 1300u
#define TASK_BLOCKS_MAX 4 /* blocks per task */
#define INFLIGHT_MAX 3    /* tasks a rank has in flight */
#define RANKS_MAX 32

#define RES_FD 3  /* a rank's end of the results pipe */
#define STOP_FD 4 /* a rank's end of the stop pipe: EOF = stop */

enum kind { K_LOAD, K_DUMP, K_DUMP_LAYERS, K_PREFETCH, K_LOOKUP, K_COUNT };

enum vkind { V_BYTES, V_ERROR, V_WAIT, V_RANK, V_CHECK, V_LEFTOVER, V_DURABLE, V_COUNT };

/* One rank -> controller message.  REC_DURABLE: a durable dump of the blocks
 * (universe indices, n of them, in text) returned 0. */
enum rec_type { REC_OPEN = 1, REC_TASK, REC_VIOLATION, REC_DURABLE };
struct rec {
	uint8_t type;
	uint8_t kind;   /* REC_TASK: enum kind; REC_VIOLATION: enum vkind */
	uint16_t idx;   /* rank index */
	int32_t rc;     /* REC_TASK: the task's result (1 = still running) */
	uint32_t n;     /* REC_TASK: shards (load, dump) or blocks (prefetch, lookup) */
	uint32_t incarnation;
	uint64_t wait_ns; /* REC_TASK: submit to completion */
	char text[168]; /* REC_OPEN: the variant; REC_VIOLATION: what broke */
};
_Static_assert(sizeof(struct rec) <= PIPE_BUF, "a record is one atomic pipe write");

#define PLANT_BYTES (1u << V_BYTES)
#define PLANT_WAIT (1u << V_WAIT)
#define PLANT_ERROR (1u << V_ERROR)
#define PLANT_DURABLE (1u << V_DURABLE) /* the controller: one durable block's file removed */
#define PLANT_GARBAGE (-99999) /* neither an errno nor a kvshare code */

struct opts {
	int ranks;
	unsigned seconds;
	uint64_t seed;
	unsigned kill_ms;   /* mean time between kills */
	unsigned timeout_ms, slack_ms;
	unsigned error_ppm, short_ppm;
	unsigned delay_us;  /* mean: each rank's is drawn from [0, 2 * delay_us] */
	const char *mixed;  /* the other variant's chaos binary */
	unsigned plant;     /* PLANT_* */
	/* rank only */
	int rank;           /* -1: controller */
	const char *uid, *root;
	uint32_t incarnation;
	bool populate;
};

static inline uint64_t rnd(uint64_t *state)
{
	*state += 0x9e3779b97f4a7c15ull;
	return kvs_mix64(*state);
}

static inline uint32_t rnd_below(uint64_t *state, uint32_t n)
{
	return (uint32_t)(rnd(state) % n);
}

static inline uint64_t budget_ns(const struct opts *o)
{
	return (uint64_t)(o->timeout_ms + o->slack_ms) * ST_MS;
}

/* A rank's whole life (--rank): open (and populate), run rounds of tasks until
 * the stop pipe's EOF, each reported on RES_FD; a cached rank flushes; close. */
kvs_test_rc rank_main(const struct opts *o);

#endif
