/*
 * core/version.c — identity of the loaded library.
 *
 * The one source file of libkvshare.so.1 itself (everything else comes from the
 * module archives): it says which version and which variant was loaded, so an
 * operator can tell after an LD_LIBRARY_PATH swap which build a rank is running.
 */
#include "kvshare.h"

#define KVS_STR2(x) #x
#define KVS_STR(x) KVS_STR2(x)

KVS_API const char *kvs_version(void)
{
	return KVS_STR(KVS_VERSION_MAJOR) "." KVS_STR(KVS_VERSION_MINOR) "." KVS_STR(KVS_VERSION_PATCH);
}

KVS_API const char *kvs_variant(void)
{
	return KVS_KERNEL ? "kernel" : "plain";
}
