#!/usr/bin/env python3
"""perf/vllm_load_profile.py [options] -- where a prefix hit's time goes in
kvshare's vLLM connector, without an engine: the connector's real objects
(kvshare.vllm.KVShareConnector through perf/vllm_ttft_profile.py's timed
subclass) against vLLM's own VllmConfig / KVCacheConfig, the perf model of
perf/vllm_ttft.py (8 layers x 8 KV heads of 128, float32, block 32: a block is
8 shards, one per KV head, each 8 tensors of 32 KiB, one per layer), a
prefix of --blocks 128 blocks (256 MiB) on the posix
backend in a temp dir.

Per TP degree a storing engine (its TP ranks' worker connectors, a process
each, one backend directory per degree: dummy weights' fingerprint names the
degree) saves the prefix and closes: the last close removes
the cache, so what follows reads the backend, as engine B of
perf/vllm_ttft.py does (A has exited).  Then per
--repeat round, --tp rank processes (TP=2: heads 0-3 and 4-7) each open a
fresh worker connector on a fresh cache (register_kv_caches), the parent's
scheduler connector looks the request up (block ids, lookup_prefix through
its watcher: the backend, the cache being empty), and every rank, released
at once, loads the prefix as vLLM's model runner drives it: start_load_kv,
then wait_for_layer_load of each layer (each followed by --forward-ms of a
simulated forward: spinning on the rank's CPU, or sleeping as a GPU's forward
would leave the CPU), then wait_for_save.  Three loads a round:
  backend_hot   the blocks' files in the page cache (A just wrote them)
  cache_hit     the same blocks again, now in the shared cache (an engine
                whose peer loaded them first, or A's cache still alive)
  backend_cold  a fresh cache, the files dropped from the page cache first
                (posix_fadvise DONTNEED on each block file: this run's files
                only, nothing global; skipped with --no-cold)
Printed per TP degree, the storing engine's save (the slowest rank's
wait_for_save: the step's dump of the whole prefix into the shared cache):
  vllm_load_profile tp=<t> save wait_for_save_ms=<..> bytes=<prefix bytes>
Printed per load, medians over the rounds (ms), the slowest rank's:
  vllm_load_profile tp=<t> case=<case> total_ms=<..> start_load_kv_ms=<..>
      units_ms=<..> load_shards_ms=<..> waits_ms=<..> first_wait_ms=<..>
      wait_for_save_ms=<..> copy_ms=<..> (the store's copy_ns) owner_reads=<n>
      load_hits=<n> gib_per_s=<..> floor_ms=<..> total/floor=<..> best_ms=<..> rounds=<n>
      all_ms=<each round's total>
(total: from start_load_kv to the end of wait_for_save, simulated forward
included; waits: in wait_for_layer_load, which may submit later layers' loads)
  vllm_load_profile tp=<t> lookup ids_ms=<..> lookup_prefix_ms=<..> blocks=<n> hit=<n>
and the floor of the same run: one host->host copy of the prefix's bytes
(numpy, best of 7) and the same bytes in 32 KiB copies (ctypes.memmove per
layer of a (block, head): the store's copy granularity, the Python call's cost
measured and shown apart).

Run (the venv: python/vllm-env/env.sh prints its path):
  PYTHONPATH=python KVSHARE_LIBRARY=build/lib/libkvshare.so.1 $venv/bin/python \
      perf/vllm_load_profile.py [builddir] [--tp 1,2] [--repeat 5] [--blocks 128]
      [--connector-extra JSON] [--store-extra JSON] [--forward-ms 0 --forward-kind spin]
A prototype of the binding or the connector is measured by putting its copy
first on PYTHONPATH.  About 1-2 min on a 2-core machine.  No timing is
asserted; exit 1 if a load fails or loads less than the prefix.  Smoke mode
(KVS_PERF_SMOKE=1): --blocks 4 --repeat 1 --tp 1 --no-cold by default;
without vLLM (or numpy) importable, "SKIP:" and exit 77.
"""
import argparse
import ctypes
import json
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BLOCK = 32
TAG = "vllm_load_profile"


def options(argv):
    smoke = os.environ.get("KVS_PERF_SMOKE") == "1"
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("builddir", nargs="?", default=os.path.join(ROOT, "build"),
                   help="its lib/libkvshare.so.1 unless KVSHARE_LIBRARY is set")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--blocks", type=int, default=4 if smoke else 128)
    p.add_argument("--tp", default="1" if smoke else "1,2")
    p.add_argument("--repeat", type=int, default=1 if smoke else 5)
    p.add_argument("--no-cold", action="store_true", default=smoke)
    p.add_argument("--keep", action="store_true")
    p.add_argument("--connector-extra", default="{}", metavar="JSON",
                   help="more kv_connector_extra_config keys (a connector's tuning keys)")
    p.add_argument("--forward-ms", type=float, default=0.0,
                   help="a simulated forward: this many ms after each layer's wait "
                        "(0: none, the load alone)")
    p.add_argument("--forward-kind", choices=["spin", "sleep"], default="spin",
                   help="spin: on this rank's CPU, as a CPU engine's forward; sleep: off "
                        "it, as a GPU's")
    p.add_argument("--store-extra", default="{}", metavar="JSON",
                   help="more kvshare_config keys (the store's: io_engine, io_threads, ...)")
    return p.parse_args(argv)


def model_dir(tmp, o):
    d = os.path.join(tmp, "model")
    os.makedirs(d, exist_ok=True)
    heads = o.kv_heads
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                   "hidden_size": heads * o.head_dim, "intermediate_size": 2816,
                   "num_hidden_layers": o.layers, "num_attention_heads": heads,
                   "num_key_value_heads": heads, "head_dim": o.head_dim,
                   "hidden_act": "silu", "max_position_embeddings": 8192,
                   "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "vocab_size": 4096,
                   "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False,
                   "torch_dtype": "float32"}, f)
    return d


class Node:
    """Builds the connector objects of one 'engine' of TP degree tp."""

    def __init__(self, spec):
        self.spec = spec
        sys.path.insert(0, HERE)

    def config(self, tp):
        from vllm.config import (CacheConfig, DeviceConfig, KVTransferConfig, LoadConfig,
                                 ModelConfig, VllmConfig)
        s = self.spec
        extra = {**s["extra"], "kvshare_unique_id": s["uid"],
                 "kvshare_config": {"backend": "posix", "backend_roots": s["store"],
                                    "fsync": 0, "cache_buffer_capacity_gb": s["cache_gb"],
                                    **s["store_extra"]}}
        cfg = VllmConfig(
            model_config=ModelConfig(model=s["model"], skip_tokenizer_init=True,
                                     dtype="float32", max_model_len=8192, seed=0),
            cache_config=CacheConfig(block_size=BLOCK, enable_prefix_caching=True),
            device_config=DeviceConfig("cpu"), load_config=LoadConfig(load_format="dummy"),
            kv_transfer_config=KVTransferConfig(kv_connector="ExampleConnector",
                                                kv_role="kv_both",
                                                kv_connector_extra_config=extra))
        cfg.kv_transfer_config.kv_connector = "ProfiledKVShareConnector"
        cfg.kv_transfer_config.kv_connector_module_path = "vllm_ttft_profile"
        cfg.parallel_config.tensor_parallel_size = tp
        return cfg

    def kvcc(self, tp):
        import torch
        from vllm.v1.kv_cache_interface import (FullAttentionSpec, KVCacheConfig,
                                                KVCacheGroupSpec)
        s = self.spec
        spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=s["heads"] // tp,
                                 head_size=s["head_dim"], dtype=torch.float32)
        return KVCacheConfig(num_blocks=s["vllm_blocks"], kv_cache_tensors=[],
                             kv_cache_groups=[KVCacheGroupSpec(s["names"], spec)])

    def connector(self, tp, role):
        from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
        import vllm_ttft_profile as prof
        return prof.ProfiledKVShareConnector(self.config(tp), getattr(KVConnectorRole, role),
                                             self.kvcc(tp))

    def worker(self, tp, rank, caches):
        """A worker connector of rank `rank`, registered on caches (CPU_ATTN)."""
        import vllm.distributed.kv_transfer.kv_connector.utils as kvutils
        import vllm.distributed.parallel_state as ps

        class Backend:
            @staticmethod
            def get_name():
                return "CPU_ATTN"

        ps.get_tensor_model_parallel_rank = lambda: rank
        kvutils.get_current_attn_backends = lambda *a: [Backend]
        c = self.connector(tp, "WORKER")
        c.register_kv_caches(caches)
        return c

    def caches(self, tp, fill):
        import torch
        s = self.spec
        make = torch.randn if fill else torch.zeros
        return {n: make(s["vllm_blocks"], s["heads"] // tp, BLOCK, 2 * s["head_dim"])
                for n in s["names"]}


def ids_of(spec):
    from kvshare.vllm import identity
    return identity.block_ids(spec["hashes"], bytes.fromhex(spec["fp"]))


def pairs_of(spec, ids):
    # vLLM blocks 1.. (block 0 is vLLM's null block), the stored prefix only
    return [(ids[i], 1 + i) for i in range(spec["blocks"])]


def storer(spec, tp, rank, barrier, out):
    """Rank `rank` of a TP=tp storing engine: save its heads of the prefix
    (as the model runner drives it: save_kv_layer per layer, wait_for_save),
    then close once every rank's dumps are in the cache (the
    last close removes it: what follows reads the backend).  At the loaders'
    TP degree: dummy weights' fingerprint (its layout_tag) names the TP degree
    (kvshare/vllm/identity.py), so only such an engine's blocks are theirs."""
    os.environ["KVSHARE_LIBRARY"] = spec["lib"]
    import kvshare.vllm as kv
    node = Node(spec)
    caches = node.caches(tp, True)
    c = node.worker(tp, rank, caches)
    pairs = pairs_of(spec, ids_of(spec))
    barrier.wait(300)   # every rank open: one cache
    c.bind_connector_metadata(kv.KVShareMetadata(saves=[("a", pairs)]))
    for n in spec["names"]:
        c.save_kv_layer(n, caches[n], None)
    t0 = time.perf_counter()
    c.wait_for_save()   # the step's dump, into the shared cache
    out.put((time.perf_counter() - t0) * 1e3)
    c.clear_connector_metadata()
    barrier.wait(300)   # every rank's shards in the cache: the blocks complete
    c.shutdown()


def store_prefix(ctx, spec, tp):
    """Run the TP=tp storing engine's ranks; their exit codes and the slowest
    rank's wait_for_save (ms: a step's save of the prefix, in the step)."""
    barrier, out = ctx.Barrier(tp), ctx.Queue()
    procs = [ctx.Process(target=storer, args=(spec, tp, r, barrier, out)) for r in range(tp)]
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join()
    codes = [pr.exitcode for pr in procs]
    return codes, max(out.get(timeout=5) for _ in range(tp)) if not any(codes) else 0.0


def summarize(events, t_go):
    """ms per component of one load, from the timed connector's events."""
    def total(name):
        return sum(e["t1"] - e["t0"] for e in events if e["ev"] == name) * 1e3
    waits = [e for e in events if e["ev"] == "worker.wait_for_layer_load"]
    stats = next((e for e in events if e["ev"] == "worker.store_stats"), {})
    end = max(e["t1"] for e in events)
    return {"total_ms": (end - t_go) * 1e3,
            "start_load_kv_ms": total("worker.start_load_kv"),
            "units_ms": total("worker._units"),
            "load_shards_ms": total("store.load_shards"),
            "waits_ms": total("worker.wait_for_layer_load"),
            "first_wait_ms": (waits[0]["t1"] - waits[0]["t0"]) * 1e3 if waits else 0.0,
            "wait_for_save_ms": total("worker.wait_for_save"),
            "copy_ms": stats.get("copy_ns", 0) / 1e6,
            "owner_reads": stats.get("owner_reads", 0),
            "load_hits": stats.get("load_hits", 0),
            "bytes_loaded": stats.get("copy_bytes", 0)}


def forward(spec):
    """A layer's simulated forward (--forward-ms)."""
    ms = spec["forward_ms"]
    if ms <= 0:
        return
    if spec["forward_kind"] == "sleep":
        time.sleep(ms / 1e3)
        return
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


def rank_main(spec, tp, rank, barrier, out):
    """One rank: per round, a fresh connector, three timed loads."""
    os.environ["KVSHARE_LIBRARY"] = spec["lib"]
    import torch
    import kvshare.vllm as kv
    import vllm_ttft_profile as prof
    torch.set_num_threads(1)
    node = Node(spec)
    ids = ids_of(spec)
    pairs = pairs_of(spec, ids)
    caches = node.caches(tp, False)
    for c in caches.values():
        c.fill_(1.0)  # faulted in, as an engine's KV cache is
    res = []
    for rnd in range(spec["repeat"]):
        for case in spec["cases"]:
            if case in ("backend_hot", "backend_cold"):
                conn = node.worker(tp, rank, caches)
            barrier.wait(300)   # every rank open (the cache exists)
            barrier.wait(300)   # the parent dropped the page cache / looked up
            prof.LOG.events = []
            barrier.wait(300)   # go
            t_go = time.perf_counter()
            conn.bind_connector_metadata(kv.KVShareMetadata(loads=[("b", pairs)]))
            conn.start_load_kv(None)
            for n in spec["names"]:
                conn.wait_for_layer_load(n)
                forward(spec)
            conn.wait_for_save()
            errors = conn.get_block_ids_with_load_errors()
            conn.clear_connector_metadata()
            r = summarize(prof.LOG.events, t_go)
            r.update(case=case, rank=rank, round=rnd, errors=len(errors))
            res.append(r)
            prof.LOG.events = []
            barrier.wait(300)   # every rank done
            if case in ("cache_hit", "backend_cold") or case == spec["cases"][-1]:
                conn.shutdown()
                barrier.wait(300)  # every rank closed: the cache is gone
    out.put(res)


def floors(nbytes, shard):
    import numpy as np
    src = np.ones(nbytes, np.uint8)
    dst = np.zeros(nbytes, np.uint8)
    one = []
    for _ in range(7):
        t = time.perf_counter()
        np.copyto(dst, src)
        one.append(time.perf_counter() - t)
    n = nbytes // shard
    perm = np.random.RandomState(0).permutation(n).tolist()
    sa, da, mm = src.ctypes.data, dst.ctypes.data, ctypes.memmove
    small, calls = [], []
    for _ in range(5):
        t = time.perf_counter()
        for k, j in enumerate(perm):
            mm(da + k * shard, sa + j * shard, shard)
        small.append(time.perf_counter() - t)
        t = time.perf_counter()
        for k, j in enumerate(perm):
            mm(da + k * shard, sa + j * shard, 1)
        calls.append(time.perf_counter() - t)
    return min(one), statistics.median(one), min(small), min(calls)


def drop_page_cache(store):
    n = 0
    for d, _, files in os.walk(store):
        for f in files:
            fd = os.open(os.path.join(d, f), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                n += 1
            finally:
                os.close(fd)
    return n


def main(argv):
    o = options(argv)
    lib = os.environ.get("KVSHARE_LIBRARY") or os.path.join(o.builddir, "lib",
                                                             "libkvshare.so.1")
    os.environ["KVSHARE_LIBRARY"] = lib
    try:
        import numpy  # noqa: F401
        import vllm  # noqa: F401
    except ImportError as e:
        print(f"SKIP: {TAG}: needs vLLM and numpy (the make vllm-env venv): {e}", flush=True)
        return 77
    sys.path.insert(0, HERE)
    tmp = tempfile.mkdtemp(prefix="kvs-load-profile.")
    try:
        names = [f"model.layers.{i}.self_attn.attn" for i in range(o.layers)]
        piece = 2 * BLOCK * o.head_dim * 4  # a layer's (block, head): one copy
        nbytes = o.blocks * o.layers * o.kv_heads * piece
        # the request: the prefix's blocks + one more (not stored), as engine B's
        hashes = [bytes([i % 256, i // 256]) * 16 for i in range(o.blocks + 1)]
        spec = {"uid": f"perf-load-{os.getpid()}", "store": None,
                "model": model_dir(tmp, o), "heads": o.kv_heads, "head_dim": o.head_dim,
                "names": names, "blocks": o.blocks, "vllm_blocks": o.blocks + 8,
                "cache_gb": round(nbytes * 1.5 / 2**30 + 0.02, 3), "repeat": o.repeat,
                "lib": lib, "fp": "00" * 32, "extra": json.loads(o.connector_extra),
                "store_extra": json.loads(o.store_extra), "forward_ms": o.forward_ms,
                "forward_kind": o.forward_kind}
        spec["hashes"] = hashes
        cases = ["backend_hot", "cache_hit"] + ([] if o.no_cold else ["backend_cold"])
        spec["cases"] = cases
        f1, f1med, f32, calls = floors(nbytes, piece)
        ctx = mp.get_context("spawn")
        print(f"{TAG} config layers={o.layers} kv_heads={o.kv_heads} head_dim={o.head_dim} "
              f"blocks={o.blocks} shard_bytes={piece * o.layers} layer_bytes={piece} "
              f"prefix_bytes={nbytes} "
              f"forward_ms={o.forward_ms:g} forward_kind={o.forward_kind} "
              f"cpus={os.cpu_count()} "
              f"loadavg={'/'.join(open('/proc/loadavg').read().split()[:3])} library={lib}",
              flush=True)
        print(f"{TAG} floor copy_bytes={nbytes} floor_ms={f1 * 1e3:.1f} "
              f"floor_median_ms={f1med * 1e3:.1f} shard_floor_ms={f32 * 1e3:.1f} "
              f"shard_copies={nbytes // piece} shard_call_overhead_ms={calls * 1e3:.1f}",
              flush=True)
        rc = 0
        import kvshare.vllm as kv  # noqa: F401  (the parent's scheduler connector)
        node = Node(spec)
        from vllm.v1.request import Request  # noqa: F401
        for tp in [int(t) for t in o.tp.split(",") if t.strip()]:
            store = spec["store"] = os.path.join(tmp, f"posix-tp{tp}")
            os.makedirs(store)
            codes, save_ms = store_prefix(ctx, spec, tp)
            nfiles = sum(len(f) for _, _, f in os.walk(store))
            if any(codes) or nfiles != o.blocks:
                print(f"{TAG} tp={tp} FAILED store: exit codes {codes}, {nfiles} block files "
                      f"of {o.blocks}", flush=True)
                rc = 1
                continue
            print(f"{TAG} tp={tp} save wait_for_save_ms={save_ms:.1f} bytes={nbytes} "
                  f"(the prefix's dump in one step, into the shared cache)", flush=True)
            barrier = ctx.Barrier(tp + 1)
            q = ctx.Queue()
            procs = [ctx.Process(target=rank_main, args=(spec, tp, r, barrier, q))
                     for r in range(tp)]
            for pr in procs:
                pr.start()
            look = []
            for rnd in range(o.repeat):
                for case in cases:
                    barrier.wait(300)   # ranks open
                    if case == "backend_cold":
                        drop_page_cache(store)
                    if case == "backend_hot":
                        sched = node.connector(tp, "SCHEDULER")
                        t0 = time.perf_counter()
                        ids = kv.block_ids(hashes, bytes.fromhex(spec["fp"]))
                        t1 = time.perf_counter()
                        w = sched._watcher()
                        t2 = time.perf_counter()
                        hit = w.lookup_prefix(ids)
                        t3 = time.perf_counter()
                        look.append(((t1 - t0) * 1e3, (t3 - t2) * 1e3, hit))
                        sched.shutdown()
                    barrier.wait(300)
                    barrier.wait(300)   # go
                    barrier.wait(300)   # done
                    if case in ("cache_hit", "backend_cold") or case == cases[-1]:
                        barrier.wait(300)
            res = q.get() if tp == 1 else [x for _ in range(tp) for x in q.get()]
            for pr in procs:
                pr.join()
            bad = [r for r in res if r["errors"] or r["bytes_loaded"] != nbytes // tp]
            if bad:
                print(f"{TAG} tp={tp} FAILED loads: {bad[:2]}", flush=True)
                rc = 1
            med = lambda xs: statistics.median(xs)  # noqa: E731
            print(f"{TAG} tp={tp} lookup ids_ms={med([x[0] for x in look]):.2f} "
                  f"lookup_prefix_ms={med([x[1] for x in look]):.2f} blocks={o.blocks + 1} "
                  f"hit={look[0][2]} (backend: the cache holds none of them)", flush=True)
            for case in cases:
                rows = []
                for rnd in range(o.repeat):  # the slowest rank of each round
                    rr = [r for r in res if r["case"] == case and r["round"] == rnd]
                    rows.append(max(rr, key=lambda r: r["total_ms"]))
                keys = ["total_ms", "start_load_kv_ms", "units_ms", "load_shards_ms",
                        "waits_ms", "first_wait_ms", "wait_for_save_ms", "copy_ms"]
                m = {k: med([r[k] for r in rows]) for k in keys}
                line = " ".join(f"{k}={m[k]:.1f}" for k in keys)
                gib = nbytes / 2**30 / (m["total_ms"] / 1e3)
                print(f"{TAG} tp={tp} case={case} {line} owner_reads={rows[0]['owner_reads']} "
                      f"load_hits={rows[0]['load_hits']} gib_per_s={gib:.2f} "
                      f"floor_ms={f1 * 1e3:.1f} total/floor={m['total_ms'] / (f1 * 1e3):.2f} "
                      f"best_ms={min(r['total_ms'] for r in rows):.1f} "
                      f"rounds={o.repeat} all_ms=" + ",".join(f"{r['total_ms']:.0f}" for r in rows),
                      flush=True)
        return rc
    finally:
        if o.keep:
            print(f"# {TAG}: kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
