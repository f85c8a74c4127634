/*
 * common/error.c — kvs_strerror(): one text per return code.
 *
 * Negative errno values go through strerror_r's GNU form into a thread-local
 * buffer (the result must stay valid after the call, and glibc's strerror is not
 * thread-safe); kvshare's own codes have fixed texts that say what to do.
 */
#include <string.h>

#include "kvshare.h"

KVS_API const char *kvs_strerror(int err)
{
	static __thread char buf[128];

	switch (err) {
	case 0:
		return "success";
	case -KVS_ELAYOUT:
		return "segment made by a build with another shared-memory layout";
	case -KVS_ECONFIG:
		return "segment or stored block has another configuration";
	case -KVS_EOWNERDEAD:
		return "the rank filling the slot died";
	case -KVS_ENOHUGE:
		return "huge pages unavailable for the data segment (no hugetlbfs mount, one not writable, or the pool short: the log says which)";
	case -KVS_ECORRUPT:
		return "shared state is corrupt";
	case -KVS_EINCOMPLETE:
		return "the block's other shards were not dumped before the deadline";
	}
	if (err < 0 && err > -KVS_E_BASE)
		return strerror_r(-err, buf, sizeof(buf));
	return "unknown kvshare error code";
}
