"""KVShareConnector under vLLM's real Scheduler (v1), both roles in one process,
no model: the Scheduler makes its scheduler-role connector itself (vLLM's
connector factory, kv_connector_module_path="kvshare.vllm"), and a worker-role
connector over CPU KV tensors in vLLM's layout plays the model runner's hooks
on each step's kv_connector_metadata (pickled, as it crosses to the workers).
Posix backend under tmp_path; each engine's cache a unique_id of the test's.

- a prompt whose first blocks another engine stored: schedule() gives it
  num_computed_tokens = the stored blocks, schedules the rest, and the metadata
  loads exactly those blocks into the vLLM blocks the scheduler allocated and
  saves the full blocks the step computes; the worker's KV then holds the
  stored bytes, and a third engine loads all of them, the step's saves too;
- a prompt that is entirely stored keeps one token to compute (one block when
  it is block aligned), and saves nothing again;
- a local prefix-cache hit: the loads start past it, at the right vLLM blocks;
- blocks that vanish from the backend between the lookup and the load are
  reported by the worker; fed back through update_from_output, policy
  "recompute" truncates the request at its first bad block and the next step
  recomputes from there with no load listed again, policy "fail" finishes it
  FINISHED_ERROR; either way the connector's state of it is dropped;
- the step whose loads failed stores none of the blocks it computed over the
  KV it failed to load; the recomputing step stores them (these two with
  kvshare_load_mode="sync": in-step loads of blocks not in the shared cache);
- asynchronous loads (kvshare_load_mode "hybrid", the default): blocks only the
  backend has leave the step -- the request waits (WAITING_FOR_REMOTE_KVS),
  the metadata lists its load in async_loads, the worker submits it and
  reports the request in get_finished once its KV is in place (a step that
  computes nothing waits there for it, IDLE_WAIT_S at most), and the next
  schedule computes past it with nothing loaded in the step; blocks resident
  in the shared cache load in the step, unless over kvshare_step_load_mib
  beside other requests;
- a failed asynchronous load reports its vLLM blocks and the request finished
  in the same pass; vLLM rewinds it, and its next lookup is a miss (never the
  same hit in a loop): it is recomputed, nothing loaded again;
- a request aborted while its asynchronous load runs is still reported
  finished (vLLM frees its blocks only then): the free block count returns
  to where it was."""
import itertools
import os
import pickle
import time

import pytest
import torch

import kvshare.vllm as kv
from conftest import vllm_config

BLOCK, HEADS, HEAD_DIM, LAYERS, NBLOCKS = 32, 2, 32, 2, 24
NAMES = [f"model.layers.{i}.self_attn.attn" for i in range(LAYERS)]
PROMPT = list(range(5, 5 + 6 * BLOCK))  # 6 full blocks
SUFFIX = [9] * 10                       # and 10 tokens of a 7th
_uids = itertools.count()


def kv_cache_config():
    from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheConfig,
                                            KVCacheGroupSpec)

    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=HEADS, head_size=HEAD_DIM,
                             dtype=torch.float32)
    return KVCacheConfig(num_blocks=NBLOCKS, kv_cache_tensors=[],
                         kv_cache_groups=[KVCacheGroupSpec(NAMES, spec)])


def request(req_id, tokens, max_tokens=1):
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

    hash_fn = get_hash_fn_by_name("sha256")
    init_none_hash(hash_fn)
    return Request(request_id=req_id, prompt_token_ids=list(tokens),
                   sampling_params=SamplingParams(max_tokens=max_tokens),
                   pooling_params=None, block_hasher=get_request_block_hasher(BLOCK, hash_fn))


class Engine:
    """One TP=1 engine: its rank's worker connector (KV tensors random or zero)
    and, unless scheduler=False, a real Scheduler.  The worker opens the cache
    first: the scheduler's watcher matches nothing before."""

    def __init__(self, cfg, fill, scheduler):
        from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
        from vllm.v1.core.sched.scheduler import Scheduler
        from vllm.v1.structured_output import StructuredOutputManager

        self.cfg, self.scheduler = cfg, None
        self.recving = set()  # requests whose asynchronous loads the worker reported
        self.worker = kv.KVShareConnector(cfg, KVConnectorRole.WORKER, kv_cache_config())
        shape = (NBLOCKS, HEADS, BLOCK, 2 * HEAD_DIM)
        self.caches = {n: torch.randn(shape) if fill else torch.zeros(shape) for n in NAMES}
        self.worker.register_kv_caches(self.caches)
        if scheduler:
            self.scheduler = Scheduler(vllm_config=cfg, kv_cache_config=kv_cache_config(),
                                       structured_output_manager=StructuredOutputManager(cfg),
                                       block_size=BLOCK)
            assert isinstance(self.scheduler.connector, kv.KVShareConnector)

    def ids(self, req):
        """The kvshare ids of a request's full blocks."""
        return kv.block_ids(req.block_hashes, kv.fingerprint(self.cfg))

    def store(self, req, n):
        """Save the first n blocks of req from vLLM blocks 1..n of this worker."""
        pairs = [(k, 1 + i) for i, k in enumerate(self.ids(req)[:n])]
        self.worker.bind_connector_metadata(kv.KVShareMetadata(saves=[(req.request_id, pairs)]))
        for n_ in NAMES:
            self.worker.save_kv_layer(n_, self.caches[n_], None)
        self.worker.wait_for_save()
        self.worker.clear_connector_metadata()

    def step(self, out):
        """The model runner's connector hooks around a forward of out
        (kv_connector_model_runner_mixin): the forward writes random KV into
        the blocks each new request computes, layer by layer between
        wait_for_layer_load and save_kv_layer; then get_finished (its
        finished loads kept for update) and the load errors, returned."""
        w = self.worker
        w.bind_connector_metadata(pickle.loads(pickle.dumps(out.kv_connector_metadata)))
        if out.has_sync_kv_loads:
            w.start_load_kv(None)
        for n in NAMES:
            w.wait_for_layer_load(n)
            for new in out.scheduled_new_reqs:
                first = new.num_computed_tokens // BLOCK
                end = -(-(new.num_computed_tokens + out.num_scheduled_tokens[new.req_id])
                        // BLOCK)
                for blk in new.block_ids[0][first:end]:
                    self.caches[n][blk] = torch.randn(HEADS, BLOCK, 2 * HEAD_DIM)
            w.save_kv_layer(n, self.caches[n], None)
        if not out.has_sync_kv_loads:
            w.start_load_kv(None)
        w.wait_for_save()
        _, recving = w.get_finished(set(out.finished_req_ids))
        self.recving |= recving or set()
        errors = w.get_block_ids_with_load_errors()
        w.clear_connector_metadata()
        return errors

    def update(self, out, errors=()):
        """update_from_output: one sampled token per scheduled request, the
        worker's load errors as KVConnectorOutput.invalid_block_ids and its
        finished asynchronous loads as finished_recving.  Returns {req_id:
        EngineCoreOutput}."""
        from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput

        req_ids = list(out.num_scheduled_tokens)
        mro = ModelRunnerOutput(req_ids=req_ids,
                                req_id_to_index={r: i for i, r in enumerate(req_ids)},
                                sampled_token_ids=[[7] for _ in req_ids],
                                kv_connector_output=KVConnectorOutput(
                                    invalid_block_ids=set(errors),
                                    finished_recving=self.recving))
        self.recving = set()
        outs = self.scheduler.update_from_output(out, mro)
        return {o.request_id: o for eo in outs.values() for o in eo.outputs}

    def tracked(self):
        """Request ids the scheduler-side connector holds state for."""
        return set(self.scheduler.connector._reqs)

    def shutdown(self):
        if self.scheduler is not None:
            self.scheduler.shutdown()  # closes its connector's watcher store
        self.worker.shutdown()


@pytest.fixture
def node(tiny_model, tmp_path, monkeypatch):
    """node(cache, ...): an Engine on the node's cache named cache (engines
    naming the same one share it), all on one posix backend."""
    import vllm.distributed.parallel_state as ps

    monkeypatch.setattr(ps, "get_tensor_model_parallel_rank", lambda: 0)
    uids, made = {}, []
    (tmp_path / "kv").mkdir()

    def make(cache, fill=False, scheduler=True, policy="recompute", connector=None, **keys):
        uid = uids.setdefault(cache, f"vs-{os.getpid()}-{next(_uids)}-{cache}")
        extra = {**(connector or {}), "kvshare_unique_id": uid,
                 "kvshare_config": {"backend": "posix", "backend_roots": str(tmp_path / "kv"),
                                    "fsync": 0, "cache_buffer_capacity_gb": 0.01,
                                    "timeout_ms": 3000, **keys}}
        cfg = vllm_config(tiny_model, extra=extra)
        cfg.kv_transfer_config.kv_connector = "KVShareConnector"
        cfg.kv_transfer_config.kv_connector_module_path = "kvshare.vllm"
        cfg.kv_transfer_config.kv_load_failure_policy = policy
        cfg.cache_config.num_gpu_blocks = NBLOCKS
        e = Engine(cfg, fill, scheduler)
        made.append(e)
        return e

    yield make
    for e in reversed(made):
        e.shutdown()


def new_req(out, req_id):
    (new,) = [n for n in out.scheduled_new_reqs if n.req_id == req_id]
    return new


def test_schedule_loads_stored_prefix(node):
    saver = node("a", fill=True, scheduler=False)
    q = request("q", PROMPT + SUFFIX)
    kids = saver.ids(q)
    assert len(kids) == 6
    saver.store(q, 4)  # blocks 0..3 of the prompt, from the saver's vLLM blocks 1..4

    e = node("a")
    e.scheduler.add_request(q)
    out = e.scheduler.schedule()
    new = new_req(out, "q")
    bids = new.block_ids[0]
    assert len(bids) == 7  # every block of the prompt allocated at once
    assert new.num_computed_tokens == 4 * BLOCK
    assert out.num_scheduled_tokens == {"q": len(q.prompt_token_ids) - 4 * BLOCK}
    assert out.has_sync_kv_loads
    meta = out.kv_connector_metadata
    assert isinstance(meta, kv.KVShareMetadata)
    assert meta.loads == [("q", [(kids[i], bids[i]) for i in range(4)])]
    assert meta.saves == [("q", [(kids[i], bids[i]) for i in (4, 5)])]  # full, not stored

    assert e.step(out) == set()
    for n in NAMES:
        for i in range(4):
            assert torch.equal(e.caches[n][bids[i]], saver.caches[n][1 + i]), (n, i)
    outs = e.update(out)
    assert outs["q"].new_token_ids == [7] and outs["q"].finish_reason is not None
    assert "q" not in e.tracked()  # request_finished dropped it

    # another engine of the node: all six blocks stored, the step's two saves too
    c = node("a")
    q2 = request("q2", PROMPT + SUFFIX)
    c.scheduler.add_request(q2)
    out = c.scheduler.schedule()
    new = new_req(out, "q2")
    assert new.num_computed_tokens == 6 * BLOCK
    assert out.num_scheduled_tokens == {"q2": len(SUFFIX)}
    cb = new.block_ids[0]
    assert out.kv_connector_metadata.loads == [("q2", [(kids[i], cb[i]) for i in range(6)])]
    assert out.kv_connector_metadata.saves == []
    assert c.step(out) == set()
    for n in NAMES:
        for i in range(6):
            want = saver.caches[n][1 + i] if i < 4 else e.caches[n][bids[i]]
            assert torch.equal(c.caches[n][cb[i]], want), (n, i)


@pytest.mark.parametrize("extra", [0, 1])
def test_entirely_stored_prompt_keeps_one_token(node, extra):
    saver = node("a", fill=True, scheduler=False)
    q = request("q", PROMPT + SUFFIX[:extra])
    kids = saver.ids(q)
    saver.store(q, 6)
    e = node("a")
    e.scheduler.add_request(q)
    out = e.scheduler.schedule()
    new = new_req(out, "q")
    loaded = 5 if extra == 0 else 6  # block aligned: the last block is computed
    assert new.num_computed_tokens == loaded * BLOCK
    assert out.num_scheduled_tokens == {"q": len(PROMPT) + extra - loaded * BLOCK}
    bids = new.block_ids[0]
    assert out.kv_connector_metadata.loads == [("q", [(kids[i], bids[i])
                                                      for i in range(loaded)])]
    assert out.kv_connector_metadata.saves == []  # the computed block is stored
    assert e.step(out) == set()
    for n in NAMES:
        for i in range(loaded):
            assert torch.equal(e.caches[n][bids[i]], saver.caches[n][1 + i]), (n, i)


def run_local_prefix(e):
    """Compute 2 blocks (and 5 tokens) of PROMPT on engine e, to the end: they
    stay in its local prefix cache.  Returns their vLLM block ids."""
    p = request("p", PROMPT[:2 * BLOCK + 5])
    e.scheduler.add_request(p)
    out = e.scheduler.schedule()
    assert out.kv_connector_metadata.loads == []  # nothing stored yet
    assert e.step(out) == set()
    assert e.update(out)["p"].finish_reason is not None
    return new_req(out, "p").block_ids[0][:2]


def schedule_after_local_hit(e, kids, local):
    """Add q = PROMPT + SUFFIX to e, whose local prefix cache holds 2 blocks of
    it and whose store 4: it loads blocks 2 and 3."""
    q = request("q", PROMPT + SUFFIX)
    e.scheduler.add_request(q)
    out = e.scheduler.schedule()
    new = new_req(out, "q")
    bids = new.block_ids[0]
    assert bids[:2] == local  # the local hit: vLLM's own blocks
    assert new.num_computed_tokens == 4 * BLOCK
    assert out.num_scheduled_tokens == {"q": len(q.prompt_token_ids) - 4 * BLOCK}
    assert out.kv_connector_metadata.loads == [("q", [(kids[i], bids[i]) for i in (2, 3)])]
    return q, out, bids


def test_loads_start_past_local_hit(node):
    e = node("a")
    local = run_local_prefix(e)
    saver = node("a", fill=True, scheduler=False)
    kids = saver.ids(request("x", PROMPT))
    saver.store(request("x", PROMPT), 4)
    q, out, bids = schedule_after_local_hit(e, kids, local)
    assert e.step(out) == set()
    for n in NAMES:
        for i in (2, 3):
            assert torch.equal(e.caches[n][bids[i]], saver.caches[n][1 + i]), (n, i)


def vanished(node, tmp_path, policy):
    """Engine e (cache "b") computes 2 blocks locally; another engine (cache
    "a") stores 4 durably; e's q is scheduled to load blocks 2 and 3, which
    then vanish from the backend before the worker loads them.  In-step loads
    (kvshare_load_mode "sync"): the hybrid default would make these
    asynchronous, not being in e's cache."""
    e = node("b", policy=policy, connector={"kvshare_load_mode": "sync"})
    local = run_local_prefix(e)
    saver = node("a", fill=True, scheduler=False, dump_wait="durable")
    kids = saver.ids(request("x", PROMPT))
    saver.store(request("x", PROMPT), 4)
    q, out, bids = schedule_after_local_hit(e, kids, local)
    files = [f for f in (tmp_path / "kv").rglob("*") if f.is_file()]
    assert files
    for f in files:
        f.unlink()
    errors = e.step(out)
    assert errors == {bids[2], bids[3]}  # the vLLM blocks of the failed loads
    return e, q, out, bids, kids, errors


def test_load_errors_recompute(node, tmp_path):
    from vllm.v1.request import RequestStatus

    e, q, out, bids, _, errors = vanished(node, tmp_path, "recompute")
    outs = e.update(out, errors)
    assert "q" not in outs  # the step's token is dropped
    assert q.status == RequestStatus.RUNNING
    assert q.num_computed_tokens == 2 * BLOCK  # truncated at the first bad block
    out = e.scheduler.schedule()
    cached = out.scheduled_cached_reqs
    assert cached.req_ids == ["q"] and cached.num_computed_tokens == [2 * BLOCK]
    assert out.num_scheduled_tokens == {"q": len(q.prompt_token_ids) - 2 * BLOCK}
    assert out.kv_connector_metadata.loads == []  # recomputed, not loaded again
    assert not out.has_sync_kv_loads
    assert e.step(out) == set()
    outs = e.update(out)
    assert outs["q"].new_token_ids == [7] and outs["q"].finish_reason is not None
    assert "q" not in e.tracked()


def test_load_errors_fail(node, tmp_path):
    from vllm.v1.engine import FinishReason
    from vllm.v1.request import RequestStatus

    e, q, out, _, _, errors = vanished(node, tmp_path, "fail")
    outs = e.update(out, errors)
    assert q.status == RequestStatus.FINISHED_ERROR
    assert outs["q"].finish_reason == FinishReason.ERROR and outs["q"].new_token_ids == []
    assert "q" not in e.scheduler.requests and "q" not in e.tracked()
    assert e.scheduler.schedule().num_scheduled_tokens == {}


def test_failed_load_step_stores_nothing_it_computed(node, tmp_path):
    """The step whose loads failed computed blocks 4 and 5 over KV that is not
    the stored one (layers 1.. attend over blocks 2 and 3 as they were): none
    of it is saved.  The recomputing step then saves blocks 2..5, the KV it
    computed (before: 4 and 5 were stored from the failed step, and nothing
    was saved again)."""
    e, q, out, bids, kids, errors = vanished(node, tmp_path, "recompute")
    assert out.kv_connector_metadata.saves == [("q", [(kids[i], bids[i]) for i in (4, 5)])]
    watcher = e.scheduler.connector._watcher()  # the engine's scheduler's own store
    assert watcher.lookup(kids[4:6]) == [False, False]
    e.update(out, errors)
    out = e.scheduler.schedule()
    assert out.kv_connector_metadata.saves == [("q", [(kids[i], bids[i]) for i in range(2, 6)])]
    for n in NAMES:  # the recomputing forward
        for i in range(2, 7):
            e.caches[n][bids[i]] = torch.randn(HEADS, BLOCK, 2 * HEAD_DIM)
    assert e.step(out) == set()
    assert watcher.lookup(kids[2:6]) == [True] * 4
    reader = node("b", scheduler=False)
    reader.worker.bind_connector_metadata(kv.KVShareMetadata(
        loads=[("r", [(kids[i], 1 + k) for k, i in enumerate(range(2, 6))])]))
    reader.worker.start_load_kv(None)
    for n in NAMES:
        reader.worker.wait_for_layer_load(n)
    reader.worker.wait_for_save()
    assert reader.worker.get_block_ids_with_load_errors() == set()
    for n in NAMES:
        for k, i in enumerate(range(2, 6)):
            assert torch.equal(reader.caches[n][1 + k], e.caches[n][bids[i]]), (n, i)


# -- asynchronous loads -------------------------------------------------------


def stored_elsewhere(node, n=4):
    """Engine e (cache "b") and q = PROMPT + SUFFIX, whose first n blocks
    another engine (cache "a") stored durably: the backend has them, e's
    cache not."""
    saver = node("a", fill=True, scheduler=False, dump_wait="durable")
    q = request("q", PROMPT + SUFFIX)
    kids = saver.ids(q)
    saver.store(q, n)
    return saver, q, kids


def until_scheduled(e, req_id, steps=500):
    """Step e (an empty forward: the worker's hooks, get_finished polled)
    until req_id is scheduled; that step's SchedulerOutput."""
    for _ in range(steps):
        out = e.scheduler.schedule()
        if req_id in out.num_scheduled_tokens:
            return out
        e.update(out, e.step(out))
        time.sleep(0.01)
    raise AssertionError(f"{req_id} never scheduled")


def test_async_load_from_backend(node):
    from vllm.v1.request import RequestStatus

    saver, q, kids = stored_elsewhere(node)
    e = node("b")
    e.scheduler.add_request(q)
    out = e.scheduler.schedule()
    assert out.num_scheduled_tokens == {}  # waits for its KV, nothing computed
    assert q.status == RequestStatus.WAITING_FOR_REMOTE_KVS
    bids = e.scheduler.kv_cache_manager.get_block_ids("q")[0]
    meta = out.kv_connector_metadata
    assert meta.loads == [] and not out.has_sync_kv_loads
    assert meta.async_loads == [("q", [(kids[i], bids[i]) for i in range(4)])]
    # a step that computes nothing sleeps in the store for the load (never
    # longer than IDLE_WAIT_S); a step that computes only checks it
    assert meta.idle
    waits, real_wait = [], e.worker._store.wait
    e.worker._store.wait = lambda task, timeout=None: (waits.append(timeout),
                                                       real_wait(task, timeout))[1]
    e.update(out, e.step(out))
    assert waits == [kv.connector.IDLE_WAIT_S]
    out = until_scheduled(e, "q")
    assert not out.kv_connector_metadata.idle
    del e.worker._store.wait
    new = new_req(out, "q")
    assert new.num_computed_tokens == 4 * BLOCK
    assert out.kv_connector_metadata.loads == [] and out.kv_connector_metadata.async_loads == []
    assert e.step(out) == set()
    for n in NAMES:
        for i in range(4):
            assert torch.equal(e.caches[n][bids[i]], saver.caches[n][1 + i]), (n, i)
    assert e.update(out)["q"].finish_reason is not None
    st = e.worker.get_kv_connector_stats().data
    assert st["async_loaded_blocks"] == 4 and st.get("load_errors", 0) == 0
    assert st["async_loaded_bytes"] == 4 * HEADS * LAYERS * 2 * BLOCK * HEAD_DIM * 4


@pytest.mark.parametrize("mib, other", [(64, True), (0, True), (0, False)])
def test_resident_blocks_load_in_step(node, mib, other):
    """Blocks resident in e's own cache (stored by an engine on it) load in
    the step, within kvshare_step_load_mib; over it (0) they go asynchronous
    beside another request (scheduled first, decoding), and load in the step
    all the same when q is e's only request: no other step to stall."""
    saver = node("a", fill=True, scheduler=False)
    q = request("q", PROMPT + SUFFIX)
    kids = saver.ids(q)
    saver.store(q, 4)
    e = node("a", connector={"kvshare_step_load_mib": mib})
    if other:
        e.scheduler.add_request(request("d", [7] * 20, max_tokens=50))
        e.update(e.scheduler.schedule(), set())
    e.scheduler.add_request(q)
    out = e.scheduler.schedule()
    meta = out.kv_connector_metadata
    if mib or not other:
        assert new_req(out, "q").num_computed_tokens == 4 * BLOCK and out.has_sync_kv_loads
        assert len(meta.loads) == 1 and meta.async_loads == []
    else:
        assert "q" not in out.num_scheduled_tokens and meta.loads == []
        assert [r for r, _ in meta.async_loads] == ["q"]
    assert [k for _, pairs in meta.loads + meta.async_loads for k, _ in pairs] == kids[:4]


def test_async_load_failure_is_not_offered_again(node):
    """Every backend read of e fails (fault_error_ppm), its lookups still
    find the blocks: after the failed load the same hit is there to offer."""
    saver, q, kids = stored_elsewhere(node)
    e = node("b", fault_error_ppm=1000000)
    e.scheduler.add_request(q)
    out = e.scheduler.schedule()
    bids = e.scheduler.kv_cache_manager.get_block_ids("q")[0]
    assert [r for r, _ in out.kv_connector_metadata.async_loads] == ["q"]
    errors, reported = set(), set()
    for _ in range(500):  # until the worker reports it, with its blocks
        errors |= e.step(out)
        reported |= e.recving
        if "q" in reported:
            break
        e.update(out, set())
        time.sleep(0.01)
        out = e.scheduler.schedule()
    assert "q" in reported and errors == {bids[i] for i in range(4)}
    e.update(out, errors)
    out = until_scheduled(e, "q")
    new = new_req(out, "q")
    assert new.num_computed_tokens == 0  # recomputed from the start, not offered again
    assert out.kv_connector_metadata.loads == [] and out.kv_connector_metadata.async_loads == []
    assert e.step(out) == set()
    assert e.update(out)["q"].finish_reason is not None
    st = e.worker.get_kv_connector_stats().data
    assert st["load_errors"] == 1 and st["recomputed_tokens"] == 4 * BLOCK


def test_abort_during_async_load_frees_blocks(node):
    from vllm.v1.request import RequestStatus

    saver, q, kids = stored_elsewhere(node)
    e = node("b", fault_delay_us=300000)  # every backend read held 0.3 s
    pool = e.scheduler.kv_cache_manager.block_pool
    free0 = pool.get_num_free_blocks()
    e.scheduler.add_request(q)
    out = e.scheduler.schedule()
    assert q.status == RequestStatus.WAITING_FOR_REMOTE_KVS
    assert pool.get_num_free_blocks() < free0
    e.update(out, e.step(out))  # submitted, still reading
    assert "q" in e.worker._async
    e.scheduler.finish_requests("q", RequestStatus.FINISHED_ABORTED)
    assert pool.get_num_free_blocks() < free0  # held until the load is reported
    for _ in range(500):
        out = e.scheduler.schedule()
        e.update(out, e.step(out))
        if pool.get_num_free_blocks() == free0:
            break
        time.sleep(0.01)
    assert pool.get_num_free_blocks() == free0 and not e.worker._async
