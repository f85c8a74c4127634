"""Rank processes of test_mp.py, started with multiprocessing's spawn method (a
fresh interpreter each: the cache is mapped at another address in each).  Only
numpy and kvshare are imported here, to keep the children's start-up short.

Every entry point takes (rank, config, ..., queue) and puts exactly one
(rank, outcome, value) tuple on the queue: ("ok", ...) or ("error", code, name)
for a KvsError, ("exc", text) for anything else.
"""
import os
import time
import traceback

import numpy as np

import kvshare


def content(seed, nblocks, block_bytes):
    """The bytes test_mp.py stores: block i is row i."""
    return np.random.default_rng(seed).integers(0, 256, (nblocks, block_bytes), dtype=np.uint8)


def _report(queue, rank, fn):
    try:
        queue.put((rank, "ok", fn()))
    except kvshare.KvsError as e:
        queue.put((rank, "error", e.code, e.name, str(e)))
    except BaseException:  # noqa: BLE001 - reported to the parent, which fails
        queue.put((rank, "exc", traceback.format_exc()))


def load_all(rank, cfg, seed, nblocks, barrier, queue):
    """Load every block (whole blocks, one task), compare the bytes, wait for the
    other ranks, report (bytes equal, node owner_reads, node shards_loaded)."""
    def run():
        with kvshare.Store(dict(cfg, device_id=rank)) as s:
            want = content(seed, nblocks, s.block_bytes)
            got = np.zeros_like(want)
            s.load(range(1, nblocks + 1), list(got)).wait()
            barrier.wait(60)  # every rank has loaded: the node counters are final
            node = s.stats(node=True)
            equal = bool((got == want).all())
            barrier.wait(60)
            return equal, node["owner_reads"], node["shards_loaded"]
    _report(queue, rank, run)


def load_expect_error(rank, cfg, nblocks, queue):
    """Load from a failing backend: the KvsError is the report."""
    def run():
        with kvshare.Store(dict(cfg, device_id=rank)) as s:
            got = np.zeros((nblocks, s.block_bytes), np.uint8)
            s.load(range(1, nblocks + 1), list(got)).wait()
            return "loaded"
    _report(queue, rank, run)


def own_then_hang(rank, cfg, nblocks, queue):
    """Load from a slow backend and report once this rank owns every shard's
    read; then stay in the load until killed (SIGKILL by the parent)."""
    with kvshare.Store(dict(cfg, device_id=rank)) as s:
        n = nblocks * s.shards_per_block
        got = np.zeros((nblocks, s.block_bytes), np.uint8)
        task = s.load(range(1, nblocks + 1), list(got))
        deadline = time.monotonic() + 30
        # The dispatcher submits every owned read at once; wait (bounded) until
        # it has, so the kill lands while the reads are in flight.
        while s.stats()["owner_reads"] < n and time.monotonic() < deadline:
            time.sleep(0.001)
        queue.put((rank, "owning", s.stats()["owner_reads"], os.getpid()))
        task.wait()
        queue.put((rank, "ok", "not killed"))


def load_after_kill(rank, cfg, nblocks, go, queue):
    """Attach, report "ready", wait for go (the victim owns every shard by
    then), load the same blocks -- waiting on the victim's slots -- and report
    "submitted"; the parent kills the victim then.  Report the node's takeovers
    (dead fillers' slots taken over by a waiter) once the load is done."""
    def run():
        with kvshare.Store(dict(cfg, device_id=rank)) as s:
            got = np.zeros((nblocks, s.block_bytes), np.uint8)
            queue.put((rank, "ready"))
            go.wait(60)
            task = s.load(range(1, nblocks + 1), list(got))
            queue.put((rank, "submitted"))
            task.wait()
            return s.cache_stats(node=True)["takeovers"]
    _report(queue, rank, run)
