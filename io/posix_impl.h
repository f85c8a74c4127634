/*
 * io/posix_impl.h — the posix backend's internal types and the calls between its
 * parts (private to io/posix*.c; nothing else includes it; io/posix.c says
 * which part holds what).  Everything here is one handle's process-local state,
 * on the heap: nothing is in shared memory (io/posix.c, "Single issuer": which
 * thread uses what).
 */
#ifndef KVS_IO_POSIX_IMPL_H
#define KVS_IO_POSIX_IMPL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "io/internal.h"

#define WARN_SLOTS 16

struct fd_entry {
	struct kvs_block_id id;
	uint64_t data_off; /* the file's header size: shard i at data_off + i * shard_bytes */
	int fd;          /* -1: empty */
	uint32_t refs;   /* transfers in flight on fd */
	bool ref_bit;    /* CLOCK: used since the hand last passed */
	bool stale;      /* block renamed over: drop when refs reach 0 */
};

/* A block being dumped. */
struct pending {
	struct kvs_block_id id;
	uint32_t root;
	int fd;             /* the temp file; -1 once its close is the engine's */
	int err;            /* first failed step: the dump is discarded */
	bool finishing;     /* every shard written: fsync, close, rename under way */
	uint32_t inflight;  /* this dump's requests in the engine */
	uint32_t written;   /* shards with their bit set */
	unsigned char *hdr_buf; /* its header (header_bytes, aligned for O_DIRECT) until
				   written; NULL after */
	char path[48];      /* the block's name under the root: aa/bb/<hex> */
	char tmp[96];       /* the temp file's: aa/bb/<hex>.tmp.<pid>.<host tag><rand> */
	struct pending *next;
	uint64_t bits[];    /* shards written */
};

/* A caller's transfer.  A write goes through steps on this one request, each
 * handed to the engine as the last completes (write_done): the block's header
 * first when the write starts its dump, then the shard; when the shard is the
 * block's last, fdatasync, close and rename after it. */
struct preq {
	struct kvs_io_req req;
	uint64_t token;
	uint64_t len;          /* the caller's length (a write's, kept across its steps) */
	char *buf;             /* a write's shard bytes and file offset, while its */
	uint64_t off;          /*   block's header is written first */
	struct fd_entry *fe;   /* reads */
	struct pending *pb;    /* writes */
	struct preq *next_free;
};

/* The open-ahead (io/posix_ahead.c): blocks hinted, opened on the opener
 * thread, taken by the issuer's fd_get.  Under struct ahead's mu. */
#define AHEAD_MAX 16

enum ahead_state {
	AHEAD_FREE,
	AHEAD_WANTED,  /* hinted; the opener has not started it */
	AHEAD_OPENING, /* the opener's, until it says READY or FREE */
	AHEAD_READY,   /* fd open, header checked: for the issuer to take */
};

struct ahead_entry {
	struct kvs_block_id id;
	uint64_t seq;      /* hint order: the opener takes the oldest WANTED first */
	uint64_t data_off; /* READY: as fd_entry's */
	int fd;            /* READY: the open file; else -1 */
	uint8_t state;     /* enum ahead_state */
	bool stale;        /* OPENING when the block was renamed over, or opened by the
			      issuer meanwhile: drop the result */
};

struct ahead {
	pthread_mutex_t mu;
	pthread_cond_t work;  /* the opener sleeps here: a WANTED entry, or stop */
	pthread_t thr;
	bool started;         /* thr runs (the first hint starts it); issuer only */
	bool refused;         /* it could not be started: hints are ignored; issuer only */
	bool stop;
	uint64_t seq;         /* of the last hint */
	uint64_t taken_seq;   /* the highest seq the issuer took: older entries were skipped */
	unsigned char *buf;   /* the opener's header buffer (as posix.hdr_buf) */
	struct ahead_entry e[AHEAD_MAX];
};

/* A block warned about (bad header, other geometry), and when. */
struct warned {
	struct kvs_block_id id;
	uint64_t at_ns; /* 0: free */
};

struct posix {
	struct kvs_log log;
	uint64_t shard_bytes;
	uint32_t spb;
	struct kvs_io_block_hdr hdr; /* the header of the files this handle writes (block
					set per dump); its geometry is this handle's */
	unsigned char *hdr_buf; /* hdr.header_bytes, aligned for O_DIRECT: the header of a
				   block file being opened for reading (issuer only) */
	uint32_t qd;
	uint32_t flags;
	uint32_t nroots;
	int root_fd[KVS_BACKEND_MAX_ROOTS];
	struct kvs_io_eng *eng;
	int fallback_err;
	uint32_t dio_mem;
	uint32_t dio_off;
	struct preq *reqs;
	struct preq *free_reqs;
	uint32_t active; /* preqs handed to the engine */
	struct fd_entry *fds;
	uint32_t nfds;
	uint32_t hand;
	struct pending *pending;
	uint64_t rand_state;
	char host_tag[9]; /* 8 hex of a hash of this host's name: our temp files */
	char *root_name[KVS_BACKEND_MAX_ROOTS]; /* as configured, for logs */
	pthread_mutex_t warn_mu; /* lookups warn from any thread */
	struct warned warned[WARN_SLOTS];
	uint32_t warn_next;
	struct ahead ahead;
};

/* ------------------------------------------------------------- io/posix.c */

/* A free request, zeroed; NULL when all queue_depth are in use. */
struct preq *preq_get(struct posix *p);
void preq_put(struct posix *p, struct preq *r);
void preq_fill(struct preq *r, const struct kvs_backend_io *io, uint32_t op, int fd,
	       int file_idx, uint64_t off);
/* Hand r to the engine (p->active counts it); 0 or the engine's -errno. */
int engine_submit(struct posix *p, struct preq *r);
unsigned char *hdr_buf_alloc(const struct posix *p);

/* ------------------------------------------------------- io/posix_roots.c */

uint32_t root_of(const struct posix *p, const struct kvs_block_id *id);
void rel_path(const struct kvs_block_id *id, char *path, size_t len);
void set_host_tag(struct posix *p);
unsigned clean_root(struct posix *p, int rootfd, const char *root);
uint64_t next_rand(struct posix *p);
int probe_root(struct posix *p, uint32_t i, const char *root);
int check_dio(const struct posix *p, const struct kvs_backend_io *io);

/* -------------------------------------------------------- io/posix_read.c */

/* Opening block id's file (path: its name under the root) for reading, in
 * steps (any thread): the open (a descriptor or -errno), the start of its
 * header's read into the page cache, and the read and check of its header
 * into buf (header_bytes, aligned): the file's data offset or -errno. */
int block_file_open(struct posix *p, const struct kvs_block_id *id, const char *path);
void block_file_header_ahead(const struct posix *p, int fd);
int64_t block_file_header(struct posix *p, const struct kvs_block_id *id, const char *path,
			  int fd, unsigned char *buf);
/* Whether block id's file is in the fd cache (issuer). */
bool fd_cached(const struct posix *p, const struct kvs_block_id *id);
void fd_put(struct posix *p, struct fd_entry *fe);
void fd_invalidate(struct posix *p, const struct kvs_block_id *id);
uint32_t fd_cache_size(uint32_t qd);
int posix_submit_read(void *state, const struct kvs_backend_io *io);
int posix_lookup(void *state, const struct kvs_block_id *id);

/* ------------------------------------------------------- io/posix_ahead.c */

/* The table empty, no thread yet (the first hint starts it).  Cannot fail. */
void ahead_init(struct posix *p);
/* Stop and join the opener, close what it opened; symmetric with ahead_init. */
void ahead_fini(struct posix *p);
void posix_hint_read(void *state, const struct kvs_block_id *ids, size_t n);
/* The descriptor opened ahead for block id, now the caller's (*data_off set),
 * or -ENOENT when none is ready (never hinted, not opened yet, or it failed:
 * the caller opens the file itself).  Never waits for the opener. */
int ahead_take(struct posix *p, const struct kvs_block_id *id, uint64_t *data_off);
/* Block id was renamed over: what was opened ahead of it is the old file. */
void ahead_invalidate(struct posix *p, const struct kvs_block_id *id);

/* ------------------------------------------------------- io/posix_write.c */

void pending_discard(struct posix *p, struct pending *pb);
int posix_submit_write(void *state, const struct kvs_backend_io *io);
bool write_done(struct posix *p, struct preq *r, int64_t *res);

#endif
