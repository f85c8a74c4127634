/*
 * tools/bench_backend.c — the store side of `kvshare bench`: the counting
 * backend every rank's store gets, and the fill that writes the working set.
 *
 * The backend is measured where it is: every rank's store gets a user backend
 * (KVS_BACKEND_USER) wrapping the real one, which counts each accepted read and
 * its bytes in the shared block (atomics, across processes) and bounds the
 * reads in flight per rank (--qd; -EAGAIN beyond, as a real store's client
 * does).  By default the wrapped backend is the posix store with every read held
 * --latency-us longer (the library's fault backend, fault_delay_ns): a store
 * reached over a network at a bounded rate per client.  Reads of a freshly
 * written posix store come from the page cache, and on a small machine a run
 * over them is bound by memcpy, not by the store, which would compare CPUs
 * rather than the tier; --latency-us 0 gives the raw store (--drop-cache makes
 * its reads cold).  --backend latency swaps in the synthetic latency backend;
 * --backend redis a Redis server (--redis-endpoint), a real remote store, so
 * nothing is added to its reads unless --latency-us says so.
 *
 * The fill runs in a child ("rank 0": the parent never opens a store) and dumps
 * every block through the store API: into the posix store's directory, or into
 * Redis under keys of this invocation (redis_prefix) that expire after an hour
 * unless --keep; --drop-cache and the posix store's removal walk its directory.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "tools/bench.h"
#include "tools/count_backend.h"

/* ------------------------------------------------------------------------ */
/* The store: posix or redis                                                 */

#define B_REDIS_TTL_MS (3600ull * 1000) /* the fill's keys expire (unless --keep) */

/* The backend the fill dumps into and the ranks' reads reach (under the fault
 * or counting wrappers): the posix store or redis; qd: transfers in flight. */
static void store_backend(const struct b_params *p, uint32_t qd, struct kvs_backend_config *c)
{
	kvs_backend_config_init(c);
	c->queue_depth = qd;
	c->shard_bytes = p->shard_bytes;
	c->shards_per_block = p->shards;
	if (p->backend == BACKEND_REDIS) {
		c->kind = KVS_BACKEND_REDIS;
		snprintf(c->redis.endpoints, sizeof(c->redis.endpoints), "%s", p->redis_endpoints);
		snprintf(c->redis.key_prefix, sizeof(c->redis.key_prefix), "%s", p->redis_prefix);
		c->redis.ttl_ms = p->redis_ttl_ms;
		c->redis.cluster = p->redis_cluster;
		return;
	}
	c->kind = KVS_BACKEND_POSIX;
	c->flags = KVS_BACKEND_F_NO_FSYNC; /* the bench measures reads, not durability */
	c->nroots = 1;
	c->roots[0] = p->root;
}

void b_redis_setup(struct b_params *p, const char *endpoints, bool cluster, const char *uid,
		   bool keep)
{
	snprintf(p->redis_endpoints, sizeof(p->redis_endpoints), "%s", endpoints);
	p->redis_cluster = cluster;
	snprintf(p->redis_prefix, sizeof(p->redis_prefix), "kvshare-bench:%.48s:", uid);
	p->redis_ttl_ms = keep ? 0 : B_REDIS_TTL_MS;
}

/*
 * Can the fill reach the redis store?  kvs_backend_open fails for a server
 * that does not answer (its ERROR line names the endpoint); a lookup, one
 * round trip, then proves it serves commands.  0, or -errno with err set to
 * one line naming the endpoint and the fix (-EINVAL: the endpoint's syntax).
 */
static int redis_reach(const struct b_params *p, char *err)
{
	struct kvs_backend_config c;
	struct kvs_backend *be = NULL;
	struct b_rank scratch;
	struct kvs_block_id probe = { { 0 } };
	int rc;

	memset(&scratch, 0, sizeof(scratch));
	store_backend(p, 1, &c);
	c.log = b_log_cb;
	c.log_arg = &scratch;
	rc = kvs_backend_open(&c, &be);
	if (rc == 0) {
		rc = kvs_backend_lookup(be, &probe);
		kvs_backend_close(be);
		if (rc >= 0)
			return 0;
		b_seterr(err, "--redis-endpoint '%s': cannot reach the server: %s (start redis-server "
			      "there, or pass the endpoint it listens on)", p->redis_endpoints,
			 kvs_strerror(rc));
		return rc;
	}
	b_seterr(err, "--redis-endpoint '%s': %s%s%s", p->redis_endpoints,
		 scratch.liberr[0] ? "" : kvs_strerror(rc), scratch.liberr,
		 rc == -EINVAL ? " (e.g. 127.0.0.1:6379 or /run/redis/redis.sock)" : "");
	return rc;
}

/* ------------------------------------------------------------------------ */
/* The counting backend (tools/count_backend.h) over the store, fault(the     */
/* store) or latency                                                         */

/* What open_inner is given: the run's parameters and its report. */
struct b_barg {
	struct b_shm *sh;
	struct b_run *run;
};

/* The counting backend's wrapped one for the store's geometry cfg: the store
 * (posix or redis), under the fault backend's delay when --latency-us, or the
 * latency backend; the io engine it got is recorded for the report. */
static int open_inner(const struct kvs_backend_config *cfg, void *arg, struct kvs_backend **inner)
{
	const struct b_barg *a = arg;
	const struct b_params *p = &a->sh->p;
	struct kvs_backend_config in, px;
	struct kvs_backend_info info;
	int rc;

	kvs_backend_config_init(&in);
	store_backend(p, p->qd ? p->qd : 128, &px);
	px.shard_bytes = cfg->shard_bytes;
	px.shards_per_block = cfg->shards_per_block;
	px.log = cfg->log;
	px.log_arg = cfg->log_arg;
	if (p->backend == BACKEND_LATENCY) {
		in.kind = KVS_BACKEND_LATENCY;
		in.latency_ns = p->latency_ns;
		in.latency_queue_depth = p->qd;
	} else if (p->latency_ns) {
		in.kind = KVS_BACKEND_FAULT;
		in.fault_inner = &px;
		in.fault_delay_ns = p->latency_ns;
	} else {
		in = px;
	}
	in.shard_bytes = cfg->shard_bytes;
	in.shards_per_block = cfg->shards_per_block;
	in.log = cfg->log;
	in.log_arg = cfg->log_arg;
	rc = kvs_backend_open(&in, inner);
	if (rc < 0)
		return rc;
	if (kvs_backend_info(*inner, &info) == 0) {
		/* relaxed: a description, the same from every rank */
		atomic_store_explicit(&a->run->io_engine, info.io_engine, memory_order_relaxed);
		if (info.flags & KVS_BACKEND_INFO_FALLBACK) {
			atomic_store_explicit(&a->run->io_fallback, 1, memory_order_relaxed);
			atomic_store_explicit(&a->run->io_fallback_err, info.fallback_err,
					      memory_order_relaxed);
		}
	}
	return 0;
}

/* Process-local; set before the ranks fork (b_backend_set). */
static struct b_barg backend_arg;
static struct kvs_count_arg count_arg;

void b_backend_set(struct b_shm *sh, struct b_run *run)
{
	backend_arg = (struct b_barg){ .sh = sh, .run = run };
	count_arg = (struct kvs_count_arg){ .count = &run->count, .qd = sh->p.qd,
					    .open_inner = open_inner, .arg = &backend_arg };
}

void b_backend_wire(struct kvs_backend_config *c)
{
	c->kind = KVS_BACKEND_USER;
	c->user_ops = &kvs_count_ops;
	c->user_arg = &count_arg;
}

/* The fill: one process ("rank 0") dumps every block of the working set into
 * the store (posix or redis) through the store API.  Returns 0 or a failure
 * (in err). */
static int fill_child(struct b_shm *sh, char *err)
{
	const struct b_params *p = &sh->p;
	const struct kvs_block_id *ids = sh_ids(sh);
	uint32_t per = p->task_max_blocks, nsh = per * p->shards;
	size_t tbytes = (size_t)nsh * p->shard_bytes;
	struct kvs_store_tensor *tens = calloc(nsh, sizeof(*tens));
	struct kvs_store_shard *shd = calloc(nsh, sizeof(*shd));
	struct kvs_store_config cfg;
	struct kvs_store *st = NULL;
	struct b_rank scratch;
	struct b_dev d;
	int rc;

	memset(&d, 0, sizeof(d));
	memset(&scratch, 0, sizeof(scratch));
	if (!tens || !shd) {
		rc = -ENOMEM;
		b_seterr(err, "out of memory");
		goto out;
	}
	kvs_store_config_init(&cfg);
	snprintf(cfg.cache.unique_id, sizeof(cfg.cache.unique_id), "%s", sh->run[0].uid);
	memcpy(cfg.cache.unique_id + strlen(cfg.cache.unique_id) - 1, "f", 1);
	cfg.cache.device_id = 0;
	cfg.cache.local_rank_size = 1;
	cfg.cache.slot_bytes = p->shard_bytes;
	cfg.cache.slot_count = 2 * (uint64_t)nsh + 64; /* a stream: dumps need no residency */
	cfg.cache.shards_per_block = p->shards;
	cfg.copy_engine = p->engine == ENGINE_CUDA ? KVS_COPY_ENGINE_CUDA : KVS_COPY_ENGINE_HOST;
	cfg.timeout_ns = B_TASK_TIMEOUT_NS;
	store_backend(p, cfg.backend.queue_depth, &cfg.backend);
	cfg.log = b_log_cb;
	cfg.log_arg = &scratch;
	if (p->backend == BACKEND_REDIS) {
		rc = redis_reach(p, err);
		if (rc < 0)
			goto out;
	}
	rc = kvs_store_open(&cfg, &st);
	if (rc < 0) {
		b_seterr(err, "fill: kvs_store_open: %s%s%s%s", kvs_strerror(rc),
		       scratch.liberr[0] ? " (" : "", scratch.liberr, scratch.liberr[0] ? ")" : "");
		goto out;
	}
	if (p->engine == ENGINE_CUDA) {
		rc = b_cuda_load(err, B_ERR);
		if (rc == 0)
			rc = b_dev_alloc(&d, true, 0, tbytes, 0, err);
		if (rc < 0)
			goto out;
	}
	for (uint32_t b0 = 0; b0 < p->nblocks; b0 += per) {
		uint32_t nb = p->nblocks - b0 < per ? p->nblocks - b0 : per, n = 0;
		uint64_t id;

		for (uint32_t b = 0; b < nb; b++)
			for (uint32_t s = 0; s < p->shards; s++, n++) {
				const unsigned char *src = sh_ref(sh, b0 + b, s);

				if (d.cuda) {
					rc = b_dev_write(&d, (size_t)n * p->shard_bytes, src, p->shard_bytes, err);
					if (rc < 0)
						goto out;
				}
				tens[n] = (struct kvs_store_tensor){
					.addr = d.cuda ? b_dev_addr(&d, (size_t)n * p->shard_bytes)
						       : (uint64_t)(uintptr_t)src };
				shd[n] = (struct kvs_store_shard){ .block = ids[b0 + b], .shard = s,
								   .tensor_count = 1, .tensors = &tens[n] };
			}
		rc = kvs_store_dump(st, shd, n, NULL, &id);
		if (rc == 0) {
			rc = kvs_store_wait(st, id, B_TASK_TIMEOUT_NS + 10 * KVS_NSEC_PER_SEC);
			if (rc == 1)
				rc = -ETIMEDOUT;
		}
		if (rc < 0) {
			b_seterr(err, "fill: dumping blocks %u..%u: %s%s%s%s", b0, b0 + nb - 1,
			       kvs_strerror(rc), scratch.liberr[0] ? " (" : "", scratch.liberr,
			       scratch.liberr[0] ? ")" : "");
			goto out;
		}
	}
out:
	kvs_store_close(st);
	b_dev_free(&d);
	free(tens);
	free(shd);
	return rc < 0 ? rc : 0;
}

/* The fill, in a child; *secs its wall time.  0; -EINVAL (the redis endpoint
 * cannot be used as written); another failure: -EIO or -errno, with err set. */
int b_run_fill(struct b_shm *sh, char *err, double *secs)
{
	char *e = mmap(NULL, B_ERR, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t pid, me = getpid();
	int status = 0, rc = 0;
	uint64_t t0 = kvs_now_ns();

	if (e == MAP_FAILED)
		return -errno;
	e[0] = '\0';
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		b_child_setup(me);
		int frc = fill_child(sh, e);

		_exit(frc == -EINVAL && sh->p.backend == BACKEND_REDIS ? 2 : frc < 0);
	}
	if (pid < 0) {
		rc = -errno;
		b_seterr(err, "fork: %s", strerror(errno));
	} else if (b_reap(&pid, &status, 1, kvs_now_ns() + B_RUN_TIMEOUT_NS, NULL, NULL)) {
		/* 2: the redis endpoint cannot be used as written (a usage error) */
		rc = status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 2 ? -EINVAL : -EIO;
		if (e[0])
			b_seterr(err, "%s", e);
		else if (status == -1)
			b_seterr(err, "fill: %s", b_interrupted ? "interrupted" : "killed at the deadline");
		else
			b_seterr(err, "fill: the dumping process failed (status %d)", status);
	}
	*secs = (double)(kvs_now_ns() - t0) / 1e9;
	munmap(e, B_ERR);
	/* The fill's cache is gone with its process unless it died. */
	struct kvs_cache_config cc;
	kvs_cache_config_init(&cc);
	snprintf(cc.unique_id, sizeof(cc.unique_id), "%s", sh->run[0].uid);
	memcpy(cc.unique_id + strlen(cc.unique_id) - 1, "f", 1);
	(void)kvs_cache_remove(&cc);
	return rc;
}

/* --drop-cache: write back and drop the store's pages, so reads are cold. */
static int drop_one(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
	(void)sb, (void)ftw;
	if (type == FTW_F) {
		int fd = open(path, O_RDONLY | O_CLOEXEC);

		if (fd >= 0) {
			fdatasync(fd);
			posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
			close(fd);
		}
	}
	return 0;
}

static int rm_one(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
	(void)sb, (void)ftw;
	if (type == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

void b_store_drop_cache(const char *root)
{
	nftw(root, drop_one, 16, FTW_PHYS);
}

void b_store_remove(const char *root)
{
	nftw(root, rm_one, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}
