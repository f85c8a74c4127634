/*
 * core/rank.c — who is attached: the rank table, its OFD-lock liveness, the
 * lifecycle lock, and reaping the entries of dead processes.
 *
 * Liveness.  Each attached process holds an OFD write lock on the byte of its
 * rank entry in the control file for as long as it is attached.  A rank entry
 * marked ATTACHED whose byte nobody locks belongs to a dead process, whatever the
 * pid says (pids are never used: reuse, namespaces, zombies).  This is the only
 * source of liveness: the header's bytes never decide whether a cache is alive.
 *
 * OFD locks belong to an open file description, which fork() shares with the
 * child (through the descriptor and through the control segment's mapping, which
 * holds a reference to the file too): a forked child would keep its parent's
 * rank alive after the parent's death.  So every open handle is listed here, and
 * a pthread_atfork child handler unmaps the child's copy of each control segment
 * and closes its copy of the descriptor: the child never holds the parent's
 * liveness, and may only close the handles it inherited.
 *
 * The lifecycle lock (an OFD lock on KVS_LOCK_LIFECYCLE_BYTE) serialises
 * creation, attach, detach, adoption, reaping and removal.
 *
 * Reaping a dead entry drops its pins under the bucket locks (pin.c) and frees
 * it; its counters stay where they are (core/layout.h: counters are an
 * entry's, over all its attaches).  An entry whose pins could not all be
 * dropped (a bucket lock timed out) stays ATTACHED for the next reaper.  Who
 * reaps: every attach (under the lifecycle lock it holds anyway); and, never
 * waiting for that lock (kvs_core_reap_try: held, it is an attach, which reaps,
 * or a detach), a waiter whose filler died, a takeover of a dead writer's
 * claim, a get that found every candidate slot pinned, and each rank's store
 * once a second -- so a dead rank's pins never outlive it by long however long
 * the survivors run without a new attach, and no reaper waits on a peer.
 *
 * Memory orders follow the rule in core/layout.h ("Memory orders"); anything
 * else is commented where it happens.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "core/core.h"

/* ---- OFD locks ---- */

int kvs_core_ofd_lock(int fd, off_t byte, short type)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = byte, .l_len = 1 };

	return fcntl(fd, F_OFD_SETLK, &fl) == 0 ? 0 : -errno;
}

/* Is any byte of [start, start + len) locked by another open file description? */
static bool ofd_locked(int fd, off_t start, off_t len)
{
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = start, .l_len = len };

	if (fcntl(fd, F_OFD_GETLK, &fl) != 0)
		return true; /* cannot tell: assume alive (never remove a live cache) */
	return fl.l_type != F_UNLCK;
}

bool kvs_core_any_rank_locked(int fd)
{
	return ofd_locked(fd, 0, KVS_MAX_RANKS);
}

int kvs_core_lifecycle_lock(int fd, uint64_t deadline)
{
	/* fcntl has no timed wait: poll with backoff.  Holders keep it for
	 * microseconds, or a creator for its pre-fault. */
	uint64_t pause_ns = 100000;

	for (;;) {
		int rc = kvs_core_ofd_lock(fd, KVS_LOCK_LIFECYCLE_BYTE, F_WRLCK);

		if (rc != -EAGAIN && rc != -EACCES)
			return rc;
		if (kvs_now_ns() >= deadline)
			return -ETIMEDOUT;
		struct timespec ts = kvs_ns_to_timespec(pause_ns);
		nanosleep(&ts, NULL);
		if (pause_ns < 5000000)
			pause_ns *= 2;
	}
}

void kvs_core_lifecycle_unlock(int fd)
{
	kvs_core_ofd_lock(fd, KVS_LOCK_LIFECYCLE_BYTE, F_UNLCK);
}

/* ---- liveness ---- */

static bool entry_attached(struct kvs_cache *c, uint32_t r)
{
	/* acquire: pairs with the release stores of attach/detach/reap, so the
	 * entry's other fields are those of its current attach */
	return atomic_load_explicit(&c->ranks[r].state, memory_order_acquire) == KVS_SHM_RANK_ATTACHED;
}

bool kvs_core_rank_alive(struct kvs_cache *c, uint32_t r, uint32_t epoch)
{
	if (r >= KVS_MAX_RANKS || !entry_attached(c, r) ||
	    /* relaxed: ordered by the acquire of state just before */
	    atomic_load_explicit(&c->ranks[r].epoch, memory_order_relaxed) != epoch)
		return false;
	if ((int)r == c->rank_idx)
		return true; /* our own lock is invisible to F_OFD_GETLK on our fd */
	return ofd_locked(c->ctl_fd, (off_t)r, 1);
}

bool kvs_core_rank_locked_besides_watchers(struct kvs_cache *c)
{
	for (uint32_t r = 0; r < KVS_MAX_RANKS; r++) {
		if ((int)r == c->rank_idx || !ofd_locked(c->ctl_fd, (off_t)r, 1))
			continue;
		/* A locked byte is a live process; only an entry that says it is a
		 * watcher (attached, device -1) is ignored.  One still attaching
		 * (not ATTACHED yet) counts as live: never remove under it. */
		if (!entry_attached(c, r) || c->ranks[r].device_id >= 0)
			return true;
	}
	return false;
}

bool kvs_core_any_entry_attached(struct kvs_cache *c)
{
	for (uint32_t r = 0; r < KVS_MAX_RANKS; r++)
		if (entry_attached(c, r))
			return true;
	return false;
}

/* Live attached GPU ranks other than ours (lifecycle lock held). */
static uint32_t live_gpu_ranks(struct kvs_cache *c)
{
	uint32_t n = 0;

	for (uint32_t r = 0; r < KVS_MAX_RANKS; r++)
		if ((int)r != c->rank_idx && entry_attached(c, r) && c->ranks[r].device_id >= 0 &&
		    ofd_locked(c->ctl_fd, (off_t)r, 1))
			n++;
	return n;
}

/* ---- reaping ---- */

/* Under the lifecycle lock: drop dead entry r's pins and free it.  0, or the
 * bucket lock's error (the entry then stays ATTACHED for the next reaper). */
static int reap_rank(struct kvs_cache *c, uint32_t r)
{
	struct kvs_shm_rank *e = &c->ranks[r];
	int n = kvs_core_drop_pins(c, r);

	if (n < 0) {
		kvs_log_warn(&c->log, "rank entry %u (pid %d) died; its pins are left for the next reaper: %s",
			     r, e->pid, kvs_strerror(n));
		return n;
	}
	kvs_log_warn(&c->log, "rank entry %u (pid %d, device %d) died; %d pins dropped", r, e->pid,
		     e->device_id, n);
	/* its counters stay in the entry (the node's total keeps them) */
	atomic_fetch_add_explicit(&c->hdr->ranks_reaped, 1, memory_order_relaxed);
	/* release: pairs with entry_attached()'s acquire */
	atomic_store_explicit(&e->state, KVS_SHM_RANK_FREE, memory_order_release);
	return 0;
}

/* Is rank entry r another process's, attached, with nobody holding its
 * liveness byte: dead, not reaped yet? */
static bool entry_dead(struct kvs_cache *c, uint32_t r)
{
	return (int)r != c->rank_idx && entry_attached(c, r) && !ofd_locked(c->ctl_fd, (off_t)r, 1);
}

int kvs_core_reap_locked(struct kvs_cache *c)
{
	int n = 0;

	for (uint32_t r = 0; r < KVS_MAX_RANKS; r++)
		if (entry_dead(c, r) && reap_rank(c, r) == 0)
			n++;
	return n;
}

int kvs_core_lifecycle_enter(struct kvs_cache *c)
{
	int rc;

	pthread_mutex_lock(&c->reap_mu);
	rc = kvs_core_lifecycle_lock(c->ctl_fd, kvs_deadline_after(c->cfg.attach_timeout_ns));
	if (rc)
		pthread_mutex_unlock(&c->reap_mu);
	return rc;
}

void kvs_core_lifecycle_exit(struct kvs_cache *c)
{
	kvs_core_lifecycle_unlock(c->ctl_fd);
	pthread_mutex_unlock(&c->reap_mu);
}

int kvs_core_reap_try(struct kvs_cache *c)
{
	uint32_t r = 0;
	int rc;

	while (r < KVS_MAX_RANKS && !entry_dead(c, r))
		r++;
	if (r == KVS_MAX_RANKS)
		return 0; /* the common case: a few loads and F_OFD_GETLKs */
	if (pthread_mutex_trylock(&c->reap_mu))
		return -EBUSY;
	rc = kvs_core_ofd_lock(c->ctl_fd, KVS_LOCK_LIFECYCLE_BYTE, F_WRLCK);
	if (rc == 0) {
		rc = kvs_core_reap_locked(c);
		kvs_core_lifecycle_unlock(c->ctl_fd);
	} else if (rc == -EAGAIN || rc == -EACCES) {
		rc = -EBUSY; /* an attach, a detach or a reap under way: later */
	}
	pthread_mutex_unlock(&c->reap_mu);
	return rc;
}

/* ---- attach and detach of this handle's entry ---- */

int kvs_core_rank_attach(struct kvs_cache *c)
{
	uint32_t gpu;

	for (uint32_t r = 0; r < KVS_MAX_RANKS; r++) {
		struct kvs_shm_rank *e = &c->ranks[r];

		if (atomic_load_explicit(&e->state, memory_order_acquire) != KVS_SHM_RANK_FREE)
			continue;
		if (kvs_core_ofd_lock(c->ctl_fd, (off_t)r, F_WRLCK))
			continue;
		/* A FREE entry holds no pins; one that does (a corrupt or hostile
		 * table) gives them back with their refs before it is reused. */
		if (kvs_core_drop_pins(c, r) < 0) {
			kvs_core_ofd_lock(c->ctl_fd, (off_t)r, F_UNLCK);
			continue;
		}
		c->rank_idx = (int)r;
		kvs_core_stats_base(e);
		c->rank_epoch = atomic_load_explicit(&e->epoch, memory_order_relaxed) + 1;
		e->pid = (int32_t)getpid();
		e->device_id = c->cfg.device_id;
		/* relaxed: published by the release below; the store sets it later */
		atomic_store_explicit(&e->copy_engine, 0, memory_order_relaxed);
		atomic_store_explicit(&e->epoch, c->rank_epoch, memory_order_relaxed);
		/* release: the fields above are visible to whoever sees ATTACHED */
		atomic_store_explicit(&e->state, KVS_SHM_RANK_ATTACHED, memory_order_release);
		c->me = e;
		gpu = live_gpu_ranks(c);
		if (c->cfg.device_id >= 0 && gpu + 1 > c->local_rank_size) {
			atomic_fetch_add_explicit(&c->hdr->lrs_mismatch, 1, memory_order_relaxed);
			kvs_log_warn(&c->log, "%u ranks (device_id >= 0) attached, local_rank_size is %u",
				     gpu + 1, c->local_rank_size);
		}
		return 0;
	}
	kvs_log_error(&c->log, "no free rank entry (%u attached)", KVS_MAX_RANKS);
	return -EBUSY;
}

void kvs_core_rank_set_copy_engine(struct kvs_cache *c, uint32_t engine)
{
	/* relaxed: a description read racily (kvs_cache_rank_info, inspect) */
	if (c && c->me)
		atomic_store_explicit(&c->me->copy_engine, engine, memory_order_relaxed);
}

bool kvs_core_rank_detach(struct kvs_cache *c)
{
	int n = kvs_core_drop_pins(c, (uint32_t)c->rank_idx);

	if (n < 0) {
		/* Keep the entry and its pins: once our descriptor closes it looks
		 * dead, and the next reaper drops what we could not. */
		kvs_log_warn(&c->log, "close: %s dropping this process's pins; a peer will reap them",
			     kvs_strerror(n));
		return false;
	}
	/* release: pairs with entry_attached()'s acquire */
	atomic_store_explicit(&c->me->state, KVS_SHM_RANK_FREE, memory_order_release);
	kvs_core_ofd_lock(c->ctl_fd, (off_t)c->rank_idx, F_UNLCK);
	return true;
}

/* ---- fork ---- */

/* Every open handle, so that a forked child can drop its copies of their
 * control descriptors.  Guarded by handles_mu, which the atfork prepare handler
 * takes so the list is consistent in the child. */
static pthread_mutex_t handles_mu = PTHREAD_MUTEX_INITIALIZER;
static struct kvs_cache *handles;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void atfork_prepare(void)
{
	pthread_mutex_lock(&handles_mu);
}

static void atfork_parent(void)
{
	pthread_mutex_unlock(&handles_mu);
}

static void atfork_child(void)
{
	/* The description lives as long as any descriptor OR MAPPING of it: the
	 * child drops both its copies (its handles are the parent's; it may only
	 * close them).  That releases nothing while the parent lives; once the
	 * parent dies, nothing of the child's keeps the parent's locks. */
	for (struct kvs_cache *c = handles; c; c = c->next) {
		if (c->ctl)
			munmap(c->ctl, c->ctl_bytes);
		c->ctl = NULL;
		c->hdr = NULL;
		c->me = NULL;
		if (c->ctl_fd >= 0)
			close(c->ctl_fd);
		c->ctl_fd = -1;
	}
	pthread_mutex_unlock(&handles_mu);
}

static void atfork_register(void)
{
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

void kvs_core_handle_register(struct kvs_cache *c)
{
	pthread_once(&atfork_once, atfork_register);
	pthread_mutex_lock(&handles_mu);
	c->next = handles;
	handles = c;
	pthread_mutex_unlock(&handles_mu);
}

void kvs_core_handle_unregister(struct kvs_cache *c)
{
	pthread_mutex_lock(&handles_mu);
	for (struct kvs_cache **p = &handles; *p; p = &(*p)->next) {
		if (*p == c) {
			*p = c->next;
			break;
		}
	}
	pthread_mutex_unlock(&handles_mu);
}
