"""The framework-neutral batch interface (kvshare.BatchStore): per-key results
for exists / get / set, string, int and bytes keys, a queue smaller than the
batch (-EAGAIN handled by waiting for the oldest key), and a failing key
reported without failing the others."""
import pytest
import torch

import kvshare

SHARD = 4096
SPB = 2


def test_batch_roundtrip(base, uid, tmp_path):
    cfg = base(unique_id=uid("batch"), backend="posix", backend_roots=str(tmp_path),
               fsync=False, block_size=SHARD * SPB, waiting_queue_depth=2)
    keys = [f"req-7/block-{i}" for i in range(9)] + [123456789, b"\x01" * 16]
    src = torch.randint(0, 256, (len(keys), SHARD * SPB), dtype=torch.uint8)
    with kvshare.Store(cfg) as s:
        b = kvshare.BatchStore(s)
        assert b.batch_exists(keys) == [False] * len(keys)
        res = b.batch_set(keys[:6], list(src[:6]))  # 6 tasks through a queue of 2
        assert res == [True] * 6 and res.errors == {}
        assert b.batch_exists(keys) == [True] * 6 + [False] * 5
        assert b.exists_prefix(keys) == 6
        assert b.batch_set(keys, list(src)) == [True] * len(keys)  # first 6 deduplicated
        assert s.stats()["dump_dedup"] == 6 * SPB
        dst = torch.zeros_like(src)
        res = b.batch_get(keys + ["absent"], list(dst) + [torch.zeros(SHARD * SPB,
                                                                     dtype=torch.uint8)])
        assert res == [True] * len(keys) + [False]
        assert res.errors == {}  # absent is a miss, not an error
        assert torch.equal(dst, src)


def test_batch_failure_is_per_key(base, uid):
    # Every backend read fails: the keys "exist" (the latency backend says
    # present) but loading them fails, each with its own EIO.
    cfg = base(unique_id=uid("batchfail"), backend="latency", latency_us=100,
               fault_error_ppm=1000000)
    with kvshare.Store(cfg) as s:
        b = kvshare.BatchStore(s)
        dst = torch.zeros(3, SHARD, dtype=torch.uint8)
        res = b.batch_get(["a", "b", "c"], list(dst))
        assert res == [False] * 3
        assert sorted(res.errors) == [0, 1, 2]
        assert all(e.name == "EIO" for e in res.errors.values())



@pytest.mark.parametrize("failure", ["bad_tensor", "timeout"])
def test_failed_batches_leave_no_task_behind(base, uid, failure):
    """100 batches, each failing mid-way -- a bad tensor after two submitted
    keys (the call raises), or keys still running at the batch's timeout of
    0 s -- alternately batch_get and batch_set, then normal batches: every
    key of theirs succeeds.  Each failed batch leaves tasks only the binding
    can reap; left unreaped, the store's 64 task slots (waiting_queue_depth)
    would be gone by the 64th and every later submit refused with EAGAIN."""
    cfg = base(unique_id=uid(f"batchleak.{failure}"), backend="latency", latency_us=20000)
    with kvshare.Store(cfg) as s:
        good = [torch.zeros(SHARD, dtype=torch.uint8) for _ in range(4)]
        bad = good[:2] + [torch.zeros(SHARD - 1, dtype=torch.uint8)] + good[3:]
        patient, hasty = kvshare.BatchStore(s), kvshare.BatchStore(s, timeout=0)
        timed_out = 0
        for r in range(100):
            keys = [f"r{r}-{i}" for i in range(4)]
            if failure == "bad_tensor":
                call = patient.batch_get if r % 2 else patient.batch_set
                with pytest.raises(ValueError, match="bytes"):
                    call(keys, bad)
            else:
                call = hasty.batch_get if r % 2 else hasty.batch_set
                res = call(keys, good)
                assert all(ok or res.errors[i].name in ("ETIMEDOUT", "EAGAIN")
                           for i, ok in enumerate(res))
                timed_out += sum(e.name == "ETIMEDOUT" for e in res.errors.values())
        assert failure != "timeout" or timed_out > 64
        keys = [f"after-{i}" for i in range(4)]
        res = patient.batch_get(keys, good)
        assert res == [True] * 4 and res.errors == {}
        res = patient.batch_set(keys, good)
        assert res == [True] * 4 and res.errors == {}
