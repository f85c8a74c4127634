"""kvshare -- the kvshare shared host-memory KV-cache tier from Python.

A ctypes binding of libkvshare.so.1 (no compiled extension: it works with the
kernel or the plain build of the library, chosen by KVSHARE_LIBRARY,
load_library(path) or LD_LIBRARY_PATH; docs/python.md).

    import kvshare
    with kvshare.Store({"unique_id": "demo", "device_id": 0, "shard_size": "64k",
                        "cache_buffer_capacity_gb": 0.01, "backend": "none",
                        "copy_engine": "host"}) as store:
        store.dump([1, 2], tensors).wait()      # tensors: 2 x 64 KiB, torch or numpy
        store.load([1, 2], tensors).wait()
"""

from ._lib import KvsError, error_name, load_library, strerror
from ._lib import lib as _lib
from .batch import BatchResult, BatchStore, key_id
from .store import ShardList, Store, Task, block_id, check_config, stable_id

__all__ = ["BatchResult", "BatchStore", "KvsError", "ShardList", "Store", "Task", "block_id",
           "check_config", "error_name", "key_id", "load_library", "stable_id", "strerror",
           "variant", "version"]


def version():
    """The loaded library's "MAJOR.MINOR.PATCH"."""
    return _lib().kvs_version().decode()


def variant():
    """"kernel" or "plain": which build of libkvshare.so.1 is loaded."""
    return _lib().kvs_variant().decode()
