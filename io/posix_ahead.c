/*
 * io/posix_ahead.c — the posix backend's open-ahead: the block files a caller
 * says it will read soon (kvs_backend_hint_read) are opened, and their headers
 * read and checked, on a thread of the handle's own (the opener), so that the
 * issuer's first submit of such a block takes an open descriptor instead of
 * waiting, in the header's pread, behind the reads already queued at the disk
 * (docs/io.md, "Open-ahead": on a busy disk that wait was the whole gap between
 * buffered io_uring reads and fio's).
 *
 * The table.  AHEAD_MAX entries under mu, each FREE, WANTED (hinted), OPENING
 * (the opener's, between its two critical sections) or READY (an open fd whose
 * header passed, for the issuer).  A hint of a block already in the fd cache or
 * the table is a no-op; with no FREE entry it replaces the oldest entry the
 * reads skipped (WANTED or READY, hinted before the last entry taken: a peer
 * read that block, or its load ended; its fd is closed), and without one it
 * is dropped (that block is opened at its first read, as without a hint):
 * hints come nearest first and reads follow them, so the table keeps the
 * nearest AHEAD_MAX blocks not yet read.  The opener takes the WANTED
 * entries, oldest first.
 *
 * The issuer's side (fd_get, on a miss in its fd cache): READY is taken as is
 * (the fd moves into the fd cache); otherwise the issuer opens the file itself,
 * now, and never waits for the opener: a WANTED entry is dropped, an OPENING
 * one marked stale (the opener closes what it opens; the header page it asked
 * for is read once either way: the issuer's pread waits for that read, in the
 * page cache, rather than for the thread); an open that failed ahead left
 * nothing, so the issuer opens again and the submit reports what it finds then
 * (a block missing at the hint may have been stored since).  A block
 * renamed over by this handle's dump (fd_invalidate) drops its entry, or marks
 * an OPENING one stale so that its result is closed.  Another writer's rename
 * is the fd cache's case too: a descriptor of the replaced file still reads the
 * bytes it held, and block files are immutable per block id.
 *
 * Waiting.  The opener sleeps on work when no entry is WANTED (an idle handle
 * costs nothing); the issuer never sleeps on it, and takes mu only for table
 * work and the close of a descriptor nobody took.  The opener starts at
 * the first hint, so a handle that never hints has no thread (nor its header
 * buffer), and it is joined at close; a failure to start it is logged once
 * and the handle reads without hints from then on.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/posix_impl.h"

static bool same_id(const struct kvs_block_id *a, const struct kvs_block_id *b)
{
	return memcmp(a, b, sizeof(*a)) == 0;
}

/* The live entry of block id (not FREE, not stale), or NULL.  Under mu. */
static struct ahead_entry *find(struct ahead *a, const struct kvs_block_id *id)
{
	for (uint32_t i = 0; i < AHEAD_MAX; i++) {
		struct ahead_entry *e = &a->e[i];

		if (e->state != AHEAD_FREE && !e->stale && same_id(&e->id, id))
			return e;
	}
	return NULL;
}

/* Back to FREE, closing a READY entry's descriptor.  Under mu. */
static void entry_free(struct ahead_entry *e)
{
	if (e->fd >= 0)
		close(e->fd);
	e->fd = -1;
	e->state = AHEAD_FREE;
	e->stale = false;
}

/* An entry for a new hint: a FREE one, else the oldest skipped one (WANTED or
 * READY, hinted before the last one taken: freed), else NULL.  Under mu. */
static struct ahead_entry *entry_for_hint(struct ahead *a)
{
	struct ahead_entry *oldest = NULL;

	for (uint32_t i = 0; i < AHEAD_MAX; i++) {
		struct ahead_entry *e = &a->e[i];

		if (e->state == AHEAD_FREE)
			return e;
		if ((e->state == AHEAD_WANTED || e->state == AHEAD_READY) &&
		    e->seq < a->taken_seq && (!oldest || e->seq < oldest->seq))
			oldest = e;
	}
	if (oldest)
		entry_free(oldest);
	return oldest;
}

/* The oldest WANTED entry, or NULL.  Under mu. */
static struct ahead_entry *oldest_wanted(struct ahead *a)
{
	struct ahead_entry *oldest = NULL;

	for (uint32_t i = 0; i < AHEAD_MAX; i++) {
		struct ahead_entry *e = &a->e[i];

		if (e->state == AHEAD_WANTED && (!oldest || e->seq < oldest->seq))
			oldest = e;
	}
	return oldest;
}

/* The open of one entry ended: fd (or -errno) and its header's check, the
 * data offset (or -errno).  READY unless either failed or the entry went stale
 * meanwhile (the block renamed over, or opened by the issuer itself); else the
 * descriptor is closed.  Under mu. */
static void entry_opened(struct ahead_entry *e, int fd, int64_t data_off)
{
	if (fd >= 0 && data_off >= 0 && !e->stale) {
		e->fd = fd;
		e->data_off = (uint64_t)data_off;
		e->state = AHEAD_READY;
	} else {
		if (fd >= 0)
			close(fd);
		entry_free(e);
	}
}

/* Entry e is not to be used: freed, or, while the opener has it (OPENING),
 * marked stale so that the opener closes what it opens.  Under mu. */
static void entry_drop(struct ahead_entry *e)
{
	if (e->state == AHEAD_OPENING)
		e->stale = true;
	else
		entry_free(e);
}

/*
 * The opener: every WANTED entry, oldest first, taken as one batch (OPENING:
 * neither a hint nor a take frees it; only this thread does).  Each file is
 * opened and its header's read started before any header is waited for, so
 * the batch's header reads queue at the disk together rather than one behind
 * another: on a busy disk each waits for the reads queued before it, about 12
 * ms at 1 MiB qd 32 here (docs/io.md, "Open-ahead").  Then each header is read
 * and checked, and its entry published, in hint order.
 */
static void *opener(void *arg)
{
	struct posix *p = arg;
	struct ahead *a = &p->ahead;

	pthread_mutex_lock(&a->mu);
	for (;;) {
		struct ahead_entry *batch[AHEAD_MAX], *e;
		struct kvs_block_id ids[AHEAD_MAX];
		char paths[AHEAD_MAX][48];
		int fds[AHEAD_MAX];
		uint32_t n = 0;

		while (!a->stop && !oldest_wanted(a))
			pthread_cond_wait(&a->work, &a->mu);
		if (a->stop)
			break;
		while ((e = oldest_wanted(a))) {
			e->state = AHEAD_OPENING;
			ids[n] = e->id;
			batch[n++] = e;
		}
		pthread_mutex_unlock(&a->mu);

		for (uint32_t i = 0; i < n; i++) {
			rel_path(&ids[i], paths[i], sizeof(paths[i]));
			fds[i] = block_file_open(p, &ids[i], paths[i]);
			if (fds[i] >= 0)
				block_file_header_ahead(p, fds[i]);
		}
		for (uint32_t i = 0; i < n; i++) {
			int64_t off = fds[i] < 0 ? fds[i]
						 : block_file_header(p, &ids[i], paths[i], fds[i], a->buf);

			pthread_mutex_lock(&a->mu);
			entry_opened(batch[i], fds[i], off);
			pthread_mutex_unlock(&a->mu);
		}
		pthread_mutex_lock(&a->mu);
	}
	pthread_mutex_unlock(&a->mu);
	return NULL;
}

void ahead_init(struct posix *p)
{
	struct ahead *a = &p->ahead;

	pthread_mutex_init(&a->mu, NULL);
	pthread_cond_init(&a->work, NULL);
	for (uint32_t i = 0; i < AHEAD_MAX; i++)
		a->e[i].fd = -1;
}

void ahead_fini(struct posix *p)
{
	struct ahead *a = &p->ahead;

	if (a->started) {
		pthread_mutex_lock(&a->mu);
		a->stop = true;
		pthread_cond_signal(&a->work);
		pthread_mutex_unlock(&a->mu);
		pthread_join(a->thr, NULL);
		a->started = false;
	}
	for (uint32_t i = 0; i < AHEAD_MAX; i++)
		entry_free(&a->e[i]);
	free(a->buf);
	a->buf = NULL;
	pthread_cond_destroy(&a->work);
	pthread_mutex_destroy(&a->mu);
}

/* Start the opener (first hint).  Whether it runs. */
static bool opener_start(struct posix *p)
{
	struct ahead *a = &p->ahead;
	int rc;

	if (a->started || a->refused)
		return a->started;
	a->buf = hdr_buf_alloc(p);
	rc = a->buf ? pthread_create(&a->thr, NULL, opener, p) : ENOMEM;
	if (rc) {
		a->refused = true;
		kvs_log_warn(&p->log, "backend: open-ahead thread: %s; block files are opened "
				      "at their first read instead",
			     strerror(rc));
		return false;
	}
	pthread_setname_np(a->thr, "kvs-open");
	a->started = true;
	return true;
}

void posix_hint_read(void *state, const struct kvs_block_id *ids, size_t n)
{
	struct posix *p = state;
	struct ahead *a = &p->ahead;
	bool wanted = false;

	if (!opener_start(p))
		return;
	pthread_mutex_lock(&a->mu);
	for (size_t i = 0; i < n && i < AHEAD_MAX; i++) {
		struct ahead_entry *e;

		if (fd_cached(p, &ids[i]) || find(a, &ids[i]))
			continue;
		e = entry_for_hint(a);
		if (!e)
			break;
		e->id = ids[i];
		e->seq = ++a->seq;
		e->state = AHEAD_WANTED;
		wanted = true;
	}
	if (wanted)
		pthread_cond_signal(&a->work);
	pthread_mutex_unlock(&a->mu);
}

int ahead_take(struct posix *p, const struct kvs_block_id *id, uint64_t *data_off)
{
	struct ahead *a = &p->ahead;
	struct ahead_entry *e;
	int fd = -ENOENT;

	if (!a->started)
		return -ENOENT;
	pthread_mutex_lock(&a->mu);
	e = find(a, id);
	if (e && e->seq > a->taken_seq)
		a->taken_seq = e->seq;
	if (e && e->state == AHEAD_READY) {
		fd = e->fd;
		*data_off = e->data_off;
		e->fd = -1; /* the caller's now */
	}
	if (e)
		entry_drop(e);
	pthread_mutex_unlock(&a->mu);
	return fd;
}

void ahead_invalidate(struct posix *p, const struct kvs_block_id *id)
{
	struct ahead *a = &p->ahead;
	struct ahead_entry *e;

	if (!a->started)
		return;
	pthread_mutex_lock(&a->mu);
	if ((e = find(a, id)))
		entry_drop(e);
	pthread_mutex_unlock(&a->mu);
}
