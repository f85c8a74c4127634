"""KVShareConnector's pieces against vLLM's own classes, without an engine:
real VllmConfig, KVCacheConfig, Request and block hasher, connector objects of
both roles on one node's store (posix backend under tmp_path).

- cross-TP: the two ranks of a TP=2 "engine" (worker connectors, each with its
  own head of the tiny model's two) save blocks; a TP=1 worker
  loads them and finds each head where vLLM's CPU layout puts it, and the
  other way round;
- a GPU backend's layout (FLASH_ATTN: each token's K then V, staged) shares
  stored blocks with the CPU backend's, both ways (and on CUDA where there is
  a device);
- MLA: one latent shard per layer, one copy stored for all ranks, loaded by
  every rank of any TP degree, kernel blocks (CPU_MLA's 16 tokens) grouped;
- an attention backend the connector does not know is refused;
- the scheduler side matches the stored prefix through its watcher, keeping
  one token to compute;
- a load of blocks that are not stored reports those vLLM blocks as load
  errors (vLLM then recomputes them), and does not hang;
- a load in the step is kvshare_load_groups tasks of runs of layers (the
  key checked at start-up), every layer arriving; a group refused at submit
  fails the step's load once, the groups submitted still reaped;
- the store's keys: the user's override the connector's defaults, the ones
  derived from the engine cannot be set; layout_tag is the fingerprint's;
- a block stored under the same id with another fingerprint's layout_tag (a
  colliding id) is a load error, never loaded; with the same tag it loads;
- a worker whose kvshare_unique_id names a cache bound to another
  fingerprint (other weights) is refused, naming the key and the fix;
  another backend under the same fingerprint keeps the library's error;
- the kvshare configuration is checked when vLLM resolves the connector's
  class while it builds the engine's config (before any weights load): a key
  typo, a missing root, a Redis that does not answer are refused with the
  library's message (redis_start_degraded=1 lets the last one start);
- the library's log lines go through vLLM's handlers, in its format;
- shutdown flushes a worker's saves to the backend (bounded by
  kvshare_flush_timeout_s) before it closes the store, warns with the count
  of blocks left when the bound passes, and never raises (a failing backend,
  a library without kvs_store_flush); the key itself is checked;
- rank_heads is vLLM's split of heads for every TP degree."""
import logging
import os
import re

import pytest
import torch

import kvshare.vllm as kv
from conftest import vllm_config

BLOCK, HEADS, HEAD_DIM, LAYERS, NBLOCKS = 32, 2, 32, 2, 10
NAMES = [f"model.layers.{i}.self_attn.attn" for i in range(LAYERS)]


def kv_cache_config(heads_of_rank):
    from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheConfig,
                                            KVCacheGroupSpec)

    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=heads_of_rank,
                             head_size=HEAD_DIM, dtype=torch.float32)
    return KVCacheConfig(num_blocks=NBLOCKS, kv_cache_tensors=[],
                         kv_cache_groups=[KVCacheGroupSpec(NAMES, spec)])


@pytest.fixture
def node(tiny_model, tmp_path):
    """node(tp, role): a connector of an engine of TP degree tp, all on one store;
    config: store keys over the test's kvshare_config, model: another model
    directory than tiny_model, more: other kv_connector_extra_config keys."""
    uid = f"vc-{os.getpid()}-{tmp_path.name}"[:60]
    extra = {"kvshare_unique_id": uid,
             "kvshare_config": {"backend": "posix", "backend_roots": str(tmp_path),
                                "fsync": 0, "cache_buffer_capacity_gb": 0.01,
                                "timeout_ms": 3000}}
    made = []

    def make(tp, role, kvcc=None, config=None, model=None, **more):
        from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

        cfg = vllm_config(model or tiny_model, extra={**extra, **more, "kvshare_config":
                                             {**extra["kvshare_config"], **(config or {})}})
        cfg.kv_transfer_config.kv_connector = "KVShareConnector"
        cfg.kv_transfer_config.kv_connector_module_path = "kvshare.vllm"
        cfg.parallel_config.tensor_parallel_size = tp
        c = kv.KVShareConnector(cfg, getattr(KVConnectorRole, role),
                                kvcc or kv_cache_config(HEADS // tp))
        made.append(c)
        return c

    yield make
    for c in made:
        c.shutdown()


def register(monkeypatch, conn, rank, heads_of_rank, fill, backend="CPU_ATTN",
             device="cpu"):
    """Register this rank's KV caches, random or zero, as vLLM lays them out for
    an attention backend: CPU_ATTN's contiguous (num_blocks, heads, block_size,
    2 * head_dim), K rows then V rows per (block, head); for a GPU backend
    (FLASH_ATTN) the same logical shape over memory in (num_blocks, block_size,
    heads, 2 * head_dim) order, each token's K then V (flash attention's NHD)."""
    import vllm.distributed.kv_transfer.kv_connector.utils as kvutils
    import vllm.distributed.parallel_state as ps

    class Backend:  # what the connector asks of the layers' backend: its name
        @staticmethod
        def get_name():
            return backend

    monkeypatch.setattr(ps, "get_tensor_model_parallel_rank", lambda: rank)
    monkeypatch.setattr(kvutils, "get_current_attn_backends", lambda *a: [Backend])
    make = torch.randn if fill else torch.zeros
    if backend == "CPU_ATTN":
        caches = {n: make(NBLOCKS, heads_of_rank, BLOCK, 2 * HEAD_DIM, device=device)
                  for n in NAMES}
    else:
        caches = {n: make(NBLOCKS, BLOCK, heads_of_rank, 2 * HEAD_DIM,
                          device=device).permute(0, 2, 1, 3) for n in NAMES}
    conn.register_kv_caches(caches)
    return caches


def k_and_v(cache, backend):
    """A layer's K and V, each (num_blocks, heads, block_size, head_dim)."""
    if backend == "CPU_ATTN":
        return cache.reshape(NBLOCKS, cache.shape[1], 2 * BLOCK, HEAD_DIM).split(BLOCK, 2)
    return cache.split(HEAD_DIM, dim=3)


def ids(n, tag):
    return [kv.block_ids([bytes([tag, i]) * 16], b"x" * 32)[0] for i in range(n)]


def save(conn, caches, pairs):
    conn.bind_connector_metadata(kv.KVShareMetadata(saves=[("r", pairs)]))
    for n in NAMES:
        conn.save_kv_layer(n, caches[n], None)
    conn.wait_for_save()
    conn.clear_connector_metadata()


def load(conn, pairs):
    conn.bind_connector_metadata(kv.KVShareMetadata(loads=[("r", pairs)]))
    conn.start_load_kv(None)
    for n in NAMES:
        conn.wait_for_layer_load(n)
    conn.wait_for_save()
    errors = conn.get_block_ids_with_load_errors()
    conn.clear_connector_metadata()
    return errors


def test_tp2_saves_tp1_loads(node, monkeypatch):
    ranks = [node(2, "WORKER") for _ in range(2)]
    src = [register(monkeypatch, c, r, 1, True) for r, c in enumerate(ranks)]
    stored = ids(4, 1)
    # each rank saves its head of blocks 3..6 of its cache
    for c, caches in zip(ranks, src):
        save(c, caches, [(i, 3 + k) for k, i in enumerate(stored)])
    one = node(1, "WORKER")
    dst = register(monkeypatch, one, 0, HEADS, False)
    assert load(one, [(i, 5 + k) for k, i in enumerate(stored)]) == set()  # into 5..8
    for n in NAMES:
        for k in range(4):
            for h in range(HEADS):
                assert torch.equal(dst[n][5 + k, h], src[h][n][3 + k, 0]), (n, k, h)
    assert not dst[n][:5].any() and not dst[n][9:].any()  # nothing else written


def test_tp1_saves_tp2_loads(node, monkeypatch):
    one = node(1, "WORKER")
    src = register(monkeypatch, one, 0, HEADS, True)
    stored = ids(3, 2)
    save(one, src, [(i, 1 + k) for k, i in enumerate(stored)])
    for r in range(2):
        c = node(2, "WORKER")
        dst = register(monkeypatch, c, r, 1, False)
        assert load(c, [(i, 7 - k) for k, i in enumerate(stored)]) == set()
        for n in NAMES:
            for k in range(3):
                assert torch.equal(dst[n][7 - k, 0], src[n][1 + k, r])


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_gpu_layout_shares_with_cpu_layout(node, monkeypatch, device):
    """A GPU backend's layout (staged: a (block, head) is not contiguous there)
    stores and loads the same blocks as the CPU backend's: a CPU TP=1 engine
    saves, each rank of a FLASH_ATTN TP=2 engine finds its head's K and V per
    token; then those ranks save other blocks and the CPU engine finds them.
    On "cuda" through the CUDA copy engine (a machine with a GPU)."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device (torch.cuda.is_available() is False)")
    cpu = node(1, "WORKER")
    src = register(monkeypatch, cpu, 0, HEADS, True)
    stored = ids(3, 5)
    save(cpu, src, [(i, 2 + k) for k, i in enumerate(stored)])
    gpu = [node(2, "WORKER") for _ in range(2)]
    dst = [register(monkeypatch, c, r, 1, False, "FLASH_ATTN", device)
           for r, c in enumerate(gpu)]
    for r, c in enumerate(gpu):
        assert c._in_place is False
        assert load(c, [(i, 8 - k) for k, i in enumerate(stored)]) == set()
        for n in NAMES:
            (k_src, v_src), (k_dst, v_dst) = k_and_v(src[n], "CPU_ATTN"), k_and_v(
                dst[r][n].cpu(), "FLASH_ATTN")
            for k in range(3):
                assert torch.equal(k_dst[8 - k, 0], k_src[2 + k, r]), (n, k, r, "K")
                assert torch.equal(v_dst[8 - k, 0], v_src[2 + k, r]), (n, k, r, "V")
            assert not dst[r][n][:6].any() and not dst[r][n][9:].any()
    # the other way: the GPU ranks save blocks of their own, the CPU engine loads
    for c, caches in zip(gpu, dst):
        for n in NAMES:
            caches[n][1:3].normal_()
    more = ids(2, 6)
    for c, caches in zip(gpu, dst):
        save(c, caches, [(i, 1 + k) for k, i in enumerate(more)])
    back = node(1, "WORKER")
    got = register(monkeypatch, back, 0, HEADS, False)
    assert load(back, [(i, 4 + k) for k, i in enumerate(more)]) == set()
    for n in NAMES:
        k_got, v_got = k_and_v(got[n], "CPU_ATTN")
        for r in range(2):
            k_gpu, v_gpu = k_and_v(dst[r][n].cpu(), "FLASH_ATTN")
            for k in range(2):
                assert torch.equal(k_got[4 + k, r], k_gpu[1 + k, 0]), (n, k, r, "K")
                assert torch.equal(v_got[4 + k, r], v_gpu[1 + k, 0]), (n, k, r, "V")


LATENT = 576  # kv_lora_rank 512 + rope 64: the one size vLLM's CPU MLA kernel takes


def mla_config():
    from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec, MLAAttentionSpec

    spec = MLAAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=LATENT,
                            dtype=torch.float32)
    return KVCacheConfig(num_blocks=NBLOCKS, kv_cache_tensors=[],
                         kv_cache_groups=[KVCacheGroupSpec(NAMES, spec)])


def register_mla(monkeypatch, conn, rank, caches, backend):
    import vllm.distributed.kv_transfer.kv_connector.utils as kvutils
    import vllm.distributed.parallel_state as ps

    class Backend:
        @staticmethod
        def get_name():
            return backend

    monkeypatch.setattr(ps, "get_tensor_model_parallel_rank", lambda: rank)
    monkeypatch.setattr(kvutils, "get_current_attn_backends", lambda *a: [Backend])
    conn.register_kv_caches(caches)


def test_mla_one_copy_every_rank_loads(node, monkeypatch):
    """MLA: one latent per token, the same on every rank.  A stored block is
    one shard (a tensor per layer); both ranks of a TP=2 engine save it (the second is
    deduplicated: one copy stored, written once), and a TP=1 engine on
    another backend (FLASHMLA: whole 32-token blocks, in place) and each rank
    of a TP=4 one (CPU_MLA: kernel blocks of 16 tokens, two per block) load it
    where their layout puts it."""
    # CPU_MLA's tensors: (num_blocks * 2, 1, 16, LATENT), kernel blocks in order
    src = {n: torch.randn(NBLOCKS * 2, 1, BLOCK // 2, LATENT) for n in NAMES}
    tokens = {n: src[n].reshape(NBLOCKS, BLOCK, LATENT) for n in NAMES}  # per block
    stored = ids(3, 7)
    ranks = [node(2, "WORKER", mla_config()) for _ in range(2)]
    for r, c in enumerate(ranks):
        register_mla(monkeypatch, c, r, {n: src[n].clone() for n in NAMES}, "CPU_MLA")
        assert c._geo.shards_per_block == 1 and c._heads == [0]
        save(c, {n: None for n in NAMES}, [(i, 2 + k) for k, i in enumerate(stored)])
    st = [c._store.stats() for c in ranks]
    assert st[0]["shards_dumped"] + st[1]["shards_dumped"] == 3  # one copy
    assert st[0]["dump_dedup"] + st[1]["dump_dedup"] == 3
    one = node(1, "WORKER", mla_config())
    dst = {n: torch.zeros(NBLOCKS, 1, BLOCK, LATENT) for n in NAMES}
    register_mla(monkeypatch, one, 0, dst, "FLASHMLA")
    assert one._in_place
    assert load(one, [(i, 6 + k) for k, i in enumerate(stored)]) == set()
    for n in NAMES:
        for k in range(3):
            assert torch.equal(dst[n][6 + k, 0], tokens[n][2 + k]), (n, k)
        assert not dst[n][:6].any() and not dst[n][9:].any()
    for r in range(4):
        c = node(4, "WORKER", mla_config())
        dst = {n: torch.zeros(NBLOCKS * 2, 1, BLOCK // 2, LATENT) for n in NAMES}
        register_mla(monkeypatch, c, r, dst, "CPU_MLA")
        assert load(c, [(i, 9 - k) for k, i in enumerate(stored)]) == set()
        for n in NAMES:
            got = dst[n].reshape(NBLOCKS, BLOCK, LATENT)
            for k in range(3):
                assert torch.equal(got[9 - k], tokens[n][2 + k]), (n, k, r)


def test_unknown_backend_refused(node, monkeypatch):
    c = node(1, "WORKER")
    with pytest.raises(ValueError, match="attention backend.s. ROCM_ATTN: the connector "
                                         "knows the KV layout of CPU_ATTN"):
        register(monkeypatch, c, 0, HEADS, False, "ROCM_ATTN")


def test_scheduler_matches_stored_prefix(node, monkeypatch):
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

    hash_fn = get_hash_fn_by_name("sha256")
    init_none_hash(hash_fn)

    def request(tokens):
        return Request(request_id=f"q{len(tokens)}", prompt_token_ids=tokens,
                       sampling_params=SamplingParams(max_tokens=1), pooling_params=None,
                       block_hasher=get_request_block_hasher(BLOCK, hash_fn))

    sched = node(1, "SCHEDULER")
    tokens = list(range(5, 5 + 8 * BLOCK))  # 8 full blocks
    req = request(tokens)
    assert sched.get_num_new_matched_tokens(req, 0) == (0, False)  # nothing stored
    worker = node(1, "WORKER")
    caches = register(monkeypatch, worker, 0, HEADS, True)
    fp = kv.fingerprint(sched._vllm_config)
    kids = kv.block_ids(req.block_hashes, fp)
    save(worker, caches, [(i, k) for k, i in enumerate(kids[:5])])  # the first 5
    assert sched.get_num_new_matched_tokens(request(tokens), 0) == (5 * BLOCK, False)
    assert sched.get_num_new_matched_tokens(request(tokens), 2 * BLOCK) == (3 * BLOCK, False)
    save(worker, caches, [(i, 5 + k) for k, i in enumerate(kids[5:8])])  # all 8
    # the whole prompt is stored: one block is left to compute its last token
    assert sched.get_num_new_matched_tokens(request(tokens), 0) == (7 * BLOCK, False)
    longer = request(tokens + [7])  # 8 blocks and a token: all 8 usable
    assert sched.get_num_new_matched_tokens(longer, 0) == (8 * BLOCK, False)


def test_missing_blocks_are_load_errors(node, monkeypatch):
    c = node(1, "WORKER")
    register(monkeypatch, c, 0, HEADS, False)
    stored = ids(1, 3)
    save(c, {n: torch.randn(NBLOCKS, HEADS, BLOCK, 2 * HEAD_DIM) for n in NAMES},
         [(stored[0], 2)])
    missing = ids(2, 4)
    errors = load(c, [(stored[0], 4), (missing[0], 5), (missing[1], 6)])
    assert errors == {4, 5, 6}  # the step's load fails whole: all its blocks recompute
    assert load(c, [(stored[0], 4)]) == set()
    assert c.get_block_ids_with_load_errors() == set()  # reported once


@pytest.mark.parametrize("groups", [1, 2, 5])
def test_layer_groups(node, monkeypatch, groups):
    """A load in the step is kvshare_load_groups tasks (at most one a layer),
    each of its run of layers; every layer arrives, whichever the count."""
    one = node(1, "WORKER")
    src = register(monkeypatch, one, 0, HEADS, True)
    stored = ids(3, 9)
    save(one, src, [(i, 1 + k) for k, i in enumerate(stored)])
    c = node(1, "WORKER", kvshare_load_groups=groups)
    dst = register(monkeypatch, c, 0, HEADS, False)
    before = c._store.stats()["tasks_load"]
    assert load(c, [(i, 6 + k) for k, i in enumerate(stored)]) == set()
    assert c._store.stats()["tasks_load"] - before == min(groups, LAYERS)
    for n in NAMES:
        assert torch.equal(dst[n][6:9], src[n][1:4]), n


def test_load_group_refused(node, monkeypatch):
    """A group's task refused after the first was submitted (a task queue of
    one: -EAGAIN) fails the step's load: its blocks are load errors, reported
    once, and the submitted task is still reaped, so the queue is free for
    the step's save."""
    one = node(1, "WORKER")
    src = register(monkeypatch, one, 0, HEADS, True)
    stored = ids(2, 10)
    save(one, src, [(i, 1 + k) for k, i in enumerate(stored)])
    c = node(1, "WORKER", config={"waiting_queue_depth": 1}, kvshare_load_groups=2)
    dst = register(monkeypatch, c, 0, HEADS, False)
    assert load(c, [(i, 6 + k) for k, i in enumerate(stored)]) == {6, 7}
    stats = c.get_kv_connector_stats().data
    assert stats["load_errors"] == 1 and stats["recomputed_tokens"] == 2 * BLOCK
    save(c, dst, [(ids(1, 11)[0], 3)])  # the load's first task is no longer queued
    stats = c.get_kv_connector_stats().data
    assert stats.get("save_errors", 0) == 0 and stats["saved_blocks"] == 1


def test_load_groups_key_checked(tiny_model, tmp_path):
    """kvshare_load_groups is checked when vLLM resolves the class: an int >= 1."""
    from vllm.config import KVTransferConfig

    from kvshare.vllm.connector import check_transfer_config

    good = {"backend": "posix", "backend_roots": str(tmp_path), "cache_buffer_capacity_gb": 1}

    def check(value):
        check_transfer_config(KVTransferConfig(
            kv_connector="KVShareConnector", kv_connector_module_path="kvshare.vllm",
            kv_role="kv_both", kv_connector_extra_config={
                "kvshare_config": good, "kvshare_load_groups": value}))

    for value in (1, 4, 80):
        check(value)
    for value in (0, -1, 2.0, "4", True, None):
        with pytest.raises(ValueError, match="kvshare_load_groups"):
            check(value)


def test_store_keys(node, tiny_model):
    from kvshare.vllm.connector import _store_keys

    cfg = vllm_config(tiny_model, extra={"kvshare_config": {"dump_wait": "durable",
                                                           "backend": "none"}})
    geo = kv.StoredGeometry(layers=tuple(NAMES), heads=2, head_dim=32, block_size=32,
                            elem_bytes=4)
    fp = kv.fingerprint(cfg)
    keys = dict(item.split("=", 1) for item in _store_keys(cfg, fp, geo, 3, "host").split(","))
    assert keys["dump_wait"] == "durable" and keys["backend"] == "none"
    # a shard: one head of a block, a tensor of 2 x 32 x 32 float32 per layer
    assert keys["device_id"] == "3" and keys["shard_size"] == str(8192 * LAYERS)
    assert keys["tensor_size"] == str(8192)
    assert keys["block_size"] == str(8192 * LAYERS * 2) and keys["copy_engine"] == "host"
    assert keys["unique_id"] == "vllm-" + fp.hex()[:16]
    assert keys["layout_tag"] == str(int.from_bytes(fp[:8], "little"))
    for given in ("shard_size=4k", "layout_tag=7"):
        bad = vllm_config(tiny_model, extra={"kvshare_config": given + ",backend=none"})
        with pytest.raises(ValueError, match=f"sets {given.split('=')[0]}: the connector "
                                             "derives"):
            _store_keys(bad, fp, geo, 0, "host")


def test_store_keys_cpu_worker(node, tiny_model):
    """A CPU worker's store (copy_engine host): two copy threads, and -- when
    the opening thread is bound to fewer CPUs than the process could use, as
    vLLM binds its OpenMP master -- the store's threads on the parent's CPUs
    instead of that one core; the user's keys win; a cuda engine gets
    neither."""
    import threading

    from kvshare.vllm.connector import _store_keys

    parent = sorted(os.sched_getaffinity(os.getppid()))
    if len(parent) < 2:
        pytest.skip(f"the parent process may use {len(parent)} CPU: no narrower binding")
    geo = kv.StoredGeometry(layers=tuple(NAMES), heads=2, head_dim=32, block_size=32,
                            elem_bytes=4)
    plain = vllm_config(tiny_model, extra={"kvshare_config": {"backend": "none"}})
    users = vllm_config(tiny_model, extra={"kvshare_config": {
        "backend": "none", "cpu_affinity_cores": "1", "cache_stream_number": 3}})
    fp = kv.fingerprint(plain)

    def keys_of(cfg, engine):
        return dict(item.split("=", 1) for item in _store_keys(cfg, fp, geo, 0, engine)
                    .split(","))

    out = {}

    def bound():  # a thread bound to one CPU, as vLLM binds a CPU worker's
        os.sched_setaffinity(0, {parent[0]})
        out["host"], out["cuda"] = keys_of(plain, "host"), keys_of(plain, "cuda")
        out["users"] = keys_of(users, "host")

    t = threading.Thread(target=bound)
    t.start()
    t.join()
    cpus = set()
    for run in out["host"]["cpu_affinity_cores"].split(":"):
        a, _, b = run.partition("-")
        cpus.update(range(int(a), int(b or a) + 1))
    assert sorted(cpus) == parent
    assert out["host"]["cache_stream_number"] == "2"
    assert "cpu_affinity_cores" not in out["cuda"] and "cache_stream_number" not in out["cuda"]
    assert out["users"]["cpu_affinity_cores"] == "1"
    assert out["users"]["cache_stream_number"] == "3"
    # an unbound thread (this one: the parent's CPUs) leaves the store's threads be
    assert "cpu_affinity_cores" not in keys_of(plain, "host")


@pytest.mark.parametrize("same_tag", [False, True])
def test_foreign_block_is_load_error(node, monkeypatch, tmp_path, same_tag):
    """Another writer stores blocks under the ids this engine asks for (ids
    that collide across fingerprints: a writer that derives them another way,
    or a shared kvshare_model_id with the weights left out) with its own
    layout_tag: every load of them fails, so vLLM recomputes; never another
    model's KV.  With this engine's tag (the control) they load."""
    import numpy as np

    import kvshare

    c = node(1, "WORKER")
    caches = register(monkeypatch, c, 0, HEADS, False)
    tag = kv.layout_tag(c._fp) if same_tag else kv.layout_tag(c._fp) ^ 1
    layer = 2 * BLOCK * HEAD_DIM * 4
    shard = layer * LAYERS
    foreign = ids(2, 9)
    with kvshare.Store({"unique_id": f"vc-foreign-{os.getpid()}", "device_id": 0,
                        "shard_size": shard, "tensor_size": layer,
                        "block_size": shard * HEADS,
                        "copy_engine": "host", "backend": "posix",
                        "backend_roots": str(tmp_path), "fsync": 0,
                        "cache_buffer_capacity_gb": 0.01, "layout_tag": tag}) as w:
        data = [np.full(shard * HEADS, 7 + i, dtype=np.uint8) for i in range(2)]
        assert w.dump(foreign, data).wait()
    errors = load(c, [(foreign[0], 3), (foreign[1], 4)])
    if same_tag:
        assert errors == set()
        assert caches[NAMES[0]][3].view(torch.uint8).eq(7).all()
    else:
        assert errors == {3, 4}
        assert caches[NAMES[0]][3].eq(0).all()  # nothing of the foreign block landed


def test_cache_of_other_weights_refused(node, monkeypatch, tmp_path):
    """An engine with other weights (another fingerprint, so another
    layout_tag) given the kvshare_unique_id of a live engine's cache: the
    library refuses its rank (the cache is bound to the first engine's
    backend identity, tag included), and the connector says why and what to
    do, the library's line (both tags) after it.  The control: the same
    weights over another backend root is the library's KvsError, unchanged."""
    import kvshare
    from conftest import write_model

    a = node(1, "WORKER")
    register(monkeypatch, a, 0, HEADS, False)
    b = node(1, "WORKER", model=write_model(tmp_path / "other-weights", weights=1))
    assert b._fp != a._fp
    with pytest.raises(ValueError) as e:
        register(monkeypatch, b, 0, HEADS, False)
    msg = str(e.value)
    assert ("another engine with other weights (a different fingerprint) uses this cache: "
            "give this engine its own kvshare_unique_id, or leave it unset (the default is "
            "per fingerprint)") in msg, msg
    assert "kv_connector_extra_config['kvshare_unique_id']" in msg, msg
    ta, tb = kv.layout_tag(a._fp), kv.layout_tag(b._fp)
    assert f"layout_tag={ta}; this rank to " in msg and f"layout_tag={tb} (give every" in msg, msg
    assert b._store is None
    (tmp_path / "elsewhere").mkdir()
    c = node(1, "WORKER", config={"backend_roots": str(tmp_path / "elsewhere")})
    with pytest.raises(kvshare.KvsError) as e:
        register(monkeypatch, c, 0, HEADS, False)
    assert e.value.name == "KVS_ECONFIG" and "bound to another backend" in e.value.detail
    assert "kvshare_unique_id" not in str(e.value)


def block_files(root, kids):
    """The posix backend's file of each kvshare id (io/posix_roots.c, Naming)."""
    return [os.path.join(str(root), k.hex()[0:2], k.hex()[2:4], k.hex()) for k in kids]


class Lines(logging.Handler):
    """The connector's log records (vLLM's logger does not propagate to pytest's)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        self.lines.append((record.levelno, record.getMessage()))

    def __enter__(self):
        logging.getLogger("vllm.kvshare.connector").addHandler(self)
        return self

    def __exit__(self, *exc):
        logging.getLogger("vllm.kvshare.connector").removeHandler(self)


# Writes held 200 ms each, 4 in flight: a save of 4 blocks (16 shard writes)
# reaches the backend about a second after its dump returned (dump_wait=cached).
SLOW = {"fault_delay_us": 200000, "io_queue_depth": 4}


def test_shutdown_flushes_saves(node, monkeypatch, tmp_path):
    """A worker's shutdown waits (kvshare_flush_timeout_s) until its saved
    blocks are in the backend, before it closes: with timeout_ms=300 the
    close alone writes for 0.3 s only and leaves most of them to the node's
    next opener (the cache kept, the files missing)."""
    c = node(1, "WORKER", config={**SLOW, "timeout_ms": 300}, kvshare_flush_timeout_s=30)
    caches = register(monkeypatch, c, 0, HEADS, True)
    kids = ids(4, 11)
    save(c, caches, [(i, 1 + k) for k, i in enumerate(kids)])
    files = block_files(tmp_path, kids)
    with Lines() as log:
        c.shutdown()
    assert [os.path.exists(f) for f in files] == [True] * 4, log.lines
    assert not [m for lvl, m in log.lines if lvl >= logging.WARNING], log.lines
    c.shutdown()  # once closed: nothing


def test_shutdown_flush_timeout_warns(node, monkeypatch, tmp_path):
    """A flush past kvshare_flush_timeout_s: shutdown logs one WARNING with
    how many saved blocks are not in the backend yet, returns, and the store
    is closed (its close then writes them: timeout_ms 3 s)."""
    c = node(1, "WORKER", config=SLOW, kvshare_flush_timeout_s=0.05)
    caches = register(monkeypatch, c, 0, HEADS, True)
    kids = ids(4, 12)
    save(c, caches, [(i, 1 + k) for k, i in enumerate(kids)])
    store = c._store
    with Lines() as log:
        c.shutdown()
    warns = [m for lvl, m in log.lines if lvl == logging.WARNING]
    assert len(warns) == 1, log.lines
    m = re.search(r"shutdown: (\d+) saved blocks were not in the backend after 0\.05 s "
                  r"\(kvshare_flush_timeout_s\)", warns[0])
    assert m and int(m.group(1)) > 0, warns
    assert store.closed and c._store is None


def test_shutdown_never_raises(node, monkeypatch):
    """A flush that fails -- every write given up (fault_error_ppm), or a
    library without kvs_store_flush -- is a WARNING naming the error, the
    store is closed all the same, and shutdown raises nothing."""
    import errno

    import kvshare

    c = node(1, "WORKER", config={"fault_error_ppm": 1000000, "timeout_ms": 300})
    caches = register(monkeypatch, c, 0, HEADS, True)
    save(c, caches, [(i, 1 + k) for k, i in enumerate(ids(2, 13))])
    store = c._store
    with Lines() as log:
        c.shutdown()
    assert store.closed
    assert any(lvl == logging.WARNING and "flushing the saved blocks" in m and "EIO" in m
               for lvl, m in log.lines), log.lines

    c = node(1, "WORKER")
    register(monkeypatch, c, 0, HEADS, True)
    store = c._store

    def old_library(timeout=None):
        raise kvshare.KvsError(-errno.EOPNOTSUPP, "kvs_store_flush", "predates KVSHARE_1.1")
    monkeypatch.setattr(store, "flush", old_library)
    with Lines() as log:
        c.shutdown()
    assert store.closed
    assert any("predates KVSHARE_1.1" in m for lvl, m in log.lines), log.lines


def test_flush_timeout_key_checked(tiny_model, tmp_path):
    """kvshare_flush_timeout_s is checked with the rest of the configuration
    when vLLM resolves the class: seconds, finite, >= 0."""
    from vllm.config import KVTransferConfig

    from kvshare.vllm.connector import check_transfer_config

    good = {"backend": "posix", "backend_roots": str(tmp_path), "cache_buffer_capacity_gb": 1}
    for value in (0, 2.5, "10"):
        check_transfer_config(KVTransferConfig(
            kv_connector="KVShareConnector", kv_connector_module_path="kvshare.vllm",
            kv_role="kv_both", kv_connector_extra_config={
                "kvshare_config": good, "kvshare_flush_timeout_s": value}))
    for value in (-1, float("nan"), float("inf"), "soon", True, None):
        with pytest.raises(ValueError, match="kvshare_flush_timeout_s"):
            check_transfer_config(KVTransferConfig(
                kv_connector="KVShareConnector", kv_connector_module_path="kvshare.vllm",
                kv_role="kv_both", kv_connector_extra_config={
                    "kvshare_config": good, "kvshare_flush_timeout_s": value}))


def _transfer_config(kvshare_config):
    from vllm.config import KVTransferConfig

    return KVTransferConfig(kv_connector="KVShareConnector",
                            kv_connector_module_path="kvshare.vllm", kv_role="kv_both",
                            kv_connector_extra_config={"kvshare_config": kvshare_config})


def test_config_checked_when_the_class_is_resolved(tiny_model, tmp_path):
    """What vLLM does while it builds an engine's config (VllmConfig's
    post-init, in the process that starts the engine, before any weights
    load): resolve the connector's class.  A bad kvshare configuration fails
    there, with the library's message; a good one, or a Redis that does not
    answer with redis_start_degraded=1, passes."""
    from vllm.config import (CacheConfig, DeviceConfig, ModelConfig, VllmConfig)
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    good = {"backend": "posix", "backend_roots": str(tmp_path), "cache_buffer_capacity_gb": 1}
    down = {"backend": "redis", "redis_endpoints": str(tmp_path / "nobody.sock"),
            "redis_connect_timeout_ms": 200, "cache_buffer_capacity_gb": 1}
    refused = {
        "unknown key 'cache_bufer_capacity_gb' (did you mean 'cache_buffer_capacity_gb'?)":
            {**good, "cache_bufer_capacity_gb": 1},
        f"root {tmp_path}/missing: No such file or directory":
            {**good, "backend_roots": str(tmp_path / "missing")},
        "redis_start_degraded=1": down,
    }
    for want, cfg in refused.items():
        with pytest.raises(ValueError, match="is refused") as ei:
            KVConnectorFactory.get_connector_class(_transfer_config(cfg))
        assert want in str(ei.value), str(ei.value)
    for cfg in (good, {**down, "redis_start_degraded": 1}):
        assert KVConnectorFactory.get_connector_class(_transfer_config(cfg)).__name__ == \
            "KVShareConnector"
    # as LLM() builds it: the engine's config is refused, naming the key
    with pytest.raises(Exception, match="cache_bufer_capacity_gb"):
        VllmConfig(model_config=ModelConfig(model=tiny_model, skip_tokenizer_init=True,
                                            dtype="float32", max_model_len=2048, seed=0),
                   cache_config=CacheConfig(block_size=BLOCK, enable_prefix_caching=True),
                   device_config=DeviceConfig("cpu"),
                   kv_transfer_config=_transfer_config({**good, "cache_bufer_capacity_gb": 1}))


def test_library_lines_in_vllm_log(tmp_path, capfd):
    """The library's lines (logger "kvshare") are written by vLLM's handler, in
    its format and at its level -- not by Python's last-resort handler as a
    bare message on stderr."""
    import logging

    import kvshare
    import kvshare.vllm.connector  # noqa: F401  (routes the logger at import)

    from vllm.logger import _configure_vllm_root_logger

    _configure_vllm_root_logger()  # as an engine's start does, after the import
    assert not logging.getLogger("kvshare").propagate
    kvshare.check_config({"unique_id": "vc-log", "device_id": 0, "backend": "redis",
                          "redis_endpoints": str(tmp_path / "nobody.sock"),
                          "redis_connect_timeout_ms": 200, "redis_start_degraded": 1,
                          "cache_buffer_capacity_gb": 1})
    out, err = capfd.readouterr()
    line = next(x for x in (out + err).splitlines() if "opened degraded" in x)
    # vLLM's format: "[(<process> pid=N) ]LEVEL mm-dd hh:mm:ss [file.py:line] message"
    assert re.search(r"WARNING \d\d-\d\d \d\d:\d\d:\d\d \[_lib\.py:\d+\] backend: redis",
                     line), line


@pytest.mark.parametrize("heads", [1, 2, 4, 8])
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_rank_heads(heads, tp):
    per = max(1, heads // tp)
    got = [kv.rank_heads(heads, tp, r, per) for r in range(tp)]
    assert sorted({h for g in got for h in g}) == list(range(heads))  # every head held
    if tp <= heads:
        assert [h for g in got for h in g] == list(range(heads))  # contiguous, in order
    else:
        assert all(len(g) == 1 for g in got)
        assert [g[0] for g in got] == [r * heads // tp for r in range(tp)]
    with pytest.raises(ValueError):
        kv.rank_heads(heads, tp, 0, per + 1)
