#!/usr/bin/env python3
"""perf/vllm_itl.py [options] -- what one request's prefix load from a slow
backend costs the requests decoding beside it, in real vLLM engines (CPU,
vLLM 0.32, dummy weights): the decoders' inter-token latency (ITL) and the
loading request's time to first token, with the connector's loads
asynchronous, synchronous and with no load at all (issue 39's benchmark;
docs/vllm.md, "Asynchronous loads").  Each engine is its own process: this
script re-runs itself as `--child SPEC.json OUT.json` (perf/vllm_engines.py,
shared with perf/vllm_ttft.py).

Per TP degree (--tp, default 1,2; TP=2 with VLLM_CPU_OMP_THREADS_BIND="0|1"),
on the posix backend in a temp dir (kv_role kv_both, one kvshare_unique_id):
  store:    engine A computes prompt P (--prompt-tokens) and stores it, then
            exits, its shared cache with it: every later load of P is an owner
            read of A's block files;
  async, hybrid, sync:  an engine each (--modes), kv_connector_extra_config
            kvshare_load_mode=<mode>, fault_delay_us = --read-delay-ms in its
            kvshare_config (every backend completion, its reads and its own
            writes, held that long: a slow backend).
"hybrid" (the connector's default) loads in the step only blocks resident in
the node's cache, and P's are not: it behaves as "async" here, as its line
shows.

Each measuring engine, after start-up and a warm-up (--decoders unrelated
prompts of 2 blocks + 8 tokens, 4 tokens each), runs two phases, each after
--settle-s of quiet; the child drives vLLM step by step
(llm.llm_engine.add_request / step(), output_kind DELTA) and takes
time.perf_counter() when a step returns, for each request it gave a token:
  no_load:  --decoders requests of --decoder-prompt-tokens (under a block:
            nothing of theirs is looked up or loaded) decode greedily
            (ignore_eos, at most --decode-tokens); the window runs
            --baseline-steps decoder steps from their --warm-steps'th;
  load:     fresh decoders as above; after --warm-steps steps the loader
            arrives, P + a --suffix-tokens suffix of its own, max_tokens=1; the
            window runs from its arrival to --margin-steps decoder steps past
            its first token.
Then the phase's decoders are aborted.  A decoder's ITLs in a window are the
gaps between its tokens whose later token arrived in it (the first spans the
window's start).  A decoder's first block fills after 32 -
--decoder-prompt-tokens generated tokens (16 by default, inside the load's
window) and is saved in that step: each window holds the decoders' saves as
well as the load.  The no_load line is the baseline: the decoders alone, no
fifth request, every measuring engine's no_load phase pooled (engines=); a
mode's line has its load phase, and its own engine's no_load p99 beside it.
  vllm_itl tp=<t> mode=store ttft_s=<..> cached_tokens=<n> prompt_tokens=<n> ...
  vllm_itl tp=<t> mode=<async|hybrid|sync> decoders=<n> itl_p50_ms=<..>
           itl_p99_ms=<..> itl_max_ms=<..> itl_samples=<n> window_ms=<..>
           window_steps=<n> loader_ttft_ms=<..> cached_tokens=<n>
           expected_cached=<n> hit=<1|0> read_delay_ms=<..>
           engine_no_load_p99_ms=<..> startup_s=<..> engine_wall_s=<..>
           load_errors_logged=<n> [FLAG=no_hit] [FLAG=decoders_done_early]
  vllm_itl tp=<t> mode=no_load decoders=<n> itl_p50_ms=<..> itl_p99_ms=<..>
           itl_max_ms=<..> itl_samples=<n> window_ms=<..,..> window_steps=<..,..>
           loader_ttft_ms=na cached_tokens=na expected_cached=na hit=na
           read_delay_ms=<..> engines=<modes>
  vllm_itl tp=<t> ratio async_p99/no_load_p99=<..> hybrid_p99/no_load_p99=<..>
           sync_p99/no_load_p99=<..> async_ttft/sync_ttft=<..>
           hybrid_ttft/sync_ttft=<..> async_ttft-sync_ttft_ms=<..> step_ms=<..>
           target_p99_1.2x=<1|0> target_ttft_sync+step=<1|0>
(step_ms: the no_load p50 ITL, one decode step; the targets are issue 39's
-- async p99 ITL <= 1.2 x no_load's, async TTFT <= sync TTFT + one step --
reported, not asserted; a figure of a mode not run is "na").  Percentiles
are nearest-rank over every decoder's ITLs in the window(s).  The loader's
TTFT runs from its add_request to the step that returned its token.
cached_tokens is vLLM's num_cached_tokens of the loader, expected_cached P's
full blocks x block size: less, or a load error in the engine's log
("blocks are recomputed", "not submitted"), is hit=0, FLAG=no_hit on the
line and a "# vllm_itl FLAG" line at the end; a decoder that finished before
its window ended (raise --decode-tokens) is FLAG=decoders_done_early.
Neither fails the script.

Model: a config.json only (load_format dummy, no tokenizer), a Llama of
--layers 4, --hidden 512, --heads 8 of --head-dim (hidden/heads), --kv-heads 8,
--intermediate (2816 x hidden/1024), --vocab 4096, float32; block_size 32,
max_model_len = prompt + suffix + 64, max_num_batched_tokens = max_model_len,
kv_cache_memory_bytes from the blocks the engine needs.  --store-extra
JSON adds kvshare_config keys to every engine (io_queue_depth, ...; the read
delay's effect on a load scales with shards / queue depth), --connector-extra
JSON kv_connector_extra_config keys to the measuring engines.

Run (the venv: python/vllm-env/env.sh prints its path on its last line):
  venv=$(python/vllm-env/env.sh | tail -n 1)
  PYTHONPATH=python KVSHARE_LIBRARY=build/lib/libkvshare.so.1 "$venv/bin/python" perf/vllm_itl.py
(KVSHARE_LIBRARY defaults to build/lib/libkvshare.so.1 of this tree.)  Other
options: --engine-timeout 900 --keep (leave the temp dir: specs, logs and
each child's raw token times).  An engine that exits non-zero prints its
log's tail and the script exits 1.  The temp dir is removed and /dev/shm
(and /dev/hugepages) checked for kvshare files of this run's caches left
behind (listed and removed: a leftover line, exit 1); vLLM's own
/dev/shm/vllm_dist_* segments of this run's TP>1 engines, left when it kills
a worker at shutdown, are removed and listed in a "#" line.

About 7 minutes on a 2-core machine (8 engines, start-up 20-70 s each);
timings are single runs on a shared machine: compare ratios within one run.
No timing is asserted.  Without vLLM: "SKIP:" and exit 77.  Smoke mode
(KVS_PERF_SMOKE=1): the "vllm_itl config" line, no engine, then "SKIP:" and
exit 77, as perf/vllm_ttft.py.
"""
import argparse
import importlib.util
import json
import math
import os
import sys
import time

import vllm_engines
from vllm_engines import BLOCK, WARMUP_TOKENS, Engine

TAG = "vllm_itl"
MODES = ("async", "hybrid", "sync")


def options(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    vllm_engines.add_model_options(p, layers=4, hidden=512, prompt_tokens=2048,
                                   intermediate_help="default 2816 x hidden / 1024",
                                   prompt_help="the loaded prefix P")
    p.add_argument("--decoders", type=int, default=4)
    p.add_argument("--decoder-prompt-tokens", type=int, default=16)
    p.add_argument("--decode-tokens", type=int, default=256,
                   help="a decoder's max_tokens (aborted when the window ends)")
    p.add_argument("--warm-steps", type=int, default=4,
                   help="decoder steps before the loader arrives")
    p.add_argument("--margin-steps", type=int, default=8,
                   help="decoder steps in the window past the loader's first token")
    p.add_argument("--baseline-steps", type=int, default=48,
                   help="no_load: decoder steps in the window")
    p.add_argument("--read-delay-ms", type=float, default=100.0,
                   help="fault_delay_us of the measuring engines: every backend "
                        "completion held this long")
    p.add_argument("--settle-s", type=float, default=1.0,
                   help="quiet before each phase (the backend writes of what came before)")
    p.add_argument("--modes", default=",".join(MODES),
                   help="kvshare_load_mode values, an engine each (each runs no_load too)")
    p.add_argument("--tp", default="1,2")
    p.add_argument("--engine-timeout", type=float, default=900.0)
    p.add_argument("--keep", action="store_true", help="keep the temp dir")
    p.add_argument("--store-extra", default="{}", metavar="JSON",
                   help="more kvshare_config keys of every engine")
    p.add_argument("--connector-extra", default="{}", metavar="JSON",
                   help="more kv_connector_extra_config keys of the measuring engines")
    return vllm_engines.parse_options(p, argv)


# -- the child: one engine ------------------------------------------------------

def serve(spec, t0):
    """The --child's engine (vllm_engines.child): its warm-up, then engine A's
    store or the measurement; the result for the parent."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    mode = {"kvshare_load_mode": spec["load_mode"]} if spec.get("load_mode") else {}
    llm = vllm_engines.open_llm(spec, vllm_engines.kv_transfer(spec, **mode))
    started = time.monotonic()
    warm = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True, detokenize=False)
    llm.generate([{"prompt_token_ids": w} for w in spec["warmup"]], warm, use_tqdm=False)
    warmed = time.monotonic()
    result = {"startup_s": started - t0, "warmup_s": warmed - started}
    if spec.get("store_prompt"):   # engine A: compute P, its blocks saved
        one = SamplingParams(max_tokens=1, temperature=0.0, detokenize=False)
        t1 = time.perf_counter()
        outs = llm.generate([{"prompt_token_ids": spec["store_prompt"]}], one, use_tqdm=False)
        result.update(ttft_s=time.perf_counter() - t1,
                      cached_tokens=outs[0].num_cached_tokens)
    else:
        result.update(drive(llm.llm_engine, spec, SamplingParams, RequestOutputKind))
    return result


def drive(eng, spec, SamplingParams, RequestOutputKind):
    """The measurement: the baseline phase (the decoders alone), then the load
    phase (fresh decoders, then the loader), each after --settle-s of quiet
    (the backend writes of what came before done)."""
    out = {}
    for phase, loader in (("no_load", None), ("load", spec.get("loader"))):
        if phase == "load" and not loader:
            break
        time.sleep(spec["settle_s"])
        out[phase] = run_phase(eng, spec, SamplingParams, RequestOutputKind, phase, loader)
    return out


def run_phase(eng, spec, SamplingParams, RequestOutputKind, phase, loader):
    """One phase, one engine step at a time: every decoder's token arrival
    times, the loader's arrival and first token (None in the no_load phase)."""
    dec = SamplingParams(max_tokens=spec["decode_tokens"], temperature=0.0, ignore_eos=True,
                         detokenize=False, output_kind=RequestOutputKind.DELTA)
    one = SamplingParams(max_tokens=1, temperature=0.0, detokenize=False,
                         output_kind=RequestOutputKind.DELTA)
    names = [f"{phase}-d{i}" for i in range(len(spec["decoders"][phase]))]
    times = {n: [] for n in names}
    done = set()
    for n, ids in zip(names, spec["decoders"][phase]):
        eng.add_request(n, {"prompt_token_ids": ids}, dec)
    t_add = t_first = t_end = None
    cached = None
    early = 0
    dec_steps = 0            # steps that gave the decoders tokens
    end_steps = None         # dec_steps at which the window ends
    empty_steps = 0          # steps that gave no decoder a token
    deadline = time.monotonic() + spec["drive_timeout_s"]
    while eng.has_unfinished_requests():
        if time.monotonic() > deadline:
            raise SystemExit(f"phase {phase} ran past {spec['drive_timeout_s']:.0f} s")
        outs = eng.step()
        now = time.perf_counter()
        got = False
        for o in outs:
            n = o.request_id
            k = sum(len(c.token_ids) for c in o.outputs)
            if n == "loader":
                if o.num_cached_tokens is not None:
                    cached = max(cached or 0, o.num_cached_tokens)
                if k and t_first is None:
                    t_first = now
                    end_steps = dec_steps + spec["margin_steps"]
                continue
            if n in times:
                times[n].extend([now] * k)
                got = got or k > 0
                if o.finished:
                    done.add(n)
        if not got:
            empty_steps += 1
            continue
        dec_steps += 1
        if t_add is None and dec_steps >= spec["warm_steps"]:
            t_add = time.perf_counter()
            if loader:
                eng.add_request("loader", {"prompt_token_ids": loader}, one)
            else:
                end_steps = dec_steps + spec["baseline_steps"]
        if t_end is None and end_steps is not None and dec_steps >= end_steps:
            t_end = now
            live = [n for n in names if n not in done]
            early = len(names) - len(live)
            if live:
                eng.abort_request(live)
    if t_end is None:   # every decoder finished before the window's end
        t_end, early = time.perf_counter(), len(done)
    return {"times": times, "t_add": t_add, "t_first": t_first, "t_end": t_end,
            "cached_tokens": cached, "done_early": early, "dec_steps": dec_steps,
            "empty_steps": empty_steps}


# -- the parent ---------------------------------------------------------------

def percentile(xs, p):
    """Nearest rank."""
    s = sorted(xs)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


def itls(r):
    """The decoders' ITLs (s) in the window: gaps between consecutive tokens
    of a decoder whose later token arrived in (t_add, t_end]."""
    out = []
    for ts in r["times"].values():
        out += [b - a for a, b in zip(ts, ts[1:]) if r["t_add"] < b <= r["t_end"]]
    return out


class Run(vllm_engines.Run):
    def __init__(self, o):
        super().__init__(o, __file__, TAG, "itl")
        self.modes = [m for m in o.modes.split(",") if m.strip()]
        self.tok = vllm_engines.tokens(2048, o.vocab)
        self.prefix = self.tok(o.prompt_tokens)
        self.full_blocks = o.prompt_tokens // BLOCK
        self.shard_bytes = 2 * BLOCK * o.head_dim * 4 * o.layers   # a head, every layer
        self.spb = o.kv_heads
        max_model_len = o.prompt_tokens + o.suffix_tokens + 64
        dec_len = o.decoder_prompt_tokens + o.decode_tokens
        # vLLM's blocks per rank (TP=1: the most bytes a block): the loader,
        # the decoders, the warm-up, + 8
        vllm_blocks = (math.ceil(max_model_len / BLOCK)
                       + o.decoders * (math.ceil(dec_len / BLOCK)
                                       + math.ceil(WARMUP_TOKENS / BLOCK)) + 8)
        self.kv_bytes = vllm_blocks * self.spb * self.shard_bytes
        # the shared cache: what one engine stores or loads (P, the loader's
        # suffix, the decoders, the warm-ups), x 1.5
        node_blocks = vllm_blocks + self.full_blocks
        self.cache_gb = round(node_blocks * self.spb * self.shard_bytes * 1.5 / 2**30 + 0.02, 3)
        self.write_model(max_model_len, self.kv_bytes)

    def engine(self, name, tp, store, uid, **spec):
        o = self.o
        spec.update(tp=tp, unique_id=uid,
                    # unrelated prompts of its own: nothing of them stored before
                    warmup=[self.tok(WARMUP_TOKENS) for _ in range(o.decoders)],
                    kvshare_config={"cache_buffer_capacity_gb": self.cache_gb, **store,
                                    **json.loads(o.store_extra)})
        return Engine(self, name, spec)

    def measure(self, name, tp, store, uid, mode):
        o = self.o
        spec = {"load_mode": mode, "connector_extra": json.loads(o.connector_extra),
                "decoders": {ph: [self.tok(o.decoder_prompt_tokens) for _ in range(o.decoders)]
                             for ph in ("no_load", "load")},
                "loader": self.prefix + self.tok(o.suffix_tokens),   # a suffix of its own
                "decode_tokens": o.decode_tokens, "warm_steps": o.warm_steps,
                "margin_steps": o.margin_steps, "baseline_steps": o.baseline_steps,
                "settle_s": o.settle_s, "drive_timeout_s": o.engine_timeout}
        return self.engine(name, tp, store, uid, **spec).wait()

    def itl_fields(self, phases):
        """The decoders' ITL fields of one or more phases (pooled), in ms."""
        xs = [x * 1e3 for ph in phases for x in itls(ph)]
        if xs:
            f = (f"itl_p50_ms={percentile(xs, 50):.1f} itl_p99_ms={percentile(xs, 99):.1f} "
                 f"itl_max_ms={max(xs):.1f} ")
        else:
            f = "itl_p50_ms=na itl_p99_ms=na itl_max_ms=na "
        f += (f"itl_samples={len(xs)} window_ms="
              + ",".join(f"{(ph['t_end'] - ph['t_add']) * 1e3:.0f}" for ph in phases)
              + " window_steps="
              + ",".join(str(ph["dec_steps"] - self.o.warm_steps) for ph in phases) + " ")
        stats = {"p50": percentile(xs, 50) if xs else None,
                 "p99": percentile(xs, 99) if xs else None}
        return f, stats

    def early(self, tp, mode, ph, f):
        if ph["done_early"]:
            self.flags.append((f"tp={tp} mode={mode}",
                               f"{ph['done_early']} decoders finished before the window "
                               f"ended (raise --decode-tokens)"))
            return f + " FLAG=decoders_done_early"
        return f

    def line(self, tp, mode, r):
        """A load mode's line: its engine's load phase."""
        o = self.o
        ph = r["load"]
        expected = self.full_blocks * BLOCK
        f, stats = self.itl_fields([ph])
        _, own = self.itl_fields([r["no_load"]])
        ttft = (ph["t_first"] - ph["t_add"]) * 1e3 if ph["t_first"] is not None else None
        cached = ph["cached_tokens"]
        hit = int(cached is not None and cached >= expected and r["load_errors_logged"] == 0)
        f = (f"{TAG} tp={tp} mode={mode} decoders={o.decoders} {f}"
             f"loader_ttft_ms={'na' if ttft is None else f'{ttft:.0f}'} "
             f"cached_tokens={'na' if cached is None else cached} "
             f"expected_cached={expected} hit={hit} read_delay_ms={o.read_delay_ms:g} "
             f"engine_no_load_p99_ms="
             f"{'na' if own['p99'] is None else format(own['p99'], '.1f')} "
             f"startup_s={r['startup_s']:.1f} engine_wall_s={r['wall_s']:.1f} "
             f"load_errors_logged={r['load_errors_logged']}")
        if not hit:
            f += " FLAG=no_hit"
            self.flags.append((f"tp={tp} mode={mode}",
                               f"no full hit: cached_tokens={cached} < {expected}"
                               if (cached or 0) < expected else
                               f"no full hit: {r['load_errors_logged']} load errors logged"))
        print(self.early(tp, mode, ph, f), flush=True)
        return {**stats, "ttft": ttft}

    def no_load_line(self, tp, runs):
        """The baseline: every measuring engine's no_load phase, pooled."""
        o = self.o
        phases = [r["no_load"] for r in runs.values()]
        f, stats = self.itl_fields(phases)
        f = (f"{TAG} tp={tp} mode=no_load decoders={o.decoders} {f}"
             f"loader_ttft_ms=na cached_tokens=na expected_cached=na hit=na "
             f"read_delay_ms={o.read_delay_ms:g} engines={','.join(runs)}")
        for ph in phases:
            f = self.early(tp, "no_load", ph, f)
        print(f, flush=True)
        return stats

    def single(self, tp):
        o = self.o
        root = os.path.join(self.tmp, f"posix-tp{tp}")
        os.makedirs(root)
        posix = {"backend": "posix", "fsync": 0, "backend_roots": root}
        slow = {**posix, "fault_delay_us": int(o.read_delay_ms * 1000)}
        uid = f"{self.uid}-tp{tp}"
        a = self.engine(f"tp{tp}-a-store", tp, posix, uid, store_prompt=self.prefix).wait()
        print(f"{TAG} tp={tp} mode=store ttft_s={a['ttft_s']:.3f} "
              f"cached_tokens={a['cached_tokens']} prompt_tokens={o.prompt_tokens} "
              f"startup_s={a['startup_s']:.1f} engine_wall_s={a['wall_s']:.1f} "
              f"load_errors_logged={a['load_errors_logged']}", flush=True)
        runs, res = {}, {}
        for mode in self.modes:
            runs[mode] = self.measure(f"tp{tp}-{mode}", tp, slow, uid, mode)
            res[mode] = self.line(tp, mode, runs[mode])
        base = res["no_load"] = self.no_load_line(tp, runs)

        def ratio(a, b, what):
            x, y = res.get(a, {}).get(what), res.get(b, {}).get(what)
            return f"{x / y:.2f}" if x is not None and y else "na"
        step = base["p50"]
        fields = [f"{m}_p99/no_load_p99={ratio(m, 'no_load', 'p99')}" for m in MODES]
        fields += [f"{m}_ttft/sync_ttft={ratio(m, 'sync', 'ttft')}" for m in MODES
                   if m != "sync"]
        at, st = res.get("async", {}).get("ttft"), res.get("sync", {}).get("ttft")
        ap = res.get("async", {}).get("p99")
        fields.append(f"async_ttft-sync_ttft_ms={at - st:.0f}" if at is not None
                      and st is not None else "async_ttft-sync_ttft_ms=na")
        fields.append(f"step_ms={step:.1f}" if step is not None else "step_ms=na")
        fields.append(f"target_p99_1.2x={int(ap <= 1.2 * base['p99'])}"
                      if ap is not None and base["p99"] else "target_p99_1.2x=na")
        fields.append(f"target_ttft_sync+step={int(at <= st + step)}"
                      if None not in (at, st, step) else "target_ttft_sync+step=na")
        print(f"{TAG} tp={tp} ratio " + " ".join(fields), flush=True)


def main(argv):
    o = options(argv)
    if o.child:
        return vllm_engines.child(*o.child, serve)
    tps = [int(t) for t in o.tp.split(",") if t.strip()]
    modes = [m for m in o.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES] or not modes
    if (o.prompt_tokens < BLOCK or o.hidden % o.heads or o.heads % o.kv_heads or bad
            or o.decoders < 1 or o.decoder_prompt_tokens < 1 or o.warm_steps < 1):
        print(f"{TAG}: need --prompt-tokens >= {BLOCK}, hidden % heads == 0, heads % "
              f"kv-heads == 0, --modes of {','.join(MODES)}, --decoders, "
              f"--decoder-prompt-tokens and --warm-steps >= 1", file=sys.stderr)
        return 2
    run = Run(o)
    if not os.path.exists(run.lib):
        run.close()
        print(f"{TAG}: no library at {run.lib} (make, or set KVSHARE_LIBRARY)",
              file=sys.stderr)
        return 1
    run.config_line(
        f"decoders={o.decoders} decoder_prompt_tokens={o.decoder_prompt_tokens} "
        f"decode_tokens={o.decode_tokens} warm_steps={o.warm_steps} "
        f"margin_steps={o.margin_steps} baseline_steps={o.baseline_steps} "
        f"settle_s={o.settle_s:g} read_delay_ms={o.read_delay_ms:g} "
        f"modes={','.join(run.modes)} ",
        f"prefix_shards={run.full_blocks * run.spb} ")
    if run.smoke("20-65 s"):
        return 77
    if importlib.util.find_spec("vllm") is None:
        run.close()
        print(f"SKIP: {TAG}: no vllm in {sys.executable} (the venv: "
              f"python/vllm-env/env.sh prints its path)", flush=True)
        return 77

    def body():
        for tp in tps:
            run.single(tp)
    return run.execute(body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
