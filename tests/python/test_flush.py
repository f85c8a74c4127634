"""Store.flush (kvs_store_flush): a rank's dump_wait=cached dumps complete once
their shards are in the shared cache; flush waits until their blocks are in
the backend, bounded by its timeout, and says how many are not.

The backend is posix under tmp_path behind the fault backend (fault_delay_us
holds every write's completion, io_queue_depth bounds how many are in
flight), so a cached dump returns well before its blocks are written: a flush
that did not wait would find the block files missing.  The files are looked
for where io/posix_roots.c names them: <root>/<hex[0:2]>/<hex[2:4]>/<hex> of the
16-byte id."""
import errno
import math
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import kvshare

SHARD = 4096
SPB = 4
NBLOCKS = 6


@pytest.fixture
def cached(base, uid, tmp_path):
    """cached(tag, **keys): a rank with dump_wait=cached over posix on tmp_path,
    every write held fault_delay_us (default 50 ms)."""
    def make(tag, **keys):
        cfg = base(unique_id=uid(tag), backend="posix", backend_roots=str(tmp_path), fsync=False,
                   block_size=SHARD * SPB, dump_wait="cached", fault_delay_us=50000)
        cfg.update(keys)
        return cfg
    return make


def ids(tag):
    return [(tag << 32) + i for i in range(NBLOCKS)]


def content(seed):
    return np.random.default_rng(seed).integers(0, 256, (NBLOCKS, SHARD * SPB), dtype=np.uint8)


def block_files(root, blocks):
    """The posix backend's file of each block (io/posix_roots.c, Naming)."""
    out = []
    for b in blocks:
        h = kvshare.block_id(b).hex()
        out.append(os.path.join(str(root), h[0:2], h[2:4], h))
    return out


def stored(root, blocks):
    return [os.path.exists(f) for f in block_files(root, blocks)]


def test_flush_waits_for_cached_dumps(cached, tmp_path):
    """flush() returns 0 once every block of the cached dumps is in the
    backend: each block file is there when it returns, and a fresh cache
    loads the bytes back from it."""
    blocks, src = ids(1), content(1)
    with kvshare.Store(cached("flush")) as s:
        assert s.dump(blocks, list(src)).wait() is True  # in the cache, DIRTY
        assert s.flush() == 0
        assert stored(tmp_path, blocks) == [True] * NBLOCKS
        assert s.flush(0) == 0  # nothing left: at once
    with kvshare.Store(cached("flush2", fault_delay_us=0)) as s:  # from the backend
        dst = np.zeros_like(src)
        assert s.load(blocks, list(dst)).wait() is True
        assert (dst == src).all()
        assert s.stats()["owner_reads"] == NBLOCKS * SPB


def test_flush_timeout_returns_pending(cached, tmp_path):
    """A slow backend (200 ms a write, 4 in flight: the 24 shard writes take
    over a second): flush with a tiny timeout returns at its timeout with the
    count still pending (> 0), the blocks still being written; a flush
    without a timeout then returns 0 with every block file there."""
    blocks = ids(2)
    with kvshare.Store(cached("flushslow", fault_delay_us=200000, io_queue_depth=4)) as s:
        assert s.dump(blocks, list(content(2))).wait() is True
        t0 = time.monotonic()
        left = s.flush(0.01)
        took = time.monotonic() - t0
        assert left > 0, "flush(0.01) said every block was written"
        assert took < 1.0, f"flush(0.01) took {took:.3f} s: not bounded by its timeout"
        assert not all(stored(tmp_path, blocks))
        assert s.flush(0) > 0  # asks without waiting
        assert s.flush(None) == 0
        assert stored(tmp_path, blocks) == [True] * NBLOCKS


def test_flush_reports_a_given_up_write_once(cached):
    """Every write fails (fault_error_ppm=1000000): retried for timeout_ms,
    then given up.  The cached dump returned 0, so flush raises the write's
    error (EIO) -- once: the next flush has nothing left and returns 0."""
    cfg = cached("flushfail", fault_delay_us=0, fault_error_ppm=1000000, timeout_ms=300)
    with kvshare.Store(cfg) as s:
        assert s.dump(ids(3)[:1], [content(3)[0]]).wait() is True
        with pytest.raises(kvshare.KvsError) as ei:
            s.flush(30)
        assert ei.value.code == -errno.EIO and ei.value.op == "kvs_store_flush", ei.value
        assert s.flush(30) == 0


def test_flush_without_cached_dumps(cached):
    """Nothing to wait for returns 0 at once: a rank that made no dump, one
    whose dumps are durable (in the backend when they return), a watcher."""
    with kvshare.Store(cached("flushnone", dump_wait="durable")) as s:
        assert s.flush(0) == 0
        assert s.dump(ids(4), list(content(4))).wait() is True
        assert s.flush(0) == 0
        with kvshare.Store(dict(cached("flushnone"), device_id=-1)) as w:
            assert w.flush(0) == 0 and w.flush() == 0


def test_flush_timeouts(cached):
    """flush's timeout is wait's: None and math.inf mean none, past UINT64_MAX
    ns is clamped; negative or NaN is a ValueError and a non-number a
    TypeError, raised before anything reaches C."""
    with kvshare.Store(cached("flushtmo", fault_delay_us=0)) as s:
        s.dump(ids(5), list(content(5))).wait()
        assert s.flush(math.inf) == 0 and s.flush(2**70) == 0 and s.flush(1e300) == 0
        for bad in (-1, -1e-9, -math.inf, math.nan):
            with pytest.raises(ValueError, match="timeout"):
                s.flush(bad)
        with pytest.raises(TypeError, match="timeout"):
            s.flush("1")


def test_flush_after_close_and_close_waits_for_it(cached, tmp_path):
    """A flush asleep in C keeps close() waiting (the store is not freed under
    it) and returns its result; once closed, flush raises the closed store's
    ValueError, as every other call does."""
    blocks = ids(6)
    s = kvshare.Store(cached("flushclose", fault_delay_us=200000, io_queue_depth=4))
    assert s.dump(blocks, list(content(6))).wait() is True
    got = []
    t = threading.Thread(target=lambda: got.append(s.flush()))
    t.start()
    deadline = time.monotonic() + 30
    while not s._hd.users and time.monotonic() < deadline:  # the flusher holds the store
        time.sleep(0.001)
    assert s._hd.users == 1
    s.close()  # returns once the flusher is out of C
    t.join(30)
    assert got == [0]
    assert stored(tmp_path, blocks) == [True] * NBLOCKS
    with pytest.raises(ValueError, match="closed"):
        s.flush()
    with pytest.raises(ValueError, match="closed"):
        s.flush(0)


def test_flush_needs_abi_1_1():
    """A libkvshare.so.1 that does not export kvs_store_flush@KVSHARE_1.1 (one
    built before it) still loads and serves every other call; flush raises
    KvsError(-EOPNOTSUPP) naming the symbol, its version and the library.  The
    child asks for a version no library has, so the lookup (dlvsym) misses as
    on such a library; a child, since a process loads one library for good."""
    code = textwrap.dedent("""
        import errno, importlib, os, sys
        import numpy as np
        lib = importlib.import_module("kvshare._lib")
        name = "kvs_store_flush"
        lib._VERSIONED[name] = ("KVSHARE_9.9",) + lib._VERSIONED[name][1:]
        import kvshare
        cfg = {"unique_id": sys.argv[1], "device_id": 0, "shard_size": 4096,
               "cache_buffer_capacity_gb": 0.002, "hugetlb": "off", "copy_engine": "host",
               "backend": "none", "dump_wait": "cached"}
        with kvshare.Store(cfg) as s:
            data = np.arange(4096, dtype=np.uint8)
            assert s.dump([1], [data]).wait() and s.lookup([1]) == [True]
            try:
                s.flush(1)
            except kvshare.KvsError as e:
                assert e.code == -errno.EOPNOTSUPP, e
                assert "kvs_store_flush@KVSHARE_9.9" in e.detail, e
                assert os.environ["KVSHARE_LIBRARY"] in e.detail, e
                print("refused:", e)
            else:
                raise AssertionError("flush ran without its symbol")
    """)
    uid = f"py.{kvshare.variant()}.flushabi.{os.getpid()}"
    r = subprocess.run([sys.executable, "-c", code, uid], capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "refused: kvs_store_flush: " in r.stdout, r.stdout
