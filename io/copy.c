/*
 * io/copy.c — copy-engine dispatch and the host engine.
 *
 * The host engine treats "device" addresses as host pointers: a scatter is n
 * memcpy calls and is complete when it returns, so sync has nothing to wait for.
 * It is the engine of CPU-only runs and CI, and the reference the cuda engine's
 * tests compare against.  The cuda engine lives in copy_cuda.c and exists only
 * in a kernel-variant build with the CUDA toolkit (KVS_HAVE_CUDA).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "io/copy_impl.h"

static int host_reg(struct kvs_copy_engine *eng, void *base, uint64_t bytes)
{
	(void)eng, (void)base, (void)bytes;
	return 0;
}

static int host_unreg(struct kvs_copy_engine *eng, void *base)
{
	(void)eng, (void)base;
	return 0;
}

static int host_h2d(struct kvs_copy_engine *eng, const void *src, const uint64_t dst[],
		    const uint64_t bytes[], uint32_t n)
{
	const unsigned char *p = src;

	(void)eng;
	for (uint32_t i = 0; i < n; i++) {
		memcpy((void *)(uintptr_t)dst[i], p, bytes[i]);
		p += bytes[i];
	}
	return 0;
}

static int host_d2h(struct kvs_copy_engine *eng, void *dst, const uint64_t src[],
		    const uint64_t bytes[], uint32_t n)
{
	unsigned char *p = dst;

	(void)eng;
	for (uint32_t i = 0; i < n; i++) {
		memcpy(p, (const void *)(uintptr_t)src[i], bytes[i]);
		p += bytes[i];
	}
	return 0;
}

static int host_sync(struct kvs_copy_engine *eng, uint64_t deadline_ns)
{
	(void)eng, (void)deadline_ns;
	return 0;
}

static void host_fini(struct kvs_copy_engine *eng)
{
	(void)eng;
}

static const struct kvs_copy_ops host_ops = {
	.name = "host",
	.reg = host_reg,
	.unreg = host_unreg,
	.h2d = host_h2d,
	.d2h = host_d2h,
	.sync = host_sync,
	.fini = host_fini,
};

int kvs_copy_open(const struct kvs_copy_opts *opts, struct kvs_copy_engine **out)
{
	struct kvs_copy_engine *eng;
	int rc = 0;

	*out = NULL;
	if (!opts || (opts->kind != KVS_COPY_HOST && opts->kind != KVS_COPY_CUDA))
		return -EINVAL;
	eng = calloc(1, sizeof(*eng));
	if (!eng)
		return -ENOMEM;
	if (opts->log)
		eng->log = *opts->log;
	eng->device_id = opts->device_id;
	if (opts->kind == KVS_COPY_HOST) {
		eng->ops = &host_ops;
	} else {
#if defined(KVS_HAVE_CUDA)
		rc = kvs_copy_cuda_init(eng);
#else
		kvs_log_error(&eng->log, "copy_engine=cuda: this %s build has no CUDA copy engine",
			      KVS_KERNEL ? "kernel" : "plain");
		rc = -EOPNOTSUPP;
#endif
	}
	if (rc < 0) {
		free(eng);
		return rc;
	}
	*out = eng;
	return 0;
}

void kvs_copy_close(struct kvs_copy_engine *eng)
{
	if (!eng)
		return;
	eng->ops->fini(eng);
	free(eng);
}

const char *kvs_copy_name(const struct kvs_copy_engine *eng)
{
	return eng->ops->name;
}

int kvs_copy_register(struct kvs_copy_engine *eng, void *base, uint64_t bytes)
{
	return eng->ops->reg(eng, base, bytes);
}

int kvs_copy_unregister(struct kvs_copy_engine *eng, void *base)
{
	return eng->ops->unreg(eng, base);
}

int kvs_copy_h2d_scatter(struct kvs_copy_engine *eng, const void *src, const uint64_t dst[],
			 const uint64_t bytes[], uint32_t n)
{
	return eng->ops->h2d(eng, src, dst, bytes, n);
}

int kvs_copy_d2h_gather(struct kvs_copy_engine *eng, void *dst, const uint64_t src[],
			const uint64_t bytes[], uint32_t n)
{
	return eng->ops->d2h(eng, dst, src, bytes, n);
}

int kvs_copy_sync(struct kvs_copy_engine *eng, uint64_t deadline_ns)
{
	return eng->ops->sync(eng, deadline_ns);
}

int kvs_copy_pci_bus_id(int32_t device_id, char *buf, uint32_t len)
{
#if defined(KVS_HAVE_CUDA)
	return kvs_copy_cuda_pci_bus_id(device_id, buf, len);
#else
	(void)device_id, (void)buf, (void)len;
	return -EOPNOTSUPP;
#endif
}
