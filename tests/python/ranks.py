"""Rank processes of test_mp.py and test_lifetime.py, started with multiprocessing's spawn method (a
fresh interpreter each: the cache is mapped at another address in each).  Only
numpy and kvshare are imported here, to keep the children's start-up short.

Every entry point takes (rank, config, ..., queue) and puts exactly one
(rank, outcome, value) tuple on the queue: ("ok", ...) or ("error", code, name)
for a KvsError, ("exc", text) for anything else.
"""
import os
import threading
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


def close_under_calls(rank, cfg, rounds, nthreads, queue):
    """Round after round: open a store, let nthreads threads call it in a loop
    -- lookups, stats and cache stats, a load of its own checked until done
    and then another; the last thread waits for its loads with no timeout
    instead, so that close finds it asleep in kvs_store_wait -- and close it
    from this thread while they run.  Every thread must end on the ValueError
    of a closed store, having seen no other error: the report is ("ok",
    (rounds, calls)) or ("exc", the first other outcome).  A call reaching the
    freed store crashes the process instead (or ASan reports it)."""
    def hammer(s, me, started, calls, bad):
        dst = np.zeros(s.block_bytes, np.uint8)
        waiter = me == nthreads - 1
        try:
            task = s.load([me], [dst])
            started.wait(60)
            while True:
                s.lookup([me, 1000 + me])
                s.lookup_prefix([me])
                s.stats()
                s.cache_stats()
                if waiter:
                    if not task.wait():
                        raise AssertionError("wait() with no timeout returned False")
                    task = s.load([me], [dst])
                elif s.check(task):
                    task = s.load([me], [dst])
                calls[me] += 1
        except ValueError as e:
            if "closed" not in str(e):
                bad.append(f"thread {me}: {e!r}")
        except BaseException as e:  # noqa: BLE001 - the report names it
            bad.append(f"thread {me}: {e!r}")

    def run():
        calls = [0] * nthreads
        for r in range(rounds):
            s = kvshare.Store(dict(cfg, unique_id=f"{cfg['unique_id']}.{r}"))
            started = threading.Barrier(nthreads + 1)
            bad = []
            threads = [threading.Thread(target=hammer, args=(s, me, started, calls, bad))
                       for me in range(nthreads)]
            for t in threads:
                t.start()
            started.wait(60)  # every thread holds a task and is about to call
            s.close()
            for t in threads:
                t.join(60)
                if t.is_alive():
                    raise AssertionError(f"round {r}: a thread still runs 60 s after close")
            if bad:
                raise AssertionError(f"round {r}: " + "; ".join(bad))
            try:
                s.lookup([1])
            except ValueError as e:
                if "closed" not in str(e):
                    raise
            else:
                raise AssertionError("a lookup after close returned")
        return rounds, sum(calls)
    _report(queue, rank, run)
