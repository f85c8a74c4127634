/*
 * tests/wait_util.h — helpers shared by the wait/ tests (header-only): the modes
 * each build offers, options with a relative deadline, shared memory for words,
 * and a publisher thread that publishes once a waiter is known to be waiting.
 */
#ifndef KVS_TESTS_WAIT_UTIL_H
#define KVS_TESTS_WAIT_UTIL_H

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>

#include "harness.h"
#include "wait/wait.h"

/* The modes this build accepts (KVS_WAIT_FUTEX only in the kernel build). */
static const uint32_t wt_modes[] = {
	KVS_WAIT_AUTO,
	KVS_WAIT_SPIN,
#if KVS_KERNEL
	KVS_WAIT_FUTEX,
#endif
};
#define WT_NMODES KVS_ARRAY_LEN(wt_modes)

static inline const char *wt_mode_name(uint32_t mode)
{
	return mode == KVS_WAIT_AUTO ? "auto" : mode == KVS_WAIT_SPIN ? "spin" : "futex";
}

/* Whether a waiter of this mode ends up asleep with WAITERS set. */
static inline int wt_mode_sleeps(uint32_t mode)
{
	return KVS_KERNEL && mode != KVS_WAIT_SPIN;
}

static inline struct kvs_wait_opts wt_opts(uint32_t mode, uint64_t timeout_ns)
{
	struct kvs_wait_opts o = { .deadline_ns = kvs_deadline_after(timeout_ns), .mode = mode };
	return o;
}

/* Anonymous MAP_SHARED memory (inherited by fork); zeroed. */
static inline void *wt_shared(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

/* Spin (yielding) until pred(word) or timeout; 0 or -ETIMEDOUT. */
static inline int wt_await_bits(_Atomic uint32_t *word, uint32_t mask, uint64_t timeout_ns)
{
	uint64_t deadline = kvs_deadline_after(timeout_ns);

	while (!(atomic_load(word) & mask)) {
		if (kvs_now_ns() >= deadline)
			return -ETIMEDOUT;
		sched_yield();
	}
	return 0;
}

/* A thread that publishes value into word once a waiter of the given mode is
 * waiting: for sleeping modes, once WAITERS is set (then it is asleep or about to
 * be refused by the kernel); for spinning ones at once. */
struct wt_publisher {
	pthread_t thread;
	_Atomic uint32_t *word;
	uint32_t value;
	uint32_t mode;
	int rc;
};

static inline void *wt_publisher_main(void *arg)
{
	struct wt_publisher *p = arg;

	p->rc = wt_mode_sleeps(p->mode) ? wt_await_bits(p->word, KVS_WAIT_WAITERS,
							  10 * KVS_NSEC_PER_SEC) : 0;
	kvs_wait_publish(p->word, p->value);
	return NULL;
}

static inline int wt_publisher_start(struct wt_publisher *p, _Atomic uint32_t *word,
				     uint32_t value, uint32_t mode)
{
	*p = (struct wt_publisher){ .word = word, .value = value, .mode = mode };
	return -pthread_create(&p->thread, NULL, wt_publisher_main, p);
}

static inline int wt_publisher_join(struct wt_publisher *p)
{
	pthread_join(p->thread, NULL);
	return p->rc;
}

#endif
