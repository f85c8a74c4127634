"""One process: the store API through the binding, with torch CPU tensors and
numpy arrays on the host copy engine and a posix backend under tmp_path.
Round trips compare bytes; a second store on a fresh cache proves the bytes
came back from the backend (owner reads), not only from the shared cache."""
import errno
import math
import os
import sys
import threading
import time

import numpy as np
import pytest
import torch

import kvshare

SHARD = 4096
TENSORS = [1024, 2048, 1024]  # several tensors per shard
SPB = 4                       # shards (layers) per block
NBLOCKS = 6


@pytest.fixture
def posix(base, uid, tmp_path):
    """posix(tag): the config of a store over a fresh cache on tmp_path's root."""
    def make(tag, **keys):
        return base(unique_id=uid(tag), backend="posix", backend_roots=str(tmp_path),
                    fsync=False, tensor_size_list=TENSORS, block_size=SHARD * SPB, **keys)
    return make


def blocks(tag):
    return [(tag << 32) + i for i in range(NBLOCKS)]


def per_tensor(block_tensor):
    """A block tensor's shards as lists of per-stored-tensor views."""
    out = []
    for s in range(SPB):
        shard = block_tensor[s * SHARD:(s + 1) * SHARD]
        offs = np.cumsum([0] + TENSORS)
        out.append([shard[offs[t]:offs[t + 1]] for t in range(len(TENSORS))])
    return out


def test_torch_roundtrip_whole_blocks(posix):
    src = torch.randint(0, 256, (NBLOCKS, SHARD * SPB), dtype=torch.uint8)
    ids = blocks(1)
    with kvshare.Store(posix("torch1")) as s:
        assert s.ready(30) is True
        assert s.lookup(ids) == [False] * NBLOCKS
        assert s.dump(ids, list(src)).wait() is True
        assert s.lookup(ids) == [True] * NBLOCKS
        dst = torch.zeros_like(src)
        assert s.load(ids, list(dst)).wait()
        assert torch.equal(dst, src)
        assert s.stats()["load_hits"] == NBLOCKS * SPB
    with kvshare.Store(posix("torch2")) as s:  # a fresh cache: from the backend
        dst = torch.zeros_like(src)
        s.load(ids, [per_tensor(d) for d in dst]).wait()  # a list per shard this time
        assert torch.equal(dst, src)
        assert s.stats()["owner_reads"] == NBLOCKS * SPB


def test_torch_non_uint8_dtypes(posix):
    src = torch.randn(NBLOCKS, SHARD * SPB // 2, dtype=torch.float16)
    ids = blocks(2)
    with kvshare.Store(posix("fp16")) as s:
        s.dump(ids, list(src)).wait()
    with kvshare.Store(posix("fp16b")) as s:
        dst = torch.empty_like(src)
        s.load(ids, list(dst)).wait()
        assert torch.equal(dst.view(torch.uint8), src.view(torch.uint8))


def test_numpy_roundtrip(posix):
    src = np.random.default_rng(3).integers(0, 256, (NBLOCKS, SHARD * SPB), dtype=np.uint8)
    ids = [bytes([i]) * 16 for i in range(1, NBLOCKS + 1)]  # bytes ids
    with kvshare.Store(posix("np1")) as s:
        s.dump(ids, list(src)).wait()
    with kvshare.Store(posix("np2")) as s:
        dst = np.zeros_like(src)
        s.load(ids, list(dst)).wait()
        assert (dst == src).all()
        ro = np.zeros_like(src)
        ro.flags.writeable = False
        with pytest.raises(ValueError, match="read-only"):
            s.load(ids, list(ro))


def test_layerwise(posix):
    """One task per layer (shard index), both ways; a layer's tensors only."""
    src = torch.randint(0, 256, (SPB, NBLOCKS, SHARD), dtype=torch.uint8)  # [layer][block]
    ids = blocks(4)
    with kvshare.Store(posix("layer1")) as s:
        tasks = [s.dump(ids, list(src[layer]), shard=layer) for layer in range(SPB)]
        assert all(t.wait() for t in tasks)
    with kvshare.Store(posix("layer2")) as s:
        dst = torch.zeros_like(src)
        for layer in range(SPB):  # an engine waits for layer l before computing it
            assert s.load(ids, list(dst[layer]), shard=layer).wait()
            assert torch.equal(dst[layer], src[layer])
            assert torch.equal(dst[layer + 1:], torch.zeros_like(dst[layer + 1:]))


def test_shards_by_address(posix):
    """load_shards/dump_shards: any (block, shard) per unit in one task, the
    shards scattered in the source (a connector's heads of a layer); the
    second store reads them back from the backend into another order."""
    ids = blocks(7)
    units = [(b, sh) for b in ids for sh in range(SPB)]
    order = np.random.default_rng(7).permutation(len(units))
    src = torch.randint(0, 256, (len(units), SHARD), dtype=torch.uint8)
    with kvshare.Store(posix("addr1")) as s:
        base = src.data_ptr()
        t = s.dump_shards([(*units[u], base + k * SHARD) for k, u in enumerate(order)],
                          keep=[src])
        assert t.wait() is True
        assert s.lookup(ids) == [True] * NBLOCKS
        with pytest.raises(ValueError, match="shard 4, a block has 4"):
            s.load_shards([(ids[0], SPB, base)])
        with pytest.raises(TypeError, match="positive int"):
            s.load_shards([(ids[0], 0, src)])
        with pytest.raises(ValueError, match="no shards"):
            s.load_shards([])
    with kvshare.Store(posix("addr2")) as s:
        dst = torch.zeros_like(src)
        base = dst.data_ptr()
        assert s.load_shards([(*u, base + k * SHARD) for k, u in enumerate(units)],
                             keep=[dst]).wait()
        assert s.stats()["owner_reads"] == len(units)
    assert torch.equal(dst, src[np.argsort(order)])


def test_shard_list_tensor_ranges(posix):
    """A ShardList packed once, loaded a range of stored tensors at a time (a
    connector's layer groups): each load fills its tensors of every shard and
    nothing else; the first reads the shards whole from the backend, the
    later ones hit; a bad range or another store's list is refused."""
    ids = blocks(8)
    src = torch.randint(0, 256, (NBLOCKS, SHARD * SPB), dtype=torch.uint8)
    with kvshare.Store(posix("rng1")) as s:
        assert s.dump(ids, list(src)).wait()
    offs = [0, TENSORS[0], TENSORS[0] + TENSORS[1]]
    with kvshare.Store(posix("rng2")) as s, kvshare.Store(posix("rng3")) as other:
        dst = torch.zeros_like(src)
        units = [(b, sh, dst[i].data_ptr() + sh * SHARD) for i, b in enumerate(ids)
                 for sh in range(SPB)]
        packed = s.shard_list(units)
        assert len(packed) == NBLOCKS * SPB
        want = torch.zeros_like(src)
        for first, count in ((1, 2), (0, 1)):
            assert s.load_shards(packed, keep=[dst], tensors=(first, count)).wait()
            for i in range(NBLOCKS):
                for sh in range(SPB):
                    lo = sh * SHARD + offs[first]
                    hi = sh * SHARD + (offs[first + count] if first + count < len(offs) else SHARD)
                    want[i, lo:hi] = src[i, lo:hi]
            assert torch.equal(dst, want)  # the range, every shard; nothing else
        st = s.stats()
        assert st["owner_reads"] == NBLOCKS * SPB and st["load_hits"] == NBLOCKS * SPB
        for bad in ((0, 0), (3, 1), (2, 2)):
            with pytest.raises(kvshare.KvsError) as e:
                s.load_shards(packed, keep=[dst], tensors=bad)
            assert e.value.code == -errno.EINVAL
        with pytest.raises(ValueError, match="another store"):
            other.load_shards(packed, keep=[dst])
        assert s.load_shards(packed, keep=[dst]).wait()  # every tensor, from the list
    assert torch.equal(dst, src)


def test_shard_table(posix):
    """shard_table: the shards as arrays (ids, shard numbers, an address per
    stored tensor) load what the same units do; every array is checked."""
    ids = blocks(9)
    src = torch.randint(0, 256, (NBLOCKS, SHARD * SPB), dtype=torch.uint8)
    offs = np.cumsum([0] + TENSORS[:-1])
    with kvshare.Store(posix("tab1")) as s:
        assert s.dump(ids, list(src)).wait()
        dst = torch.zeros_like(src)
        order = np.random.default_rng(9).permutation(NBLOCKS * SPB)  # any shard per row
        bids = b"".join(kvshare.block_id(ids[u // SPB]) for u in order)
        shards = [int(u % SPB) for u in order]
        addrs = np.array([[dst.data_ptr() + u * SHARD + o for o in offs] for u in order],
                         dtype=np.int64)
        table = s.shard_table(bids, shards, addrs)
        assert len(table) == NBLOCKS * SPB
        assert s.load_shards(table, keep=[dst]).wait()
        assert torch.equal(dst, src)
        for args, match in (((bids[:-1], shards, addrs), "16 per block id"),
                            ((b"", [], addrs[:0]), "16 per block id"),
                            ((bids, shards[:-1], addrs), "shard numbers"),
                            ((bids, [SPB] + shards[1:], addrs), "a block has 4"),
                            ((bids, [-1] + shards[1:], addrs), "a block has 4"),
                            ((bids, shards, addrs[:, :2].copy()), "addrs"),
                            ((bids, shards, np.where(addrs == addrs[3, 1], 0, addrs)),
                             "not positive")):
            with pytest.raises(ValueError, match=match):
                s.shard_table(*args)


def test_prefetch_then_load_hits(posix):
    src = torch.randint(0, 256, (NBLOCKS, SHARD * SPB), dtype=torch.uint8)
    ids = blocks(5)
    with kvshare.Store(posix("pf1")) as s:
        s.dump(ids, list(src)).wait()
    with kvshare.Store(posix("pf2")) as s:
        assert s.prefetch(ids).wait()
        dst = torch.zeros_like(src)
        s.load(ids, list(dst)).wait()
        assert torch.equal(dst, src)
        st = s.stats()
        assert st["load_hits"] == NBLOCKS * SPB and st["owner_reads"] == NBLOCKS * SPB


def test_lookup_prefix_and_ids(posix):
    src = torch.randint(0, 256, (3, SHARD * SPB), dtype=torch.uint8)
    with kvshare.Store(posix("prefix")) as s:
        s.dump([-1, 2**127, b"k" * 16], list(src)).wait()
        assert s.lookup_prefix([-1, 2**127, b"k" * 16, 7, -1]) == 3
        assert s.lookup([(1 << 128) - 1]) == [True]  # -1 is the same 128-bit id
        with pytest.raises(ValueError):
            s.lookup([b"short"])
        with pytest.raises(TypeError):
            s.lookup([1.5])


def test_bad_tensors_never_reach_c(posix):
    ids = blocks(6)[:1]
    with kvshare.Store(posix("bad")) as s:
        with pytest.raises(ValueError, match="bytes"):
            s.load(ids, [torch.zeros(SHARD * SPB - 1, dtype=torch.uint8)])
        with pytest.raises(ValueError, match="contiguous"):
            s.load(ids, [torch.zeros(SHARD * SPB * 2, dtype=torch.uint8)[::2]])
        with pytest.raises(ValueError, match="tensors"):
            s.load(ids, [[[torch.zeros(SHARD, dtype=torch.uint8)]] * SPB])
        with pytest.raises(ValueError, match="shard"):
            s.load(ids, [torch.zeros(SHARD, dtype=torch.uint8)], shard=SPB)
        with pytest.raises(TypeError):
            s.load(ids, [object()])
        assert s.stats()["tasks_load"] == 0


def test_watcher(posix, uid):
    src = torch.randint(0, 256, (NBLOCKS, SHARD * SPB), dtype=torch.uint8)
    ids = blocks(7)
    with kvshare.Store(posix("watch")) as rank:
        rank.dump(ids, list(src)).wait()
        cfg = dict(posix("watch"), device_id=-1)
        with kvshare.Store(cfg) as w:
            assert w.lookup(ids) == [True] * NBLOCKS
            assert w.stats(node=True)["tasks_dump"] == 1  # the rank's, read by the watcher
            assert w.cache_stats()["ranks_attached"] == 2
            with pytest.raises(kvshare.KvsError) as ei:
                w.ready()
            assert ei.value.code == -errno.EOPNOTSUPP
            with pytest.raises(kvshare.KvsError) as ei:
                w.load(ids, list(torch.zeros_like(src)))
            assert ei.value.code == -errno.EOPNOTSUPP


def test_wait_timeout_and_gil_release(base, uid):
    """A task of a slow backend: wait(timeout) returns False while it runs; a
    wait sleeping in C lets another Python thread run (the switch interval is
    raised so that only a call releasing the GIL lets it in)."""
    with kvshare.Store(base(unique_id=uid("slow"), backend="latency",
                            latency_us=300000)) as s:
        dst = torch.zeros(2, SHARD, dtype=torch.uint8)
        task = s.load([1, 2], list(dst))
        assert task.wait(0.001) is False
        assert task.check() is False
        go = threading.Event()
        returned = [False]
        ran_during_wait = []

        def other():
            go.wait()
            ran_during_wait.append(not returned[0])
        old = sys.getswitchinterval()
        sys.setswitchinterval(5.0)  # no forced switches: only a blocking call lets it in
        t = threading.Thread(target=other)
        try:
            t.start()
            go.set()
            assert task.wait() is True
            returned[0] = True
        finally:
            sys.setswitchinterval(old)
            t.join()
        assert ran_during_wait == [True], "no other thread ran while wait slept: GIL held"
        with pytest.raises(kvshare.KvsError) as ei:
            task.wait()  # reaped
        assert ei.value.code == -errno.ENOENT


def test_wait_timeouts_infinite_and_invalid(base, uid):
    """wait(math.inf) and any timeout past what C takes (UINT64_MAX ns, 584
    years) mean no timeout: clamped, never an OverflowError nor wrapped
    modulo 2**64 by ctypes (2**64 ns + 45 us would wait 45 us).  A negative
    or NaN timeout is a ValueError naming it, for wait, check's Task, ready
    and BatchStore, before anything reaches C."""
    with kvshare.Store(base(unique_id=uid("inf"), backend="latency",
                            latency_us=20000)) as s:
        def load():
            return s.load([1], [torch.zeros(SHARD, dtype=torch.uint8)])
        assert load().wait(math.inf) is True
        assert s.wait(load(), 1e300) is True
        assert load().wait(18446744073.7096) is True  # 2**64 ns + 45 us
        assert load().wait(2**70) is True
        assert s.ready(math.inf) is True and s.ready(None) is True
        task = load()
        for bad in (-1, -1e-9, -math.inf, math.nan):
            with pytest.raises(ValueError, match="timeout"):
                task.wait(bad)
            with pytest.raises(ValueError, match="timeout"):
                s.ready(bad)
            with pytest.raises(ValueError, match="timeout"):
                kvshare.BatchStore(s, timeout=bad)
        with pytest.raises(TypeError, match="timeout"):
            task.wait("1")
        assert task.wait() is True  # none of those touched it


def test_task_timeout_is_an_error(base, uid):
    name = uid("tmo")
    with kvshare.Store(base(unique_id=name, backend="latency", latency_us=300000,
                            timeout_ms=50)) as s:
        with pytest.raises(kvshare.KvsError) as ei:
            s.load([1], [torch.zeros(SHARD, dtype=torch.uint8)]).wait()
        assert ei.value.code == -errno.ETIMEDOUT and ei.value.name == "ETIMEDOUT"
    # close gave up on the 300 ms read; once it lands the store detaches and,
    # the only rank, removes the cache (a process exiting sooner would leave it
    # stale: 300 ms is past what close and exit wait with timeout_ms=50).
    ctl = f"/dev/shm/kvshare.{name}.ctl"
    deadline = time.monotonic() + 10
    while os.path.exists(ctl) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not os.path.exists(ctl)


def test_close_drains_and_finalizer(base, uid):
    """Tensors stay referenced until their task is reaped; a store dropped
    without close() is closed by its finalizer."""
    s = kvshare.Store(base(unique_id=uid("fin"), backend="latency", latency_us=20000))
    dst = torch.zeros(4, SHARD, dtype=torch.uint8)
    s.load([1, 2, 3, 4], list(dst))
    del dst  # the task holds the tensors
    s.close()  # drains the task
    s.close()
    assert s.closed
    with pytest.raises(ValueError, match="closed"):
        s.lookup([1])
    s = kvshare.Store(base(unique_id=uid("fin2")))
    fin = s._finalizer
    del s
    assert not fin.alive


def test_check_config(posix, tmp_path):
    """kvshare.check_config refuses what an open would, with the library's
    lines in detail, and opens nothing: no segment of the unique_id is left."""
    good = posix("check")
    uid = good["unique_id"]
    kvshare.check_config(good)
    kvshare.check_config({k: v for k, v in good.items() if k not in ("block_size",)})
    with pytest.raises(kvshare.KvsError) as ei:
        kvshare.check_config({**good, "backend_roots": str(tmp_path / "missing")})
    assert ei.value.name == "ENOENT" and str(tmp_path / "missing") in ei.value.detail
    with pytest.raises(kvshare.KvsError, match="did you mean 'cache_buffer_capacity_gb'"):
        kvshare.check_config({**good, "cache_bufer_capacity_gb": 1})
    assert not [f for f in os.listdir("/dev/shm") if f.startswith(f"kvshare.{uid}.")]


def test_library_lines_not_printed_bare(posix, tmp_path, capfd):
    """Without logging configured, the library's lines are not printed (the
    issue: they went to stderr beside the raised error); the raised error
    holds them, and a handler the program adds gets them."""
    import logging

    bad = {**posix("bare"), "backend_roots": str(tmp_path / "missing")}
    with pytest.raises(kvshare.KvsError) as ei:
        kvshare.Store(bad)
    out, err = capfd.readouterr()
    assert "missing" in ei.value.detail
    assert "missing" not in out + err, (out, err)
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    h = Keep()
    logging.getLogger("kvshare").addHandler(h)
    try:
        with pytest.raises(kvshare.KvsError):
            kvshare.Store(bad)
    finally:
        logging.getLogger("kvshare").removeHandler(h)
    assert any("missing" in m for m in seen), seen
