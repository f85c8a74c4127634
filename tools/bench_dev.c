/*
 * tools/bench_dev.c — where `kvshare bench` ranks load to: host memory, or
 * device memory through a dlopen'ed libcudart when the copy engine is CUDA; and
 * the probe (in a child) that resolves --copy-engine auto.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/clock.h"
#include "tools/bench.h"

/* ------------------------------------------------------------------------ */
/* Device buffers: host memory, or CUDA memory through a dlopen'ed libcudart  */

/*
 * With the CUDA copy engine the store copies into device memory, so the ranks'
 * tensors (and the fill's dump sources) must be cudaMalloc'ed.  The library's
 * CUDA runtime is linked into it statically and not exported; the bench loads
 * the shared runtime (a different runtime instance over the same driver and the
 * same primary context, so the pointers are valid for both) only in the
 * processes that use it, never in the parent (CUDA does not survive fork).
 */
struct b_cuda {
	void *h;
	int (*get_count)(int *);
	int (*set_device)(int);
	int (*malloc_)(void **, size_t);
	int (*free_)(void *);
	int (*memcpy_)(void *, const void *, size_t, int);
	int (*memset_)(void *, int, size_t);
	const char *(*errstr)(int);
};
static struct b_cuda g_cuda;
#define B_CUDA_H2D 1
#define B_CUDA_D2H 2

int b_cuda_load(char *why, size_t n)
{
	static const char *const names[] = { "libcudart.so", "libcudart.so.13", "libcudart.so.12",
					     "libcudart.so.11.0", "/usr/local/cuda/lib64/libcudart.so" };

	if (g_cuda.h)
		return 0;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !g_cuda.h; i++)
		g_cuda.h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	if (!g_cuda.h) {
		snprintf(why, n, "no libcudart.so to allocate the ranks' device buffers");
		return -ENOENT;
	}
	g_cuda.get_count = (int (*)(int *))dlsym(g_cuda.h, "cudaGetDeviceCount");
	g_cuda.set_device = (int (*)(int))dlsym(g_cuda.h, "cudaSetDevice");
	g_cuda.malloc_ = (int (*)(void **, size_t))dlsym(g_cuda.h, "cudaMalloc");
	g_cuda.free_ = (int (*)(void *))dlsym(g_cuda.h, "cudaFree");
	g_cuda.memcpy_ = (int (*)(void *, const void *, size_t, int))dlsym(g_cuda.h, "cudaMemcpy");
	g_cuda.memset_ = (int (*)(void *, int, size_t))dlsym(g_cuda.h, "cudaMemset");
	g_cuda.errstr = (const char *(*)(int))dlsym(g_cuda.h, "cudaGetErrorString");
	if (!g_cuda.get_count || !g_cuda.set_device || !g_cuda.malloc_ || !g_cuda.free_ ||
	    !g_cuda.memcpy_ || !g_cuda.memset_ || !g_cuda.errstr) {
		snprintf(why, n, "libcudart.so lacks the runtime calls the bench needs");
		dlclose(g_cuda.h);
		g_cuda.h = NULL;
		return -ENOENT;
	}
	return 0;
}

int b_dev_alloc(struct b_dev *d, bool cuda, int device, size_t bytes, size_t stage,
		     char *err)
{
	memset(d, 0, sizeof(*d));
	d->cuda = cuda;
	d->bytes = bytes;
	if (!cuda) {
		d->host = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
		if (!d->host) {
			b_seterr(err, "allocating %zu bytes of rank memory: out of memory", bytes);
			return -ENOMEM;
		}
		memset(d->host, B_POISON, bytes);
		return 0;
	}
	int e = g_cuda.set_device(device);
	if (e == 0)
		e = g_cuda.malloc_(&d->dptr, bytes);
	if (e != 0) {
		b_seterr(err, "cudaMalloc(%zu) on device %d: %s", bytes, device, g_cuda.errstr(e));
		d->dptr = NULL;
		return -ENOMEM;
	}
	d->stage = malloc(stage);
	if (!d->stage) {
		b_seterr(err, "allocating a staging buffer: out of memory");
		return -ENOMEM;
	}
	return 0;
}

void b_dev_free(struct b_dev *d)
{
	if (d->cuda && d->dptr)
		g_cuda.free_(d->dptr);
	free(d->host);
	free(d->stage);
	memset(d, 0, sizeof(*d));
}

uint64_t b_dev_addr(const struct b_dev *d, size_t off)
{
	return d->cuda ? (uint64_t)(uintptr_t)d->dptr + off : (uint64_t)(uintptr_t)(d->host + off);
}

/* Poison [off, off + len) (host: both ends of each shard; cuda: all of it). */
int b_dev_poison(struct b_dev *d, size_t off, size_t len, size_t shard, char *err)
{
	if (d->cuda) {
		int e = g_cuda.memset_((char *)d->dptr + off, B_POISON, len);

		if (e) {
			b_seterr(err, "cudaMemset: %s", g_cuda.errstr(e));
			return -EIO;
		}
		return 0;
	}
	size_t edge = shard < 2 * B_EDGE ? shard : B_EDGE;
	for (size_t o = off; o < off + len; o += shard) {
		memset(d->host + o, B_POISON, edge);
		memset(d->host + o + shard - edge, B_POISON, edge);
	}
	return 0;
}

/* The bytes at [off, off + len) as host memory (len <= the staging size). */
const unsigned char *b_dev_read(struct b_dev *d, size_t off, size_t len, char *err)
{
	if (!d->cuda)
		return d->host + off;
	int e = g_cuda.memcpy_(d->stage, (char *)d->dptr + off, len, B_CUDA_D2H);
	if (e) {
		b_seterr(err, "cudaMemcpy(device to host): %s", g_cuda.errstr(e));
		return NULL;
	}
	return d->stage;
}

int b_dev_write(struct b_dev *d, size_t off, const void *src, size_t len, char *err)
{
	if (!d->cuda) {
		memcpy(d->host + off, src, len);
		return 0;
	}
	int e = g_cuda.memcpy_((char *)d->dptr + off, src, len, B_CUDA_H2D);
	if (e) {
		b_seterr(err, "cudaMemcpy(host to device): %s", g_cuda.errstr(e));
		return -EIO;
	}
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Copy engine probe and fill (children: the parent never opens a store)     */

struct b_probe {
	int32_t store_rc;   /* kvs_store_open with copy_engine cuda */
	int32_t devices;    /* cudaGetDeviceCount, -1 unknown */
	char why[B_ERR];
};

static void probe_child(struct b_shm *sh, struct b_probe *pr)
{
	struct kvs_store_config cfg;
	struct kvs_store *st = NULL;
	int n = 0;

	kvs_store_config_init(&cfg);
	snprintf(cfg.cache.unique_id, sizeof(cfg.cache.unique_id), "%s", sh->run[0].uid);
	memcpy(cfg.cache.unique_id + strlen(cfg.cache.unique_id) - 1, "q", 1);
	cfg.cache.device_id = 0;
	cfg.cache.local_rank_size = 1;
	cfg.cache.slot_bytes = 4096;
	cfg.cache.slot_count = 8;
	cfg.cache.hugetlb = KVS_HUGETLB_OFF;
	cfg.backend.kind = KVS_BACKEND_NONE;
	cfg.copy_engine = KVS_COPY_ENGINE_CUDA;
	pr->store_rc = kvs_store_open(&cfg, &st);
	kvs_store_close(st);
	pr->devices = -1;
	if (pr->store_rc < 0 || b_cuda_load(pr->why, sizeof(pr->why)) < 0)
		return;
	if (g_cuda.get_count(&n) == 0)
		pr->devices = n;
}

/* Resolve --copy-engine: cuda when the library has it, a device exists for each
 * rank, and the runtime is there for the bench's own buffers; else host. */
int b_probe_engine(struct b_shm *sh, uint32_t want, char *note, size_t nn)
{
	struct b_probe *pr;
	pid_t pid, me = getpid();
	int status = 0;

	if (want == ENGINE_HOST) {
		sh->p.engine = ENGINE_HOST;
		snprintf(note, nn, "host (--copy-engine host)");
		return 0;
	}
	pr = mmap(NULL, sizeof(*pr), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (pr == MAP_FAILED)
		return -errno;
	memset(pr, 0, sizeof(*pr));
	pr->store_rc = -ENODEV;
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		b_child_setup(me);
		probe_child(sh, pr);
		_exit(0);
	}
	if (pid > 0)
		(void)b_reap(&pid, &status, 1, kvs_now_ns() + 60 * KVS_NSEC_PER_SEC, NULL, NULL);
	sh->p.engine = ENGINE_HOST;
	if (pr->store_rc < 0)
		snprintf(note, nn, "host (no CUDA device: kvs_store_open with copy_engine=cuda: %s)",
			 kvs_strerror(pr->store_rc));
	else if (pr->devices < 0)
		snprintf(note, nn, "host (%.200s)", pr->why[0] ? pr->why : "cudaGetDeviceCount failed");
	else if ((uint32_t)pr->devices < sh->p.ranks)
		snprintf(note, nn, "host (%d CUDA device(s) for %u ranks: one each is needed)",
			 pr->devices, sh->p.ranks);
	else {
		sh->p.engine = ENGINE_CUDA;
		snprintf(note, nn, "cuda (%d devices)", pr->devices);
	}
	munmap(pr, sizeof(*pr));
	if (want == ENGINE_CUDA && sh->p.engine != ENGINE_CUDA)
		return -ENODEV;
	return 0;
}
