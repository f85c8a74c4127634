"""Rank processes (multiprocessing, spawn) sharing one cache through the
binding: one backend read per shard for the node, a failing backend's error on
every rank, a SIGKILLed owner not hanging the others.  Children live in
ranks.py; each is joined with a deadline and killed if it overstays."""
import errno
import multiprocessing as mp
import os
import signal

import pytest
import torch

import kvshare
import ranks

NRANKS = 4
SHARD = 8192
SPB = 8
NBLOCKS = 5
DEADLINE = 120  # seconds for a whole case; the children's imports included

ctx = mp.get_context("spawn")


def rank_cfg(base, uid, tag, **keys):
    return base(unique_id=uid(tag), local_rank_size=NRANKS, shard_size=SHARD,
                block_size=SHARD * SPB, tensor_size=SHARD // 2, **keys)


def gather(procs, queue, n):
    """n reports from the children, then every child reaped; a child that does
    not report or exit by the deadline is killed and the case fails."""
    reports = []
    try:
        for _ in range(n):
            reports.append(queue.get(timeout=DEADLINE))
    finally:
        for p in procs:
            p.join(timeout=DEADLINE)
            if p.is_alive():
                p.kill()
                p.join()
                pytest.fail(f"rank process {p.pid} hung (killed)")
    return sorted(reports)


def test_four_ranks_one_backend_read_per_shard(base, uid, tmp_path):
    cfg = rank_cfg(base, uid, "mp4", backend="posix", backend_roots=str(tmp_path),
                   fsync=False)
    data = ranks.content(11, NBLOCKS, SHARD * SPB)
    with kvshare.Store(dict(cfg, unique_id=uid("mp4dump"))) as s:  # into the backend
        s.dump(range(1, NBLOCKS + 1), list(torch.from_numpy(data))).wait()
    queue, barrier = ctx.Queue(), ctx.Barrier(NRANKS)
    procs = [ctx.Process(target=ranks.load_all, args=(r, cfg, 11, NBLOCKS, barrier, queue))
             for r in range(NRANKS)]
    for p in procs:
        p.start()
    reports = gather(procs, queue, NRANKS)
    for rep in reports:
        assert rep[1] == "ok", rep
        equal, owner_reads, shards_loaded = rep[2]
        assert equal, f"rank {rep[0]}: bytes differ"
        assert owner_reads == NBLOCKS * SPB, "one backend read per shard for the node"
        assert shards_loaded == NRANKS * NBLOCKS * SPB


def test_failing_backend_fails_every_rank(base, uid):
    cfg = rank_cfg(base, uid, "mpfault", backend="latency", latency_us=1000,
                   fault_error_ppm=1000000)
    queue = ctx.Queue()
    procs = [ctx.Process(target=ranks.load_expect_error, args=(r, cfg, NBLOCKS, queue))
             for r in range(NRANKS)]
    for p in procs:
        p.start()
    for rep in gather(procs, queue, NRANKS):
        assert rep[1:3] == ("error", -errno.EIO), rep
        assert rep[3] == "EIO"


def test_killed_rank_does_not_hang_the_others(base, uid):
    """Three ranks wait on slots whose owner (the fourth) has its reads in
    flight; the owner is SIGKILLed: the waiters take its slots over and finish."""
    cfg = rank_cfg(base, uid, "mpkill", backend="latency", latency_us=3000000,
                   timeout_ms=60000)
    queue, go = ctx.Queue(), ctx.Event()
    others = [ctx.Process(target=ranks.load_after_kill, args=(r, cfg, NBLOCKS, go, queue))
              for r in range(NRANKS - 1)]
    victim = ctx.Process(target=ranks.own_then_hang, args=(NRANKS - 1, cfg, NBLOCKS, queue))
    try:
        for p in others:
            p.start()
        for _ in others:
            assert queue.get(timeout=DEADLINE)[1] == "ready"
        victim.start()
        rep = queue.get(timeout=DEADLINE)
        assert rep[:2] == (NRANKS - 1, "owning") and rep[2] == NBLOCKS * SPB, rep
        go.set()
        for _ in others:
            assert queue.get(timeout=DEADLINE)[1] == "submitted"
        os.kill(victim.pid, signal.SIGKILL)  # its reads still in flight (3 s each)
        victim.join(DEADLINE)
        assert victim.exitcode == -signal.SIGKILL
    except BaseException:
        for p in others + [victim]:
            if p.is_alive():
                p.kill()
        raise
    for rep in gather(others, queue, NRANKS - 1):
        assert rep[1] == "ok", rep
        assert rep[2] >= 1, "no dead filler's slot was taken over"
