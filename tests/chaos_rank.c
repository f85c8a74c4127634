/*
 * tests/chaos_rank.c — a chaos run's rank (tests/chaos.c says what the run
 * is): a store on the shared cache over the fault-wrapped posix backend, a
 * seeded random mix of loads, dumps (durable or cached, whole or layer-wise),
 * prefetches and lookups, a few in flight, each reported to the controller as
 * soon as it ends, every load's bytes checked here; until the stop pipe's EOF
 * or a kill -9.
 */
#include <pthread.h>

#include "chaos.h"

/* ======================================================================== */
/* Rank                                                                      */

struct job {
	enum kind kind;
	bool live;
	uint64_t id, t0;
	uint64_t layer_ids[SPB];       /* K_DUMP_LAYERS: one task per shard index */
	uint32_t nb;
	uint32_t idx[TASK_BLOCKS_MAX]; /* the blocks' universe indices */
	struct kvs_block_id blocks[TASK_BLOCKS_MAX];
	struct st_task t; /* load, dump (the layer-wise dump's tasks: one shard index each,
			     t.shards + layer * nb) */
};

#define DRAINING_MAX 16

struct rank {
	const struct opts *o;
	struct kvs_store *s;
	uint64_t rng;
	unsigned planted; /* plants done */
	/* a layer-wise cached dump failed after others of its layers were
	 * acknowledged: those blocks never complete, a flush says -KVS_EINCOMPLETE */
	bool partial;
	/* buffers of tasks reported still running: the store's close drains them */
	struct st_task draining[DRAINING_MAX];
	uint32_t ndraining;
};

static void rank_send(const struct rank *r, const struct rec *m)
{
	struct rec c = *m;

	c.idx = (uint16_t)r->o->rank;
	c.incarnation = r->o->incarnation;
	/* One write of the whole record: atomic on a pipe.  A failure means the
	 * controller is gone; the stop pipe then ends this rank. */
	(void)!write(RES_FD, &c, sizeof(c));
}

static void rank_violation(const struct rank *r, enum vkind v, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void rank_violation(const struct rank *r, enum vkind v, const char *fmt, ...)
{
	struct rec m = { .type = REC_VIOLATION, .kind = (uint8_t)v };
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(m.text, sizeof(m.text), fmt, ap);
	va_end(ap);
	rank_send(r, &m);
}

static bool rank_stopped(void)
{
	struct pollfd p = { .fd = STOP_FD, .events = POLLIN };

	return poll(&p, 1, 0) != 0; /* EOF (POLLHUP), or an error: stop either way */
}

/* A block of the universe: half the picks from the hot set. */
static uint32_t pick_block(struct rank *r)
{
	return rnd_below(&r->rng, 2) ? rnd_below(&r->rng, HOT_BLOCKS) : rnd_below(&r->rng, BLOCKS);
}

/* nb distinct random blocks into j->blocks. */
static void pick_blocks(struct rank *r, struct job *j, uint32_t nb)
{
	j->nb = 0;
	while (j->nb < nb) {
		uint32_t k = pick_block(r);
		bool dup = false;

		for (uint32_t i = 0; i < j->nb; i++)
			dup |= j->idx[i] == k;
		if (!dup) {
			j->idx[j->nb] = k;
			j->blocks[j->nb++] = st_block(CHAOS_TAG, k);
		}
	}
}

/* Task buffers for shards [first, first + n) of every block of j. */
static kvs_test_rc job_shards(struct job *j, uint32_t first, uint32_t n)
{
	KVS_TRY(st_task_whole(&j->t, j->nb * n, TENSORS, SHARD));
	for (uint32_t i = 0; i < j->nb * n; i++)
		st_task_set(&j->t, i, &j->blocks[i / n], first + i % n);
	return KVS_TEST_PASS;
}

/* Task buffers for every shard of every block of j, layer by layer: entries
 * [layer * nb, (layer + 1) * nb) are shard `layer` of each block. */
static kvs_test_rc job_layers(struct job *j)
{
	KVS_TRY(st_task_whole(&j->t, j->nb * SPB, TENSORS, SHARD));
	for (uint32_t i = 0; i < j->nb * SPB; i++)
		st_task_set(&j->t, i, &j->blocks[i % j->nb], i / j->nb);
	return KVS_TEST_PASS;
}

static void report_task(struct rank *r, const struct job *j, int rc, uint64_t waited)
{
	struct rec m = { .type = REC_TASK, .kind = (uint8_t)j->kind, .rc = rc,
			 .n = j->kind == K_LOAD || j->kind == K_DUMP || j->kind == K_DUMP_LAYERS
				      ? j->t.n : j->nb,
			 .wait_ns = waited };

	if ((r->o->plant & PLANT_WAIT) && !(r->planted & PLANT_WAIT)) {
		m.wait_ns += budget_ns(r->o) + ST_MS; /* as if it had waited past the bound */
		r->planted |= PLANT_WAIT;
	}
	if ((r->o->plant & PLANT_ERROR) && !(r->planted & PLANT_ERROR) && rc < 0) {
		m.rc = PLANT_GARBAGE;
		r->planted |= PLANT_ERROR;
	}
	rank_send(r, &m);
}

/* A lookup runs in the caller: it is reported at once. */
static void run_lookup(struct rank *r, struct job *j)
{
	bool hits[TASK_BLOCKS_MAX];
	uint64_t t0 = kvs_now_ns();
	int rc = rnd_below(&r->rng, 2) ? kvs_store_lookup(r->s, j->blocks, j->nb, hits)
				       : kvs_store_lookup_prefix(r->s, j->blocks, j->nb);

	report_task(r, j, rc, kvs_now_ns() - t0);
}

/* Start job j (kind and blocks chosen here, or dump of blocks given by populate). */
static kvs_test_rc job_start(struct rank *r, struct job *j)
{
	int rc = 0;

	j->live = false;
	j->t0 = kvs_now_ns();
	switch (j->kind) {
	case K_LOAD:
		if (rnd_below(&r->rng, 10) < 3) { /* a run of one block's shards */
			uint32_t first = rnd_below(&r->rng, SPB);

			pick_blocks(r, j, 1);
			KVS_TRY(job_shards(j, first, 1 + rnd_below(&r->rng, SPB - first)));
		} else {
			pick_blocks(r, j, 1 + rnd_below(&r->rng, TASK_BLOCKS_MAX));
			KVS_TRY(job_shards(j, 0, SPB));
		}
		st_task_poison(&j->t);
		j->t0 = kvs_now_ns();
		rc = kvs_store_load(r->s, j->t.shards, j->t.n, &j->id);
		break;
	case K_DUMP:
		KVS_TRY(job_shards(j, 0, SPB));
		st_task_fill(&j->t);
		j->t0 = kvs_now_ns();
		rc = kvs_store_dump(r->s, j->t.shards, j->t.n, NULL, &j->id);
		break;
	case K_DUMP_LAYERS: /* every layer's task in flight at once, as per-layer saves */
		KVS_TRY(job_layers(j));
		st_task_fill(&j->t);
		j->t0 = kvs_now_ns();
		for (uint32_t l = 0; l < SPB && rc == 0; l++) {
			rc = kvs_store_dump(r->s, j->t.shards + l * j->nb, j->nb, NULL, &j->layer_ids[l]);
			if (rc) /* the layers already in flight drain into the store's close */
				for (uint32_t k = 0; k < l; k++)
					(void)kvs_store_wait(r->s, j->layer_ids[k], budget_ns(r->o));
		}
		break;
	case K_PREFETCH:
		pick_blocks(r, j, 1 + rnd_below(&r->rng, TASK_BLOCKS_MAX));
		rc = kvs_store_prefetch(r->s, j->blocks, j->nb, &j->id);
		break;
	case K_LOOKUP:
		pick_blocks(r, j, 1 + rnd_below(&r->rng, TASK_BLOCKS_MAX));
		run_lookup(r, j);
		return KVS_TEST_PASS;
	default:
		KVS_FAILF("bad job kind %d", (int)j->kind);
	}
	if (rc < 0) { /* refused at submit: a failed task too */
		report_task(r, j, rc, kvs_now_ns() - j->t0);
		st_task_free(&j->t);
		return KVS_TEST_PASS;
	}
	j->live = true;
	return KVS_TEST_PASS;
}

/* Check a completed load's bytes (after the plant, if any). */
static void verify_load(struct rank *r, struct job *j)
{
	if ((r->o->plant & PLANT_BYTES) && !(r->planted & PLANT_BYTES)) {
		st_buf(&j->t, 0, 0)[0] ^= 0x5a; /* what a wrong copy would leave */
		r->planted |= PLANT_BYTES;
	}
	for (uint32_t i = 0; i < j->t.n; i++) {
		/* st_task_verify_one prints the first bad byte on stderr */
		if (st_task_verify_one(&j->t, i).code != KVS_TEST_PASS.code) {
			const struct kvs_store_shard *sh = &j->t.shards[i];

			rank_violation(r, V_BYTES,
				       "load of %u shards completed with wrong bytes in shard %u of "
				       "block %02x%02x%02x%02x.. (first bad byte on stderr)",
				       j->t.n, sh->shard, sh->block.bytes[0], sh->block.bytes[1],
				       sh->block.bytes[2], sh->block.bytes[3]);
			return;
		}
	}
}

/* Wait for task id of j (bounded by j's budget). */
static int job_wait(struct rank *r, const struct job *j, uint64_t id)
{
	uint64_t budget = budget_ns(r->o);
	uint64_t left = j->t0 + budget > kvs_now_ns() ? j->t0 + budget - kvs_now_ns() : 0;

	return kvs_store_wait(r->s, id, left + ST_MS);
}

/* A dump of j's blocks returned 0 (durable, or cached: acknowledged): tell the
 * controller, which checks at the end that each of them is in the backend. */
static void report_durable(struct rank *r, const struct job *j)
{
	struct rec m = { .type = REC_DURABLE, .n = j->nb };

	memcpy(m.text, j->idx, j->nb * sizeof(j->idx[0]));
	rank_send(r, &m);
}

/* Wait for j (bounded), check it, report it. */
static void job_finish(struct rank *r, struct job *j)
{
	int rc = 0;

	if (j->kind == K_DUMP_LAYERS) {
		/* The first error is the job's, but a layer that failed leaves the
		 * blocks of the others incomplete: their -KVS_EINCOMPLETE is that
		 * layer's consequence, and its error is the job's. */
		bool acked = false;

		for (uint32_t l = 0; l < SPB; l++) {
			int one = job_wait(r, j, j->layer_ids[l]);

			acked |= one == 0;
			if (rc == 0 || rc == 1 || (rc == -KVS_EINCOMPLETE && one < 0))
				rc = one == 0 ? rc : one;
		}
		r->partial |= acked && rc != 0;
	} else {
		rc = job_wait(r, j, j->id);
	}
	if (rc == 0 && j->kind == K_LOAD)
		verify_load(r, j);
	if (rc == 0 && (j->kind == K_DUMP || j->kind == K_DUMP_LAYERS))
		report_durable(r, j);
	report_task(r, j, rc, kvs_now_ns() - j->t0);
	j->live = false;
	/* rc 1: still running past the bound (reported as such).  The store's close
	 * drains it, so its buffers must live until then (beyond DRAINING_MAX such
	 * tasks, they are left to the process's exit). */
	if (rc == 1 && r->ndraining < DRAINING_MAX)
		r->draining[r->ndraining++] = j->t;
	else if (rc != 1)
		st_task_free(&j->t);
	memset(&j->t, 0, sizeof(j->t));
}

/* The library's last ERROR line (its threads log too): named when open fails;
 * and its last WARN or ERROR line: printed after a failed flush (a block
 * dropped says why in a WARN line). */
static pthread_mutex_t rank_log_mu = PTHREAD_MUTEX_INITIALIZER;
static char rank_log_last[512] = "-";
static char rank_warn_last[512] = "-";

static void rank_log(void *arg, int level, const char *msg)
{
	(void)arg;
	if (level > KVS_LOG_WARN)
		return;
	pthread_mutex_lock(&rank_log_mu);
	snprintf(rank_warn_last, sizeof(rank_warn_last), "%s", msg);
	if (level <= KVS_LOG_ERROR)
		snprintf(rank_log_last, sizeof(rank_log_last), "%s", msg);
	pthread_mutex_unlock(&rank_log_mu);
}

static kvs_test_rc rank_open(struct rank *r)
{
	const struct opts *o = r->o;
	struct kvs_store_config cfg;
	char kv[1536];
	int rc;

	kvs_store_config_init(&cfg);
	cfg.log = rank_log;
	snprintf(kv, sizeof(kv),
		 "unique_id=%s,device_id=%d,local_rank_size=%d,shard_size=%u,block_size=%u,"
		 "tensor_size=%u,cache_buffer_capacity_gb=%.9f,reserved_slots=%u,"
		 "backend=posix,backend_roots=%s,fsync=0,fault_error_ppm=%u,fault_short_ppm=%u,"
		 "fault_delay_us=%u,fault_seed=%llu,copy_engine=host,timeout_ms=%u,dump_wait=%s",
		 o->uid, o->rank, o->ranks, SHARD, SHARD * SPB, SHARD / TENSORS,
		 (double)SLOTS * SHARD / (1u << 30), RESERVED, o->root, o->error_ppm,
		 o->short_ppm, rnd_below(&r->rng, 2 * o->delay_us + 1), (unsigned long long)rnd(&r->rng),
		 o->timeout_ms, o->rank % 2 ? "cached" : "durable");
	KVS_TRY(st_parse(&cfg, kv));
	rc = kvs_store_open(&cfg, &r->s);
	if (rc) {
		pthread_mutex_lock(&rank_log_mu);
		fprintf(stderr, "chaos rank %d: kvs_store_open: %d (%s); log: %s\n", o->rank, rc,
			kvs_strerror(rc), rank_log_last);
		pthread_mutex_unlock(&rank_log_mu);
		return KVS_TEST_FAIL;
	}
	struct rec m = { .type = REC_OPEN, .rc = kvs_cache_rank(kvs_store_cache(r->s)) };
	snprintf(m.text, sizeof(m.text), "%s", kvs_variant());
	rank_send(r, &m);
	return KVS_TEST_PASS;
}

/* First start only: dump this rank's share of the hot half of the universe, so
 * that loads find blocks in the backend from the start. */
static kvs_test_rc rank_populate(struct rank *r)
{
	struct job j = { .kind = K_DUMP };

	for (uint32_t b = (uint32_t)r->o->rank; b < BLOCKS / 2 && !rank_stopped();
	     b += (uint32_t)r->o->ranks) {
		j.nb = 1;
		j.idx[0] = b;
		j.blocks[0] = st_block(CHAOS_TAG, b);
		KVS_TRY(job_start(r, &j));
		if (j.live)
			job_finish(r, &j);
	}
	return KVS_TEST_PASS;
}

kvs_test_rc rank_main(const struct opts *o)
{
	static struct job jobs[INFLIGHT_MAX];
	static struct rank r; /* large: task buffers' descriptions */

	r.o = o;
	r.rng = kvs_mix64(o->seed ^ ((uint64_t)o->rank << 40) ^ o->incarnation);
	KVS_TRY(rank_open(&r));
	if (o->populate)
		KVS_TRY(rank_populate(&r));
	while (!rank_stopped()) {
		uint32_t n = 1 + rnd_below(&r.rng, INFLIGHT_MAX);

		for (uint32_t i = 0; i < n; i++) {
			uint32_t p = rnd_below(&r.rng, 100);

			/* 45% load, 12% dump, 8% layer-wise dump, 15% prefetch, 20% lookup */
			jobs[i].kind = p < 45 ? K_LOAD : p < 57 ? K_DUMP : p < 65 ? K_DUMP_LAYERS
					       : p < 80 ? K_PREFETCH : K_LOOKUP;
			if (jobs[i].kind == K_DUMP || jobs[i].kind == K_DUMP_LAYERS)
				pick_blocks(&r, &jobs[i], 1 + rnd_below(&r.rng, TASK_BLOCKS_MAX));
			KVS_TRY(job_start(&r, &jobs[i]));
		}
		for (uint32_t i = 0; i < n; i++)
			if (jobs[i].live)
				job_finish(&r, &jobs[i]);
	}
	if (o->rank % 2) { /* cached: every acknowledged block in the backend first */
		uint64_t pending = 0;
		int rc = kvs_store_flush(r.s, budget_ns(o) + 30 * ST_SEC, &pending);

		if (rc && !(rc == -KVS_EINCOMPLETE && r.partial)) {
			rank_violation(&r, V_DURABLE, "kvs_store_flush before close: %d (%s), %llu "
				       "blocks pending", rc, kvs_strerror(rc),
				       (unsigned long long)pending);
			pthread_mutex_lock(&rank_log_mu);
			fprintf(stderr, "chaos rank %d: the library's last warning before that flush: "
				"%s\n", o->rank, rank_warn_last);
			pthread_mutex_unlock(&rank_log_mu);
		}
	}
	kvs_store_close(r.s);
	for (uint32_t i = 0; i < r.ndraining; i++)
		st_task_free(&r.draining[i]);
	return KVS_TEST_PASS;
}
