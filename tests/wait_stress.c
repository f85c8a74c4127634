/*
 * tests/wait_stress.c — publishers and waiters racing on many words, across two
 * processes, in every mode; built so that a lost wakeup cannot hide.
 *
 * A ring of RELAYS words, one relay thread per word, split between a parent and a
 * forked child.  Relay k waits on word k (its own reader) and forwards what
 * arrived to word k+1 (its own writer), one publish per token: the word's value
 * counts tokens, a wake may see several.  TOKENS tokens start spread over the
 * ring and travel until every relay has received TOKENS x LAPS of them, so the
 * run ends by itself and every wait must end by a wake — there is no timeout in
 * the protocol, and each wait has a 10 s deadline, so a lost wakeup fails the
 * run.  Several tokens in flight keep several relays publishing and arming at
 * once.  Odd relays wait with kvs_wait_any on their word plus decoys that never
 * change (futex_waitv in the kernel build).  Observer threads in both processes
 * pile onto random words with kvs_wait_any(word, done), so words have several
 * waiters of mixed modes; they leave when the parent publishes done.  Modes and
 * spin budgets come from a fixed seed (printed).
 *
 * Each handoff costs a scheduling latency, so on a machine whose cores are taken
 * by something else (the vLLM tests beside it in CI) the laps would take
 * minutes.  The parent's stopper thread waits for every relay (a counter bell,
 * `finished`); once BUDGET_NS has passed it publishes a stop word that every
 * relay also waits on, and the run reports how far it got (a lost wakeup before
 * then still fails it).  Then it publishes done.
 */
#include "wait_util.h"

#define RELAYS 8
#define TOKENS 3u
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define LAPS 4000u
#else
#define LAPS 20000u
#endif
#define OBSERVERS 4
#define DECOYS 5
#define STRIDE 16
#define SEED 20261129u
#define TIMEOUT_NS (10 * KVS_NSEC_PER_SEC)
#define BUDGET_NS (25 * KVS_NSEC_PER_SEC)

struct region {
	_Atomic uint32_t word[RELAYS][STRIDE];
	_Atomic uint32_t decoy[DECOYS];
	_Atomic uint32_t done;            /* parent -> observers: the relays finished */
	_Atomic uint32_t stop;            /* stopper -> relays: the time budget is spent */
	_Atomic uint32_t finished;        /* relays that returned (a bell, kvs_wait_bump) */
	_Atomic uint32_t received[RELAYS]; /* tokens each relay received (statistics) */
	_Atomic uint32_t observed;        /* total observer wakes (statistics) */
	_Atomic uint32_t relayed;         /* total relay wakes (statistics) */
	_Atomic uint32_t failed;
};

static struct region *rg;

static uint32_t rng_next(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

/* Tokens on word j at the start: one on every (RELAYS / TOKENS)-th word. */
static uint32_t initial_tokens(int j)
{
	return j % (RELAYS / TOKENS) == 0 && j / (RELAYS / TOKENS) < (int)TOKENS;
}

static const uint32_t budgets[] = { 0, 1000, KVS_WAIT_SPIN_DEFAULT_NS, 50000 };

static void *relay_main(void *arg)
{
	int k = (int)(intptr_t)arg;
	uint32_t rng = SEED ^ (uint32_t)(k * 7919 + 1);
	uint32_t mode = wt_modes[rng_next(&rng) % WT_NMODES];
	struct kvs_wait_spin spin;
	_Atomic uint32_t *words[2 + DECOYS] = { &rg->word[k][0], &rg->stop };
	uint32_t busy[2 + DECOYS] = { 0, 0 };
	_Atomic uint32_t *out = &rg->word[(k + 1) % RELAYS][0];
	uint32_t last = 0, next = initial_tokens((k + 1) % RELAYS), received = 0;
	unsigned n = k % 2 ? 2 + DECOYS : 2;

	kvs_wait_spin_init(&spin, budgets[rng_next(&rng) % KVS_ARRAY_LEN(budgets)]);
	for (int d = 0; d < DECOYS; d++) {
		words[2 + d] = &rg->decoy[d];
		busy[2 + d] = 0;
	}
	while (received < TOKENS * LAPS) {
		struct kvs_wait_opts o = wt_opts(mode, TIMEOUT_NS);
		uint32_t v;
		int rc;

		o.spin = &spin;
		busy[0] = last;
		rc = kvs_wait_any(words, busy, n, &o);
		if (rc == 1)
			break; /* the stopper: the budget is spent */
		if (rc != 0) {
			fprintf(stderr, "relay %d (%s, budget %u): after %u tokens: %d (%s)\n", k,
				wt_mode_name(mode), spin.budget_ns, received, rc, kvs_strerror(rc));
			atomic_store(&rg->failed, 1);
			break;
		}
		v = atomic_load_explicit(words[0], memory_order_acquire) & KVS_WAIT_VALUE_MASK;
		received += v - last;
		/* One publish per token: the next relay wakes on the first and re-arms
		 * while the later ones are published — the lost-wakeup window. */
		for (; last != v; last++)
			kvs_wait_publish(out, ++next);
		atomic_fetch_add_explicit(&rg->relayed, 1, memory_order_relaxed); /* statistics */
	}
	atomic_store_explicit(&rg->received[k], received, memory_order_relaxed); /* statistics */
	kvs_wait_bump(&rg->finished);
	return NULL;
}

/* Parent: wait until every relay (of both processes) has returned, publishing
 * stop at BUDGET_NS so that they do; then done, for the observers. */
static void *stopper_main(void *arg)
{
	uint64_t deadline = kvs_deadline_after(BUDGET_NS);
	bool stopped = false;
	uint32_t f;

	(void)arg;
	while ((f = atomic_load_explicit(&rg->finished, memory_order_relaxed) &
		    KVS_WAIT_VALUE_MASK) < RELAYS) {
		struct kvs_wait_opts o = { .deadline_ns = deadline, .mode = KVS_WAIT_AUTO };
		int rc = kvs_wait_while(&rg->finished, f, &o);

		if (rc >= 0)
			continue;
		if (rc != -ETIMEDOUT || stopped) {
			fprintf(stderr, "stopper: %u of %d relays returned: %d (%s)\n", f, RELAYS, rc,
				kvs_strerror(rc));
			atomic_store(&rg->failed, 1);
			break;
		}
		kvs_wait_publish(&rg->stop, 1);
		stopped = true;
		deadline = kvs_deadline_after(3 * TIMEOUT_NS);
	}
	kvs_wait_publish(&rg->done, 1);
	return NULL;
}

static void *observer_main(void *arg)
{
	int id = (int)(intptr_t)arg;
	uint32_t rng = SEED ^ (uint32_t)(id * 104729 + 17);

	for (;;) {
		int j = (int)(rng_next(&rng) % RELAYS);
		_Atomic uint32_t *words[2] = { &rg->word[j][0], &rg->done };
		uint32_t busy[2] = {
			atomic_load(words[0]) & KVS_WAIT_VALUE_MASK,
			0,
		};
		struct kvs_wait_opts o = wt_opts(wt_modes[rng_next(&rng) % WT_NMODES], TIMEOUT_NS);
		int rc = kvs_wait_any(words, busy, 2, &o);

		if (rc == 1)
			return NULL;
		if (rc != 0) {
			fprintf(stderr, "observer %d on word %d: %d (%s)\n", id, j, rc, kvs_strerror(rc));
			atomic_store(&rg->failed, 1);
			return NULL;
		}
		atomic_fetch_add_explicit(&rg->observed, 1, memory_order_relaxed); /* statistics */
	}
}

/* Run relays [r0, r0 + RELAYS / 2) and observers [o0, o0 + OBSERVERS / 2) of one
 * process, and in the parent (r0 0) the stopper. */
static kvs_test_rc run_side(int r0, int o0)
{
	pthread_t relays[RELAYS / 2], obs[OBSERVERS / 2], stopper;

	for (int i = 0; i < OBSERVERS / 2; i++)
		KVS_CHECK_OK(-pthread_create(&obs[i], NULL, observer_main, (void *)(intptr_t)(o0 + i)));
	if (r0 == 0)
		KVS_CHECK_OK(-pthread_create(&stopper, NULL, stopper_main, NULL));
	for (int i = 0; i < RELAYS / 2; i++)
		KVS_CHECK_OK(-pthread_create(&relays[i], NULL, relay_main, (void *)(intptr_t)(r0 + i)));
	for (int i = 0; i < RELAYS / 2; i++)
		pthread_join(relays[i], NULL);
	if (r0 == 0)
		pthread_join(stopper, NULL);
	for (int i = 0; i < OBSERVERS / 2; i++)
		pthread_join(obs[i], NULL);
	if (atomic_load(&rg->failed))
		KVS_FAILF("a relay or observer failed (above)");
	return KVS_TEST_PASS;
}

static kvs_test_rc child_side(void *arg)
{
	(void)arg;
	return run_side(RELAYS / 2, OBSERVERS / 2);
}

static kvs_test_rc test_relay_ring(void)
{
	pid_t child;
	int crc;

	rg = wt_shared(sizeof(*rg));
	KVS_CHECK(rg != NULL);
	printf("seed %u: %d relays over 2 processes, %u tokens x %u laps, %d observers\n", SEED,
	       RELAYS, TOKENS, LAPS, OBSERVERS);
	for (int j = 0; j < RELAYS; j++)
		atomic_store(&rg->word[j][0], initial_tokens(j));
	child = kvs_test_fork(child_side, NULL);
	KVS_CHECK(child > 0);
	kvs_test_rc side = run_side(0, 0);
	crc = kvs_test_reap(child, 60000);
	printf("relay wakes: %u, observer wakes: %u\n", atomic_load(&rg->relayed),
	       atomic_load(&rg->observed));
	if (atomic_load(&rg->stop) & KVS_WAIT_VALUE_MASK) {
		uint32_t lo = UINT32_MAX, hi = 0;

		for (int k = 0; k < RELAYS; k++) {
			uint32_t r = atomic_load(&rg->received[k]);

			lo = r < lo ? r : lo;
			hi = r > hi ? r : hi;
		}
		printf("stopped at the %llu s budget (the machine's cores are busy): relays "
		       "received %u..%u of %u tokens each\n",
		       (unsigned long long)(BUDGET_NS / KVS_NSEC_PER_SEC), lo, hi, TOKENS * LAPS);
	}
	munmap(rg, sizeof(*rg));
	KVS_CHECK_EQ(crc, 0);
	KVS_TRY(side);
	return KVS_TEST_PASS;
}

static const struct kvs_test_case cases[] = {
	{ "relay_ring", test_relay_ring },
};

KVS_TEST_MAIN(cases)
