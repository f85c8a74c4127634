#!/usr/bin/env python3
"""perf/vllm_ttft.py [options] -- time to first token of real vLLM engines (CPU,
vLLM 0.32, dummy weights) when a long prompt's prefix is loaded from kvshare
instead of recomputed.  Each engine is its own process: this script re-runs
itself as `--child SPEC.json OUT.json` (perf/vllm_engines.py, shared with
perf/vllm_itl.py); every TTFT is taken inside the child after the engine
started and after one warm-up request of unrelated tokens (one-time costs
out), as the wall time of llm.generate() of the one timed request with
max_tokens=1 (--hit-samples N: N such requests, each its own prefix, the
median).

Per TP degree (--tp, default 1,2; TP=2 with VLLM_CPU_OMP_THREADS_BIND="0|1"),
on the posix backend in a temp dir (kv_role kv_both):
  store:  engine A computes prompt P (--prompt-tokens) and stores it;
  kvshare_hit:  engine B, a fresh process on A's store and unique_id, gets P +
          a --suffix-tokens suffix: P's full blocks come from kvshare (A's
          cache went with A: owner reads of A's block files);
  local_prefix_hit:  then B (and D, E) again, P + another suffix: P is in
          vLLM's own prefix cache, nothing is loaded -- the suffix's compute,
          the best TTFT any external cache can give;
  cache_hit:  engine E, a fresh process, adopts B's cache (B ran with
          persist=1: a restarted engine, or another on the node, finds it so)
          and gets B's prompt: P's shards are READY in the shared cache, one
          copy each into vLLM's KV.  A's block files are moved out of the
          backend's root while E runs, so a shard the cache did not serve
          fails its read (hit=0): the line says served_from=cache.  The
          cache is removed after E (persist stays in its header);
  recompute_kvshare_empty:  the same prompt, the connector on an empty store;
  recompute_no_connector:  the same prompt, no connector (engine D).
  vllm_ttft tp=<t> case=<case> ttft_s=<..> cached_tokens=<..> prompt_tokens=<..>
            expected_cached=<..> hit=<1|0> startup_s=<..> ... load_errors_logged=<n>
            block_writes_failed=<n>
  vllm_ttft tp=<t> case=local_prefix_hit engine=<b|d> ttft_s=<..> cached_tokens=<..>
  vllm_ttft tp=<t> floor copy_bytes=<P's KV bytes> floor_s=<..> floor_median_s=<..>
            floor_par_s=<..> shard_floor_s=<..> shard_calls_s=<..> read_floor_s=<..>
            read_block_floor_s=<..> served_from=backend page_cache=hot
  vllm_ttft tp=<t> ratio kvshare_hit/floor=<..> kvshare_hit/local_prefix_hit=<..>
            (kvshare_hit-local_prefix_hit)/floor=<..> ... target_3x_floor_s=<..>
  vllm_ttft tp=<t> ratio cache_hit/floor=<..> cache_hit/local_prefix_hit=<..>
            (cache_hit-local_prefix_hit)/floor=<..> target_1.5x=<1|0> ...
  vllm_ttft tp=<t> ratio recompute_no_connector/kvshare_hit=<..> recompute_kvshare_empty/kvshare_hit=<..> ...
The floors are measured in this process right after engine B, no engine
running (best of --floor-repeat 7; floors() says how): floor, one host->host
copy of P's KV bytes (KV heads x full blocks x shard, numpy, one thread);
floor_par, the same in TP threads at once; shard_floor, the same bytes in
copies of a shard's tensor, a layer's (block, head) (the store's copy
granularity); read_floor, A's block files of
P read back in shard-size preads from the page cache, as B's owner reads find
them (read_block_floor: one pread a file).  B is served by the backend: A has
exited, its cache with it, so B's hit is owner reads of A's files (hot in the
page cache: written moments before, fsync=0) and then copies from B's new
cache -- its floor is read_floor + shard_floor, and no hit can beat
local_prefix_hit, which the suffix's forward dominates.
hit=0 (cached_tokens below P's full blocks on a hit case, or a load error in
the engine's log) is flagged on the line (FLAG=no_hit) and in a "# vllm_ttft
FLAG" line at the end, as is a storing engine whose log has the library's
"store: block write of claim ..." lines (block_writes_failed, FLAG=
blocks_not_stored); neither fails the script.

Then 2 engines x TP=2 loading the same prefix at once, on a Redis backend (a
redis-server on a unix socket that the script starts; skipped, saying why,
without one): A (TP=2) stores P; B1 and B2 (TP=2 each, both bound "0|1": 4
ranks on 2 cores, oversubscribed) start together, warm up, meet at a barrier
and send P + a suffix of their own at the same moment.  The backend's reads
are counted outside the library (INFO commandstats / INFO stats around the
timed requests):
  vllm_ttft tp=2 engines=2 case=shared_hit engine=b<i> ttft_s=<..> cached_tokens=<..> ...
  vllm_ttft tp=2 engines=2 omp_bind=0|1 oversubscribed=1 backend=redis backend_gets=<n>
            expected_gets=<n> reads_once=<1|0> backend_bytes=<..> net_output_bytes=<..>
            stored_shards=<n> shard_bytes=<..> ...
expected_gets = P's full blocks x KV heads: each stored shard read
once across the node, whichever engine's rank asked first.

Model: a config.json only (load_format dummy, no tokenizer), a Llama of
--layers 8, --hidden 1024, --heads 8 attention heads of --head-dim 128
(default hidden/heads), --kv-heads 8, --intermediate 2816, --vocab 4096,
float32; block_size 32 (the CPU attention backend needs a multiple of 32),
max_model_len = prompt + suffix + 64, max_num_batched_tokens = max_model_len
(one prefill step at every TP degree),
kv_cache_memory_bytes computed from the blocks the engine needs.

Engines A prefill P in one step by default (--store-batch-tokens N: in steps
of N tokens).  One step is what found the library's pin-table bug: the last
layer of a 4 K-token step completes 128 blocks at once, and the block writes
past the process's pin table (KVS_RANK_PINS) failed while the dumps reported
success (docs/store.md, "Write"); each line's block_writes_failed counts the
library's log lines of failed block writes, and is 0 since the fix.
A quick run: --layers 2 --hidden 256 --prompt-tokens 1024.

--profile: the connector engines run perf/vllm_ttft_profile.py's subclass
(kvshare's connector, its hooks timed; loaded by kv_connector_module_path, no
change to the connector) and each hit sample and local prefix hit gets
  vllm_ttft tp=<t> case=<case> breakdown_ms request_in=<..> lookup=<..>
            block_ids=<..> lookup_prefix=<..> matched=<tokens> sched_to_worker=<..>
            start_load_kv=<..> units=<..> load_shards=<..> layer_waits=<..>
            first_wait=<..> saves=<..> forward=<..> wait_for_save=<..> output=<..>
            owner_reads=<n> load_hits=<n> copy=<..> ranks=<n> total=<..>
(breakdown() says what each spans; the slowest rank's; owner_reads/load_hits/
copy from the store's counters: backend reads, shared-cache hits, the copier's
ms).  --cprofile adds cProfile of the engine core's and each worker's window
of the timed request as "#" lines.  --hit-only runs engines A and B only;
--connector-extra JSON adds kv_connector_extra_config keys (a connector's
tuning keys, to compare variants), --store-extra JSON kvshare_config keys.

Run (the venv: python/vllm-env/env.sh prints its path on its last line):
  venv=$(python/vllm-env/env.sh | tail -n 1)
  PYTHONPATH=python KVSHARE_LIBRARY=build/lib/libkvshare.so.1 "$venv/bin/python" perf/vllm_ttft.py
(KVSHARE_LIBRARY defaults to build/lib/libkvshare.so.1 of this tree.)  Other
options: --suffix-tokens 32 --tp 1,2 --no-shared --engine-timeout 1800
--keep (leave the temp dir, logs included).  An engine that exits non-zero
prints its log's tail and the script exits 1.  Redis is killed, the temp dir
removed and /dev/shm (and /dev/hugepages) checked for kvshare files of this
run's caches left behind (listed and removed: a leftover line, exit 1).  vLLM
itself leaves /dev/shm/vllm_dist_* segments (its TP>1 CPU shm communicator)
when it kills a worker at shutdown; those this run's engines mapped are
removed and listed in a "#" line.

Timings are single samples (but --hit-samples): compare ratios within one
run, not runs.  About 11 minutes on a 2-core machine with the default model
(13 engines of 40-65 s each, start-up included; 4 K-token prefills of 4-9 s;
each more hit sample adds one prefill to A); 2-5 minutes with the quick
model.  No timing is asserted.

Smoke mode (KVS_PERF_SMOKE=1; the perf.vllm_ttft CTest entry,
tests/perf_smoke.sh): the options, the model and the "vllm_ttft config" line
as above, no engine (no vLLM needed), then "SKIP:" and exit 77: one engine's
start-up alone is 40-65 s here, past a smoke test's seconds (the vllm tests,
label vllm, run real engines).
"""
import argparse
import json
import math
import os
import random
import shutil
import socket
import subprocess
import sys
import time

import vllm_engines
from vllm_engines import BLOCK, HERE, WARMUP_TOKENS

TAG = "vllm_ttft"


def options(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    vllm_engines.add_model_options(p, layers=8, hidden=1024, prompt_tokens=4096,
                                   intermediate_help="default 2816 at hidden 1024, "
                                                     "scaled with --hidden")
    p.add_argument("--store-batch-tokens", type=int, default=0,
                   help="engine A's max_num_batched_tokens (0: max_model_len, one step)")
    p.add_argument("--tp", default="1,2", help="TP degrees of the single-engine cases")
    p.add_argument("--no-shared", action="store_true", help="skip the 2 x TP=2 part")
    p.add_argument("--engine-timeout", type=float, default=1800.0)
    p.add_argument("--keep", action="store_true", help="keep the temp dir")
    p.add_argument("--profile", action="store_true",
                   help="connector engines run perf/vllm_ttft_profile.py's timed subclass: "
                        "a breakdown line per hit")
    p.add_argument("--cprofile", action="store_true",
                   help="with --profile: cProfile of the timed request in the engine core "
                        "and the workers (top functions as '#' lines)")
    p.add_argument("--floor-repeat", type=int, default=7, help="copies per floor measured")
    p.add_argument("--store-extra", default="{}", metavar="JSON",
                   help="more kvshare_config keys of every connector engine (the store's: "
                        "io_engine, io_threads, ...)")
    p.add_argument("--hit-samples", type=int, default=1,
                   help="prompts A stores and B loads, each its own prefix (B's TTFT: the "
                        "median)")
    p.add_argument("--hit-only", action="store_true",
                   help="engines A and B only (no recompute engines), for comparing "
                        "connector variants")
    p.add_argument("--connector-extra", default="{}", metavar="JSON",
                   help="more kv_connector_extra_config keys of every connector engine "
                        "(a connector's tuning keys, to compare)")
    return vllm_engines.parse_options(p, argv)


# -- the child: one engine ------------------------------------------------------

def serve(spec, t0):
    """The --child's engine (vllm_engines.child): its warm-up, then the timed
    requests; the result for the parent."""
    from vllm import SamplingParams

    transfer = None
    if spec["connector"]:
        if spec.get("profile"):  # perf/vllm_ttft_profile.py's timed subclass
            transfer = vllm_engines.kv_transfer(spec, "ProfiledKVShareConnector",
                                                "vllm_ttft_profile")
        else:
            transfer = vllm_engines.kv_transfer(spec)
    llm = vllm_engines.open_llm(spec, transfer)
    started = time.monotonic()
    params = SamplingParams(max_tokens=1, temperature=0.0, detokenize=False)
    llm.generate([{"prompt_token_ids": spec["warmup"]}], params, use_tqdm=False)
    warm = time.monotonic()
    barrier = spec.get("barrier")
    if barrier:  # engines meant to send their request together
        open(os.path.join(barrier, spec["name"] + ".ready"), "w").close()
        go = os.path.join(barrier, "go")
        deadline = time.monotonic() + spec.get("barrier_timeout", 1800)
        while not os.path.exists(go):
            if time.monotonic() > deadline:
                raise SystemExit(f"{spec['name']}: no go at the barrier")
            time.sleep(0.005)
    t1 = time.perf_counter()
    outs = llm.generate([{"prompt_token_ids": spec["prompt"]}], params, use_tqdm=False)
    t2 = time.perf_counter()
    result = {"ttft_s": t2 - t1, "cached_tokens": outs[0].num_cached_tokens,
              "prompt_tokens": len(spec["prompt"]), "startup_s": started - t0,
              "warmup_s": warm - started, "tokens": list(outs[0].outputs[0].token_ids),
              "t_send": t1, "t_done": t2}
    local = spec.get("local_prompt")
    if local:  # P again, another suffix: P is in vLLM's own prefix cache now
        # (before more_prompts: their blocks could evict P's from vLLM's cache)
        t3 = time.perf_counter()
        outs = llm.generate([{"prompt_token_ids": local}], params, use_tqdm=False)
        t4 = time.perf_counter()
        result.update(local_ttft_s=t4 - t3, local_cached_tokens=outs[0].num_cached_tokens,
                      local_t_send=t3, local_t_done=t4)
    more = []
    for prompt in spec.get("more_prompts") or []:  # more samples, each a prompt of its own
        t3 = time.perf_counter()
        outs = llm.generate([{"prompt_token_ids": prompt}], params, use_tqdm=False)
        t4 = time.perf_counter()
        more.append({"ttft_s": t4 - t3, "cached_tokens": outs[0].num_cached_tokens,
                     "t_send": t3, "t_done": t4})
    result["more"] = more
    return result


# -- the parent ---------------------------------------------------------------

class Engine(vllm_engines.Engine):
    """A child engine (vllm_engines.Engine); with --profile, a connector
    engine's timed events go to its profile dir, in its result."""

    def __init__(self, run, name, spec):
        env = {}
        self.profile_dir = None
        if spec.get("profile"):
            self.profile_dir = os.path.join(run.tmp, f"{name}.prof")
            os.makedirs(self.profile_dir)
            env.update(KVS_TTFT_PROFILE_DIR=self.profile_dir,
                       KVS_TTFT_PROFILE_MIN_TOKENS=str(len(spec["prompt"])),
                       PYTHONPATH=HERE + os.pathsep + run.env["PYTHONPATH"])
            if run.o.cprofile:
                env["KVS_TTFT_CPROFILE"] = "1"
        super().__init__(run, name, spec, env)

    def wait(self):
        r = super().wait()
        r["profile_dir"] = self.profile_dir
        return r


class Redis:
    """A redis-server on a unix socket in the temp dir, counted from outside."""

    def __init__(self, exe, tmp):
        self.sock = os.path.join(tmp, "redis.sock")
        self.proc = subprocess.Popen([exe, "--port", "0", "--unixsocket", self.sock,
                                      "--save", "", "--appendonly", "no"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL)
        for _ in range(400):
            if os.path.exists(self.sock):
                try:
                    self.info("server")
                    return
                except OSError:
                    pass
            time.sleep(0.05)
        self.close()
        raise RuntimeError(f"{exe} did not come up on {self.sock}")

    def _command(self, *words):
        with socket.socket(socket.AF_UNIX) as c:
            c.connect(self.sock)
            c.sendall(("*%d\r\n" % len(words) + "".join(
                "$%d\r\n%s\r\n" % (len(w), w) for w in words)).encode())
            data = b""
            while b"\r\n" not in data:
                chunk = c.recv(65536)
                if not chunk:
                    raise OSError("redis closed the connection")
                data += chunk
            head, _, body = data.partition(b"\r\n")
            if head[:1] == b":":
                return int(head[1:])
            if head[:1] != b"$":
                raise OSError(f"redis replied {head!r}")
            while len(body) < int(head[1:]) + 2:
                chunk = c.recv(65536)
                if not chunk:
                    raise OSError("redis closed the connection")
                body += chunk
            return body[:int(head[1:])].decode()

    def info(self, section):
        out = {}
        for line in self._command("INFO", section).splitlines():
            if ":" in line and not line.startswith("#"):
                k, v = line.split(":", 1)
                out[k] = v
        return out

    def counts(self):
        """{command: calls}, total_net_output_bytes, keys."""
        calls = {}
        for k, v in self.info("commandstats").items():
            if k.startswith("cmdstat_"):
                calls[k[len("cmdstat_"):]] = int(v.split("calls=")[1].split(",")[0])
        net = int(self.info("stats").get("total_net_output_bytes", 0))
        return calls, net, self._command("DBSIZE")

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def floors(nbytes, piece, shard, spb, tp, store_dir, repeat):
    """The floors of one TP degree's hit, measured here while no engine runs
    (seconds; best and median of `repeat`):
      floor         one host->host copy of the prefix's KV bytes (numpy copyto,
                    one thread, into a destination faulted in before)
      floor_par     the same bytes in tp threads at once, bytes/tp each (the
                    ranks' share, copied in parallel; = floor at TP=1)
      shard_floor   the same bytes as piece-size copies (ctypes.memmove, one
                    per (block, layer, head): a shard's tensor, source in a
                    shuffled order as a cache's slots are): the store's copy
                    granularity; shard_calls the Python loop alone (1-byte
                    copies), in it
      read_floor    the prefix's stored block files read back in shard-size
                    preads (os.preadv into one buffer), from the page cache as
                    engine B found them (A wrote them moments before; nothing
                    dropped): the owner reads of a hit served by the backend;
                    read_block_floor the same files in one pread each"""
    import ctypes
    import statistics
    import threading

    import numpy as np

    def best(fn):
        ts = []
        for _ in range(repeat):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        return min(ts), statistics.median(ts)

    src = np.ones(nbytes, np.uint8)
    dst = np.zeros(nbytes, np.uint8)
    out = {}
    out["floor_s"], out["floor_median_s"] = best(lambda: np.copyto(dst, src))
    if tp > 1:
        part = nbytes // tp

        def par():
            ths = [threading.Thread(target=np.copyto,
                                    args=(dst[i * part:(i + 1) * part],
                                          src[i * part:(i + 1) * part])) for i in range(tp)]
            for t in ths:
                t.start()
            for t in ths:
                t.join()
        out["floor_par_s"], _ = best(par)
    else:
        out["floor_par_s"] = out["floor_s"]
    n = nbytes // piece
    perm = random.Random(0).sample(range(n), n)
    sa, da, mm = src.ctypes.data, dst.ctypes.data, ctypes.memmove

    def shards(size):
        for k, j in enumerate(perm):
            mm(da + k * piece, sa + j * piece, size)
    out["shard_floor_s"], _ = best(lambda: shards(piece))
    out["shard_calls_s"], _ = best(lambda: shards(1))
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(store_dir) for f in fs)
    out["block_files"] = len(files)
    if files:
        per = spb                                     # shards per block file
        files = files[:nbytes // (shard * per)]       # as many as the prefix's blocks
        size = os.path.getsize(files[0])
        head = size - per * shard                     # the block header
        mv = memoryview(dst)
        fds = [os.open(f, os.O_RDONLY) for f in files]
        try:
            def reads():
                k = 0
                for fd in fds:
                    for i in range(per):
                        os.preadv(fd, [mv[k * shard:(k + 1) * shard]], head + i * shard)
                        k += 1

            def whole():
                for k, fd in enumerate(fds):
                    os.preadv(fd, [mv[k * per * shard:(k + 1) * per * shard]], head)
            out["read_floor_s"], _ = best(reads)
            out["read_block_floor_s"], _ = best(whole)
        finally:
            for fd in fds:
                os.close(fd)
    return out


def samples(r):
    """The timed requests of a child: the first one and the more_prompts'."""
    return [r] + r.get("more", [])


def breakdown(prof_dir, t_send, t_done, prompt_tokens):
    """What a timed request's TTFT went to, in ms, from the events of
    perf/vllm_ttft_profile.py (every process of the engine: its core's
    scheduler hooks, each rank's worker hooks) between the child's send and
    its answer.  The slowest rank's worker numbers.  None without events."""
    evs = {}
    try:
        names = os.listdir(prof_dir)
    except OSError:
        return None
    for n in names:
        if n.endswith(".jsonl"):
            with open(os.path.join(prof_dir, n)) as f:
                evs[n] = [e for e in map(json.loads, f)
                          if t_send <= e["t0"] and e["t1"] <= t_done]
    sched = [e for es in evs.values() for e in es if e["ev"].startswith(("sched.", "store.lookup"))]
    look = next((e for e in sched if e["ev"] == "sched.get_num_new_matched_tokens"
                 and e["tokens"] == prompt_tokens), None)
    if look is None:
        return None
    inside = lambda es, name, a: [e for e in es if e["ev"] == name  # noqa: E731
                                  and a["t0"] <= e["t0"] and e["t1"] <= a["t1"]]
    ms = lambda es: sum(e["t1"] - e["t0"] for e in es) * 1e3  # noqa: E731
    out = {"request_in": (look["t0"] - t_send) * 1e3, "lookup": (look["t1"] - look["t0"]) * 1e3,
           "block_ids": ms(inside(sched, "sched.block_ids", look)),
           "lookup_prefix": ms(inside(sched, "store.lookup_prefix", look)),
           "matched": look["matched"]}
    ranks = []
    for es in evs.values():
        # the worker's step: vLLM binds its metadata, then (sync loads) calls
        # start_load_kv, runs the forward (per layer: wait_for_layer_load,
        # attention, save_kv_layer), then wait_for_save
        bind = next((e for e in es if e["ev"] == "worker.bind_connector_metadata"
                     and e["t0"] >= look["t1"]), None)
        if bind is None:
            continue
        end = next((e for e in es if e["ev"] == "worker.wait_for_save"
                    and e["t0"] >= bind["t1"]), None)
        if end is None:
            continue
        body = {"t0": bind["t1"], "t1": end["t0"]}
        step = {"t0": bind["t1"], "t1": end["t1"]}
        starts = inside(es, "worker.start_load_kv", body)
        start = starts[0] if starts else {"t0": bind["t1"], "t1": bind["t1"]}
        waits = inside(es, "worker.wait_for_layer_load", body)
        saves = inside(es, "worker.save_kv_layer", body)
        st = next((e for e in es if e["ev"] == "worker.store_stats"
                   and e["t0"] >= end["t0"]), {})
        ranks.append({
            "sched_to_worker": (bind["t0"] - look["t1"]) * 1e3,
            "start_load_kv": ms(starts),
            # the loads' submits, in start_load_kv or later (a connector that
            # submits layers as the forward reaches them)
            "units": ms(inside(es, "worker._units", step)),
            "load_shards": ms(inside(es, "store.load_shards", step)),
            "layer_waits": ms(waits),
            "first_wait": ms(waits[:1]),
            "saves": ms(saves),
            "forward": (end["t0"] - bind["t1"]) * 1e3 - ms(starts) - ms(waits) - ms(saves),
            "wait_for_save": (end["t1"] - end["t0"]) * 1e3,
            "output": (t_done - end["t1"]) * 1e3,
            "owner_reads": st.get("owner_reads", 0), "load_hits": st.get("load_hits", 0),
            "copy": st.get("copy_ns", 0) / 1e6, "_end": end["t1"]})
    if not ranks:
        return None
    slow = max(ranks, key=lambda x: x["_end"])
    out.update({k: v for k, v in slow.items() if k != "_end"})
    out["ranks"] = len(ranks)
    out["total"] = (t_done - t_send) * 1e3
    return out


def cprofile_lines(prof_dir, top=15):
    """'#' lines: the top functions by own time of each cProfile window."""
    import io
    import pstats
    lines = []
    for n in sorted(os.listdir(prof_dir)):
        if n.endswith(".prof"):
            buf = io.StringIO()
            st = pstats.Stats(os.path.join(prof_dir, n), stream=buf)
            st.sort_stats("tottime").print_stats(top)
            lines.append(f"# {TAG} cprofile {n}:")
            lines += ["#   " + x for x in buf.getvalue().splitlines() if x.strip()][-top - 1:]
    return lines


class Run(vllm_engines.Run):
    def __init__(self, o):
        super().__init__(o, __file__, TAG, "ttft")
        self.redis = None
        tok = vllm_engines.tokens(4096, o.vocab)
        self.prefix = tok(o.prompt_tokens)
        self.suffixes = [tok(o.suffix_tokens) for _ in range(3)]
        self.warmups = [tok(WARMUP_TOKENS) for _ in range(16)]
        self.more_prefixes = [tok(o.prompt_tokens) for _ in range(max(0, o.hit_samples - 1))]
        self.n_warm = 0
        # geometry
        self.full_blocks = o.prompt_tokens // BLOCK           # P's full blocks
        self.layer_bytes = 2 * BLOCK * o.head_dim * 4         # a (layer, head), float32
        self.shard_bytes = self.layer_bytes * o.layers        # a head, every layer
        self.spb = o.kv_heads                                 # shards per stored block
        max_model_len = o.prompt_tokens + o.suffix_tokens + 64
        # vLLM's blocks per rank: max_model_len's worth plus the warm-up, at TP=1
        # (the most bytes per block; TP=2 ranks get twice the blocks)
        vllm_blocks = (math.ceil(max_model_len / BLOCK) + math.ceil(WARMUP_TOKENS / BLOCK)
                       + 8)
        kv_bytes = vllm_blocks * self.spb * self.shard_bytes
        # kvshare's shared cache: every block the node's engines of one phase
        # store or load (A's P and warm-up, 2 engines' P + suffix + warm-up), x 1.5
        node_blocks = (self.full_blocks + 2 * (math.ceil((o.prompt_tokens + o.suffix_tokens)
                                                         / BLOCK) + 3) + 3)
        cache_gb = node_blocks * self.spb * self.shard_bytes * 1.5 / 2**30 + 0.02
        self.cache_gb = round(cache_gb, 3)
        self.write_model(max_model_len, kv_bytes)
        sb = o.store_batch_tokens
        self.store_batch = min(sb, max_model_len) if sb > 0 else None
        self.store_batch_shown = self.store_batch or max_model_len

    def warmup(self):
        self.n_warm += 1
        return self.warmups[self.n_warm % len(self.warmups)]

    def engine(self, name, tp, prompt, store=None, uid=None, barrier=None, batch=None,
               local=None, more=None):
        spec = {"tp": tp, "prompt": prompt, "warmup": self.warmup(),
                "connector": store is not None, "batch_tokens": batch,
                "local_prompt": local, "more_prompts": more,
                "profile": self.o.profile and store is not None}
        if store is not None:
            spec.update(kvshare_config={"cache_buffer_capacity_gb": self.cache_gb, **store,
                                        **json.loads(self.o.store_extra)},
                        unique_id=uid, connector_extra=json.loads(self.o.connector_extra))
        if barrier:
            spec.update(barrier=barrier, barrier_timeout=self.o.engine_timeout)
        return Engine(self, name, spec)

    def line(self, tp, case, r, expected, extra=""):
        hit_case = case.endswith("hit")
        cached = min(x["cached_tokens"] for x in samples(r))
        hit = int(cached >= expected and r["load_errors_logged"] == 0)
        fields = (f"{TAG} tp={tp} {extra}case={case} ttft_s={r['ttft_s']:.3f} "
                  f"cached_tokens={r['cached_tokens']} prompt_tokens={r['prompt_tokens']}")
        if len(samples(r)) > 1:
            fields += (f" ttft_median_s={self.ttft(r):.3f} samples={len(samples(r))} "
                       f"ttft_samples_s=" + ",".join(f"{x['ttft_s']:.3f}" for x in samples(r))
                       + f" min_cached_tokens={cached}")
        if hit_case:
            fields += f" expected_cached={expected} hit={hit}"
            if not hit:
                self.flags.append((f"tp={tp} {extra}case={case}",
                                   f"no full hit: cached_tokens={cached} < {expected}"
                                   if cached < expected else
                                   f"no full hit: {r['load_errors_logged']} load errors logged"))
        fields += (f" startup_s={r['startup_s']:.1f} warmup_s={r['warmup_s']:.2f} "
                   f"engine_wall_s={r['wall_s']:.1f} load_errors_logged={r['load_errors_logged']} "
                   f"block_writes_failed={r['block_writes_failed']}")
        if hit_case and not hit:
            fields += " FLAG=no_hit"
        if case == "store" and r["block_writes_failed"]:
            fields += " FLAG=blocks_not_stored"
            self.flags.append((f"tp={tp} {extra}case={case}",
                               f"{r['block_writes_failed']} block writes failed in the "
                               f"library (its log: 'store: block write of claim ...')"))
        print(fields, flush=True)

    @staticmethod
    def ttft(r):
        """A child's TTFT: its timed request's, the median of its samples."""
        import statistics
        return statistics.median(x["ttft_s"] for x in samples(r))

    def single(self, tp):
        o = self.o
        store_dir = os.path.join(self.tmp, f"posix-tp{tp}")
        empty_dir = os.path.join(self.tmp, f"posix-tp{tp}-empty")
        os.makedirs(store_dir)
        os.makedirs(empty_dir)
        posix = {"backend": "posix", "fsync": 0}
        uid = f"{self.uid}-tp{tp}"
        p = self.prefix
        q = self.prefix + self.suffixes[0]
        expected = self.full_blocks * BLOCK
        a = self.engine(f"tp{tp}-a-store", tp, p, {**posix, "backend_roots": store_dir},
                        uid, batch=self.store_batch, more=self.more_prefixes).wait()
        self.line(tp, "store", a, 0, extra=f"batch_tokens={self.store_batch_shown} ")
        q2 = self.prefix + self.suffixes[1]   # P again: in vLLM's own prefix cache
        more = [m + self.suffixes[0] for m in self.more_prefixes]
        # B's cache outlives it (persist): engine E adopts it below
        b = self.engine(f"tp{tp}-b-hit", tp, q,
                        {**posix, "backend_roots": store_dir, "persist": 1},
                        uid, local=q2, more=more).wait()
        self.line(tp, "kvshare_hit", b, expected)
        self.local_line(tp, "b", b)
        self.profile_lines(tp, "kvshare_hit", b)
        fl = floors(self.full_blocks * self.spb * self.shard_bytes, self.layer_bytes,
                    self.shard_bytes, self.spb, tp, store_dir, o.floor_repeat)
        print(f"{TAG} tp={tp} floor copy_bytes={self.full_blocks * self.spb * self.shard_bytes} "
              + " ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}"
                         for k, v in fl.items())
              + f" shard_bytes={self.shard_bytes} served_from=backend page_cache=hot "
              f"(engine A exited before B: B's cache is new, every shard an owner read "
              f"of A's block files)", flush=True)
        hit, lb = self.ttft(b), b["local_ttft_s"]
        print(f"{TAG} tp={tp} ratio kvshare_hit/floor={hit / fl['floor_s']:.2f} "
              f"kvshare_hit/floor_par={hit / fl['floor_par_s']:.2f} "
              f"kvshare_hit/local_prefix_hit={hit / lb:.2f} "
              f"(kvshare_hit-local_prefix_hit)/floor={(hit - lb) / fl['floor_s']:.2f} "
              f"kvshare_hit/(local_prefix_hit+floor)={hit / (lb + fl['floor_s']):.2f} "
              f"kvshare_hit/(local_prefix_hit+read_floor+shard_floor)="
              f"{hit / (lb + fl.get('read_floor_s', 0) + fl['shard_floor_s']):.2f} "
              f"local_prefix_hit_s={lb:.3f} floor_s={fl['floor_s']:.4f} "
              f"target_3x_floor_s={3 * fl['floor_s']:.3f}", flush=True)
        self.cache_hit(tp, q, q2, more, posix, store_dir, uid, fl)
        if o.hit_only:
            return
        c = self.engine(f"tp{tp}-c-empty", tp, q, {**posix, "backend_roots": empty_dir},
                        uid + "-empty").wait()
        self.line(tp, "recompute_kvshare_empty", c, 0)
        d = self.engine(f"tp{tp}-d-noconn", tp, q, local=q2).wait()
        self.line(tp, "recompute_no_connector", d, 0)
        self.local_line(tp, "d", d)
        print(f"{TAG} tp={tp} ratio recompute_no_connector/kvshare_hit="
              f"{d['ttft_s'] / hit:.2f} recompute_kvshare_empty/kvshare_hit="
              f"{c['ttft_s'] / hit:.2f} recompute_kvshare_empty/recompute_no_connector="
              f"{c['ttft_s'] / d['ttft_s']:.2f} store/recompute_no_connector="
              f"{a['ttft_s'] / d['ttft_s']:.2f}", flush=True)
        if b["tokens"] != d["tokens"]:  # dummy weights: a weak check (docs/vllm.md)
            print(f"# {TAG} tp={tp}: the hit's token {b['tokens']} differs from the "
                  f"recompute's {d['tokens']}", flush=True)

    def cache_hit(self, tp, q, q2, more, posix, store_dir, uid, fl):
        """Engine E, a fresh process, adopts B's cache (B persisted it: a
        restarted engine, or a second one on the node, finds it so) and gets
        B's prompt: P's shards are READY in the shared cache, so its hit is
        one copy a shard into vLLM's KV, no read.  A's block files are moved
        out of the backend's root while E runs: a shard the cache did not
        serve fails its read (a load error, hit=0), so a hit is the cache's."""
        hidden = store_dir + ".hidden"
        os.rename(store_dir, hidden)
        os.makedirs(store_dir)
        try:
            e = self.engine(f"tp{tp}-e-cache-hit", tp, q, {**posix, "backend_roots": store_dir},
                            uid, local=q2, more=more).wait()
        finally:
            shutil.rmtree(store_dir)
            os.rename(hidden, store_dir)
            self.remove_persisted(uid)
        self.line(tp, "cache_hit", e, self.full_blocks * BLOCK,
                  extra="served_from=cache backend_files=moved_away ")
        self.local_line(tp, "e", e)
        self.profile_lines(tp, "cache_hit", e)
        hit, le = self.ttft(e), e["local_ttft_s"]
        print(f"{TAG} tp={tp} ratio cache_hit/floor={hit / fl['floor_s']:.2f} "
              f"cache_hit/local_prefix_hit={hit / le:.2f} "
              f"(cache_hit-local_prefix_hit)/floor={(hit - le) / fl['floor_s']:.2f} "
              f"target_1.5x={int(hit - le <= 1.5 * fl['floor_s'])} "
              f"local_prefix_hit_s={le:.3f} floor_s={fl['floor_s']:.4f}", flush=True)

    def local_line(self, tp, engine, r):
        """The engine's second timed request, P + another suffix: P in vLLM's
        own prefix cache (no load), the suffix's compute."""
        if "local_ttft_s" not in r:
            return
        print(f"{TAG} tp={tp} case=local_prefix_hit engine={engine} "
              f"ttft_s={r['local_ttft_s']:.3f} cached_tokens={r['local_cached_tokens']} "
              f"prompt_tokens={r['prompt_tokens']}", flush=True)

    def profile_lines(self, tp, case, r):
        """--profile: where the timed request's TTFT went (ms), and of the
        local prefix hit after it; --cprofile: the top functions."""
        if not r.get("profile_dir"):
            return
        timed = [(case + (f" sample={i}" if len(samples(r)) > 1 else ""), x["t_send"],
                  x["t_done"]) for i, x in enumerate(samples(r))]
        if "local_t_send" in r:
            timed.append(("local_prefix_hit", r["local_t_send"], r["local_t_done"]))
        for which, t_send, t_done in timed:
            bd = breakdown(r["profile_dir"], t_send, t_done, r["prompt_tokens"])
            if bd is None:
                print(f"# {TAG} tp={tp} case={which}: no profile events", flush=True)
                continue
            print(f"{TAG} tp={tp} case={which} breakdown_ms "
                  + " ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}"
                             for k, v in bd.items()), flush=True)
        if self.o.cprofile:
            for line in cprofile_lines(r["profile_dir"]):
                print(line, flush=True)

    def shared(self):
        exe = shutil.which("redis-server") or shutil.which("valkey-server")
        if exe is None:
            print(f"# {TAG} tp=2 engines=2: skipped: no redis-server or valkey-server on "
                  f"PATH (apt-get install redis-server)", flush=True)
            return
        self.redis = Redis(exe, self.tmp)
        store = {"backend": "redis", "redis_endpoints": self.redis.sock,
                 "redis_key_prefix": "ttft:"}
        uid = f"{self.uid}-shared"
        expected = self.full_blocks * BLOCK
        print(f"# {TAG} tp=2 engines=2: B1 and B2 are TP=2 each with "
              f"VLLM_CPU_OMP_THREADS_BIND=0|1: 4 ranks on {os.cpu_count()} cores "
              f"(oversubscribed); their timed requests start together at a barrier",
              flush=True)
        c0, n0, k0 = self.redis.counts()
        a = self.engine("shared-a-store", 2, self.prefix, store, uid,
                        batch=self.store_batch).wait()
        self.line(2, "store", a, 0,
                  extra=f"engines=1 backend=redis batch_tokens={self.store_batch_shown} ")
        c1, n1, k1 = self.redis.counts()
        barrier = os.path.join(self.tmp, "barrier")
        os.makedirs(barrier)
        bs = [self.engine(f"shared-b{i}", 2, self.prefix + self.suffixes[i], store, uid,
                          barrier=barrier) for i in (1, 2)]
        deadline = time.monotonic() + self.o.engine_timeout
        while not all(os.path.exists(os.path.join(barrier, e.name + ".ready")) for e in bs):
            for e in bs:
                e.scan()
                if e.proc.poll() is not None:
                    for other in bs:
                        other.kill()
                    raise e.failed(f"exited {e.proc.returncode} before the barrier")
            if time.monotonic() > deadline:
                for e in bs:
                    e.kill()
                raise bs[0].failed("or its peer never reached the barrier")
            time.sleep(0.05)
        c2, n2, k2 = self.redis.counts()
        open(os.path.join(barrier, "go"), "w").close()
        rs = []
        try:
            for e in bs:
                rs.append(e.wait())
        finally:
            for e in bs:
                e.kill()
        c3, n3, k3 = self.redis.counts()
        for i, r in enumerate(rs, 1):
            self.line(2, "shared_hit", r, expected, extra=f"engines=2 engine=b{i} ")
        delta = {k: c3.get(k, 0) - c2.get(k, 0) for k in sorted(set(c3) | set(c2))
                 if k not in ("info", "dbsize") and c3.get(k, 0) != c2.get(k, 0)}
        gets = delta.get("get", 0)
        want = self.full_blocks * self.spb
        a_sets = c1.get("set", 0) - c0.get("set", 0)
        warm_shards = (WARMUP_TOKENS // BLOCK) * self.spb
        line = (f"{TAG} tp=2 engines=2 omp_bind=0|1 oversubscribed=1 backend=redis "
                f"backend_gets={gets} expected_gets={want} reads_once={int(gets == want)} "
                f"backend_bytes={gets * self.shard_bytes} "
                f"net_output_bytes={n3 - n2} stored_shards={want} "
                f"shard_bytes={self.shard_bytes} blocks={self.full_blocks} "
                f"layers={self.o.layers} kv_heads={self.o.kv_heads} a_sets={a_sets} "
                f"a_warmup_shards={warm_shards} keys_after_a={k1 - k0} "
                f"cmds_during=" + ",".join(f"{k}:{v}" for k, v in delta.items())
                + f" ttft_max_s={max(r['ttft_s'] for r in rs):.3f}")
        if gets != want:
            line += " FLAG=reads_not_once"
            self.flags.append(("tp=2 engines=2",
                               f"not each shard read once: backend_gets={gets} != {want}"))
        print(line, flush=True)

    def close_services(self):
        if self.redis is not None:
            self.redis.close()


def main(argv):
    o = options(argv)
    if o.child:
        return vllm_engines.child(*o.child, serve)
    tps = [int(t) for t in o.tp.split(",") if t.strip()]
    if o.prompt_tokens < BLOCK or o.hidden % o.heads or o.heads % o.kv_heads:
        print(f"{TAG}: need --prompt-tokens >= {BLOCK}, hidden % heads == 0 and "
              f"heads % kv-heads == 0", file=sys.stderr)
        return 2
    run = Run(o)
    if not os.path.exists(run.lib):
        print(f"{TAG}: no library at {run.lib} (make, or set KVSHARE_LIBRARY)",
              file=sys.stderr)
        return 1
    run.config_line()
    if run.smoke("40-65 s"):
        return 77

    def body():
        for tp in tps:
            run.single(tp)
        if not o.no_shared:
            run.shared()
    return run.execute(body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
