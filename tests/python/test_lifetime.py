"""A Store shared by threads: close() against calls in flight in other
threads (they finish before the C store is freed; later calls raise the closed
store's ValueError), and task handles bound to the store that made them (a
Task or an id of one store never reaps another store's task).

The close race runs in a spawned child (ranks.close_under_calls): a call that
reaches the freed store crashes that process (or, under the ASan build, the
sanitizer reports it and fails it), not pytest's."""
import errno
import multiprocessing as mp
import threading
import time

import pytest
import torch

import kvshare
import ranks

SHARD = 4096
DEADLINE = 120  # seconds for the child: start-up, rounds and joins

ctx = mp.get_context("spawn")


def test_close_against_calls_in_flight(base, uid):
    """100 rounds: 5 threads calling lookup, lookup_prefix, stats,
    cache_stats, load and check (one of them asleep in wait() with no
    timeout) while this thread closes the store; each thread ends on the
    closed store's ValueError and nothing else, and the child exits 0."""
    cfg = base(unique_id=uid("closerace"), backend="latency", latency_us=20000)
    queue = ctx.Queue()
    p = ctx.Process(target=ranks.close_under_calls, args=(0, cfg, 100, 5, queue))
    p.start()
    try:
        report = queue.get(timeout=DEADLINE)
    except Exception:  # noqa: BLE001 - no report: the exit code says why
        report = None
    p.join(DEADLINE)
    if p.is_alive():
        p.kill()
        p.join()
        pytest.fail("the close race child hung (killed)")
    assert p.exitcode == 0 and report is not None and report[1] == "ok", \
        (p.exitcode, report)
    rounds, calls = report[2]
    assert rounds == 100 and calls > 0


def test_close_waits_for_a_waiter(base, uid):
    """close() with a thread asleep in wait(): close returns once the waiter
    has its result (the task's), then the store is closed for every thread."""
    with kvshare.Store(base(unique_id=uid("closewait"), backend="latency",
                            latency_us=200000)) as s:
        task = s.load([1], [torch.zeros(SHARD, dtype=torch.uint8)])
        got = []
        t = threading.Thread(target=lambda: got.append(task.wait()))
        t.start()
        deadline = time.monotonic() + 30
        while not s._hd.users and time.monotonic() < deadline:  # the waiter holds the store
            time.sleep(0.001)
        assert s._hd.users == 1
        s.close()  # returns once the waiter is out of C: it had the task's result
        t.join(30)
        assert got == [True]
        with pytest.raises(ValueError, match="closed"):
            task.wait()
        with pytest.raises(ValueError, match="closed"):
            s.check(task)


def test_task_bound_to_its_store(base, uid):
    """Two stores number their tasks alike: a Task of one passed to the other
    is refused (ValueError) and the other's task is untouched; an int id is
    looked up among the store's own outstanding tasks only, and refused when
    another open store has an outstanding task of the same number."""
    slow = dict(backend="latency", latency_us=50000)
    with kvshare.Store(base(unique_id=uid("own.a"), **slow)) as a, \
            kvshare.Store(base(unique_id=uid("own.b"), **slow)) as b:
        ta = a.load([1], [torch.zeros(SHARD, dtype=torch.uint8)])
        tb = b.load([1], [torch.zeros(SHARD, dtype=torch.uint8)])
        assert ta.id == tb.id  # per-store sequence numbers: the same id in each
        with pytest.raises(ValueError, match="another store"):
            b.wait(ta)
        with pytest.raises(ValueError, match="another store"):
            b.check(ta)
        with pytest.raises(ValueError, match="pass the Task"):
            b.wait(ta.id)  # outstanding in a as well: which one is meant is unknown
        assert tb.wait() is True  # b's task was not reaped by any of those
        assert a.wait(ta.id) is True  # unambiguous now
        with pytest.raises(kvshare.KvsError) as ei:
            b.check(ta.id)  # not b's (nor a's any more): refused before C
        assert ei.value.code == -errno.ENOENT
        tc = a.load([2], [torch.zeros(SHARD, dtype=torch.uint8)])
        with pytest.raises(kvshare.KvsError) as ei:
            b.wait(tc.id)
        assert ei.value.code == -errno.ENOENT
        with pytest.raises(TypeError):
            a.wait(float(tc.id))  # an id is an integer, never truncated
        assert tc.wait() is True
