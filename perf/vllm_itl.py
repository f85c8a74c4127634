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
  store:    engine A computes --rounds prompts P_i (--prompt-tokens each) and
            stores them, then exits, its shared cache with it: every later
            load of a P_i is an owner read of A's block files;
  async, hybrid, sync:  an engine each (--modes), kv_connector_extra_config
            kvshare_load_mode=<mode>, fault_delay_us = --read-delay-ms in its
            kvshare_config (every backend completion, its reads and its own
            writes, held that long: a slow backend).
"hybrid" (the connector's default) loads in the step only blocks resident in
the node's cache, and P's are not: it behaves as "async" here, as its line
shows.

Each measuring engine, after start-up and a warm-up (--decoders unrelated
prompts of 2 blocks + 8 tokens, 4 tokens each), runs --rounds rounds of three
phases, each phase after --settle-s of quiet; the child drives vLLM step by
step (llm.llm_engine.add_request / step(), output_kind DELTA) and takes
time.perf_counter() when a step returns, for each request it gave a token:
  no_load:  --decoders requests of --decoder-prompt-tokens (under a block:
            nothing of theirs is looked up or loaded) decode greedily
            (ignore_eos, at most --decode-tokens); the window runs
            --baseline-steps decoder steps from their --warm-steps'th;
  load:     fresh decoders as above; after --warm-steps steps the loader
            arrives, P_i (round i's prefix, engine A stored one a round) + a
            --suffix-tokens suffix of its own, max_tokens=1; the window runs
            from its arrival to --margin-steps decoder steps past its first
            token;
  local:    as load, the loader P_i + another suffix: P_i is now in vLLM's
            own prefix cache and nothing is loaded.  The same fifth request
            with the best source a prefix can have: its window holds the
            loader's own forward (its suffix over P_i, in the decoders'
            step), not a load.
Then the phase's decoders are aborted.  A decoder's ITLs in a window are the
gaps between its tokens whose later token arrived in it (the first spans the
window's start).  A decoder's first block fills after 32 -
--decoder-prompt-tokens generated tokens (16 by default, inside the load's
window) and is saved in that step: each window holds the decoders' saves as
well as the load.  A phase's figures are its window's p50, p99 (nearest rank
over every decoder's ITLs in it) and the loader's TTFT; a line gives the
median over the rounds (and the rounds' own, _rounds=).  The host's steal
time over each window (/proc/stat, all CPUs, % of the window's CPU time) is
on the line too: on a shared VM the decode step changes speed for seconds at
a time (7.7 to 12 ms here, in no_load windows as well), which is why one
window proves little and the rounds alternate.  The no_load line is the
issue's baseline: the decoders alone, no fifth request, every measuring
engine's rounds pooled (engines=); the local line likewise for local.  A
mode's line has its load phases.
  vllm_itl tp=<t> mode=store ttft_s=<..> cached_tokens=<n> prompt_tokens=<n> ...
  vllm_itl tp=<t> mode=<async|hybrid|sync> decoders=<n> itl_p50_ms=<..>
           itl_p99_ms=<..> itl_p99_rounds=<..,..> itl_max_ms=<..>
           itl_samples=<n> window_ms=<..,..> steal_pct=<..,..>
           loader_ttft_ms=<..> loader_ttft_rounds=<..,..> cached_tokens=<n>
           expected_cached=<n> hit=<1|0> read_delay_ms=<..>
           startup_s=<..> engine_wall_s=<..> load_errors_logged=<n>
           [FLAG=no_hit] [FLAG=decoders_done_early]
  vllm_itl tp=<t> mode=<no_load|local> decoders=<n> itl_p50_ms=<..> ... (the
           ITL, window, steal and TTFT fields above; loader_ttft_ms=na for
           no_load) read_delay_ms=<..> engines=<modes>
  vllm_itl tp=<t> ratio async_p99/no_load_p99=<..> ... sync_p99/no_load_p99=<..>
           async_p99/local_p99=<..> ... async_ttft/sync_ttft=<..>
           hybrid_ttft/sync_ttft=<..> async_ttft-sync_ttft_ms=<..>
           async_ttft-local_ttft_ms=<..> step_ms=<..> target_p99_1.2x=<1|0>
           target_p99_1.2x_local=<1|0> target_ttft_sync+step=<1|0>
(step_ms: the no_load p50 ITL, one decode step; the targets are issue 39's
-- async p99 ITL <= 1.2 x no_load's, async TTFT <= sync TTFT + one step --
and the p99 against local's, the same request served without a load;
reported, not asserted; a figure of a mode not run is "na").  The loader's
TTFT runs from its add_request to the step that returned its token.
cached_tokens is vLLM's num_cached_tokens of the loader (the least over the
rounds), expected_cached P's full blocks x block size: less, or a load error
in the engine's log ("blocks are recomputed", "not submitted"), is hit=0,
FLAG=no_hit on the line and a "# vllm_itl FLAG" line at the end; a decoder
that finished before its window ended (raise --decode-tokens) is
FLAG=decoders_done_early.  Neither fails the script.

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

About 9 minutes on a 2-core machine (8 engines, start-up 20-70 s each);
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
import statistics
import sys
import time

import vllm_engines
from vllm_engines import BLOCK, WARMUP_TOKENS, Engine

TAG = "vllm_itl"
MODES = ("async", "hybrid", "sync")
PHASES = ("no_load", "load", "local")     # a round's, in this order


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
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds of no_load, load and local phases an engine runs, a "
                        "prefix P_i each")
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
    if spec.get("store_prompts"):   # engine A: compute each P_i, its blocks saved
        one = SamplingParams(max_tokens=1, temperature=0.0, detokenize=False)
        ttfts, cached = [], []
        for prompt in spec["store_prompts"]:
            t1 = time.perf_counter()
            outs = llm.generate([{"prompt_token_ids": prompt}], one, use_tqdm=False)
            ttfts.append(time.perf_counter() - t1)
            cached.append(outs[0].num_cached_tokens)
        result.update(ttft_s=ttfts, cached_tokens=cached)
    else:
        result.update(drive(llm.llm_engine, spec, SamplingParams, RequestOutputKind))
    return result


def drive(eng, spec, SamplingParams, RequestOutputKind):
    """The measurement: each round's phases in PHASES order -- the decoders
    alone, then fresh decoders and the loader of P_i, then fresh decoders and
    P_i again with another suffix (a local prefix hit) -- each after
    --settle-s of quiet (the backend writes of what came before done)."""
    rounds = []
    for i, rnd in enumerate(spec["rounds"]):
        out = {}
        for phase in PHASES:
            time.sleep(spec["settle_s"])
            out[phase] = run_phase(eng, spec, SamplingParams, RequestOutputKind,
                                   f"{phase}{i}", rnd["decoders"][phase], rnd.get(phase))
        rounds.append(out)
    return {"rounds": rounds}


def steal_s():
    """The host's steal time so far, every CPU (s): /proc/stat's 8th field."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return int(fields[8]) / os.sysconf("SC_CLK_TCK")


def run_phase(eng, spec, SamplingParams, RequestOutputKind, phase, decoders, loader):
    """One phase, one engine step at a time: every decoder's token arrival
    times, the loader's arrival and first token (None without a loader), the
    host's steal time over the window."""
    dec = SamplingParams(max_tokens=spec["decode_tokens"], temperature=0.0, ignore_eos=True,
                         detokenize=False, output_kind=RequestOutputKind.DELTA)
    one = SamplingParams(max_tokens=1, temperature=0.0, detokenize=False,
                         output_kind=RequestOutputKind.DELTA)
    names = [f"{phase}-d{i}" for i in range(len(decoders))]
    loader_id = f"{phase}-loader"
    times = {n: [] for n in names}
    done = set()
    for n, ids in zip(names, decoders):
        eng.add_request(n, {"prompt_token_ids": ids}, dec)
    t_add = t_first = t_end = steal_add = steal_end = None
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
            if n == loader_id:
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
            steal_add, t_add = steal_s(), time.perf_counter()
            if loader:
                eng.add_request(loader_id, {"prompt_token_ids": loader}, one)
            else:
                end_steps = dec_steps + spec["baseline_steps"]
        if t_end is None and end_steps is not None and dec_steps >= end_steps:
            t_end, steal_end = now, steal_s()
            live = [n for n in names if n not in done]
            early = len(names) - len(live)
            if live:
                eng.abort_request(live)
    if t_end is None:   # every decoder finished before the window's end
        t_end, steal_end, early = time.perf_counter(), steal_s(), len(done)
    return {"times": times, "t_add": t_add, "t_first": t_first, "t_end": t_end,
            "cached_tokens": cached, "done_early": early, "dec_steps": dec_steps,
            "empty_steps": empty_steps, "steal_s": steal_end - steal_add}


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


def fmt(x, spec=".1f"):
    return "na" if x is None else format(x, spec)


class Run(vllm_engines.Run):
    def __init__(self, o):
        super().__init__(o, __file__, TAG, "itl")
        self.modes = [m for m in o.modes.split(",") if m.strip()]
        self.tok = vllm_engines.tokens(2048, o.vocab)
        self.prefixes = [self.tok(o.prompt_tokens) for _ in range(o.rounds)]
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
        # the shared cache: what one engine stores or loads (a P_i, the
        # loader's suffix, the decoders, the warm-ups), x 1.5
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
        rounds = [{"decoders": {ph: [self.tok(o.decoder_prompt_tokens)
                                     for _ in range(o.decoders)] for ph in PHASES},
                   "load": p + self.tok(o.suffix_tokens),     # a suffix of its own
                   "local": p + self.tok(o.suffix_tokens)}    # and another
                  for p in self.prefixes]
        spec = {"load_mode": mode, "connector_extra": json.loads(o.connector_extra),
                "rounds": rounds, "decode_tokens": o.decode_tokens,
                "warm_steps": o.warm_steps, "margin_steps": o.margin_steps,
                "baseline_steps": o.baseline_steps, "settle_s": o.settle_s,
                "drive_timeout_s": o.engine_timeout}
        return self.engine(name, tp, store, uid, **spec).wait()

    def fields(self, tp, mode, phases):
        """A line's figures over phases (windows, each its own p50/p99 and
        TTFT; the medians over them): its text, and {p50, p99, ttft} (ms)."""
        per = []
        for ph in phases:
            xs = [x * 1e3 for x in itls(ph)]
            ttft = (ph["t_first"] - ph["t_add"]) * 1e3 if ph["t_first"] is not None else None
            per.append({"p50": percentile(xs, 50) if xs else None,
                        "p99": percentile(xs, 99) if xs else None,
                        "max": max(xs) if xs else None, "n": len(xs), "ttft": ttft,
                        "window": (ph["t_end"] - ph["t_add"]) * 1e3,
                        "steal": 100 * ph["steal_s"] / (os.cpu_count()
                                                        * (ph["t_end"] - ph["t_add"]))})
        stats = {k: statistics.median_low([w[k] for w in per])
                 if all(w[k] is not None for w in per) else None
                 for k in ("p50", "p99", "ttft")}

        def rounds(k, spec=".1f"):
            return ",".join(fmt(w[k], spec) for w in per)
        top = max((w["max"] for w in per if w["max"] is not None), default=None)
        f = (f"itl_p50_ms={fmt(stats['p50'])} itl_p99_ms={fmt(stats['p99'])} "
             f"itl_p99_rounds={rounds('p99')} itl_max_ms={fmt(top)} "
             f"itl_samples={sum(w['n'] for w in per)} window_ms={rounds('window', '.0f')} "
             f"steal_pct={rounds('steal', '.0f')} loader_ttft_ms={fmt(stats['ttft'], '.0f')} "
             f"loader_ttft_rounds={rounds('ttft', '.0f')}")
        for ph in phases:
            if ph["done_early"]:
                self.flags.append((f"tp={tp} mode={mode}",
                                   f"{ph['done_early']} decoders finished before the "
                                   f"window ended (raise --decode-tokens)"))
                f += " FLAG=decoders_done_early"
                break
        return f, stats

    def line(self, tp, mode, r):
        """A load mode's line: its engine's load phases."""
        o = self.o
        phases = [rnd["load"] for rnd in r["rounds"]]
        expected = self.full_blocks * BLOCK
        f, stats = self.fields(tp, mode, phases)
        cached = [ph["cached_tokens"] for ph in phases]
        least = None if None in cached else min(cached)
        hit = int(least is not None and least >= expected and r["load_errors_logged"] == 0)
        f = (f"{TAG} tp={tp} mode={mode} decoders={o.decoders} {f} "
             f"cached_tokens={fmt(least, 'd')} expected_cached={expected} hit={hit} "
             f"read_delay_ms={o.read_delay_ms:g} startup_s={r['startup_s']:.1f} "
             f"engine_wall_s={r['wall_s']:.1f} load_errors_logged={r['load_errors_logged']}")
        if not hit:
            f += " FLAG=no_hit"
            self.flags.append((f"tp={tp} mode={mode}",
                               f"no full hit: cached_tokens={least} < {expected}"
                               if (least or 0) < expected else
                               f"no full hit: {r['load_errors_logged']} load errors logged"))
        print(f, flush=True)
        return stats

    def pooled_line(self, tp, phase, runs):
        """A baseline's line: that phase of every measuring engine's rounds."""
        o = self.o
        phases = [rnd[phase] for r in runs.values() for rnd in r["rounds"]]
        f, stats = self.fields(tp, phase, phases)
        print(f"{TAG} tp={tp} mode={phase} decoders={o.decoders} {f} "
              f"read_delay_ms={o.read_delay_ms:g} engines={','.join(runs)}", flush=True)
        return stats

    def single(self, tp):
        o = self.o
        root = os.path.join(self.tmp, f"posix-tp{tp}")
        os.makedirs(root)
        posix = {"backend": "posix", "fsync": 0, "backend_roots": root}
        slow = {**posix, "fault_delay_us": int(o.read_delay_ms * 1000)}
        uid = f"{self.uid}-tp{tp}"
        a = self.engine(f"tp{tp}-a-store", tp, posix, uid, store_prompts=self.prefixes).wait()
        print(f"{TAG} tp={tp} mode=store ttft_s={statistics.median_low(a['ttft_s']):.3f} "
              f"cached_tokens={max(a['cached_tokens'])} prompt_tokens={o.prompt_tokens} "
              f"prompts={len(self.prefixes)} startup_s={a['startup_s']:.1f} "
              f"engine_wall_s={a['wall_s']:.1f} load_errors_logged={a['load_errors_logged']}",
              flush=True)
        runs, res = {}, {}
        for mode in self.modes:
            runs[mode] = self.measure(f"tp{tp}-{mode}", tp, slow, uid, mode)
            res[mode] = self.line(tp, mode, runs[mode])
        base = res["no_load"] = self.pooled_line(tp, "no_load", runs)
        local = res["local"] = self.pooled_line(tp, "local", runs)

        def ratio(a, b, what):
            x, y = res.get(a, {}).get(what), res.get(b, {}).get(what)
            return f"{x / y:.2f}" if x is not None and y else "na"

        def diff(a, b, what):
            x, y = res.get(a, {}).get(what), res.get(b, {}).get(what)
            return f"{x - y:.0f}" if x is not None and y is not None else "na"
        step = base["p50"]
        at, st = res.get("async", {}).get("ttft"), res.get("sync", {}).get("ttft")
        ap = res.get("async", {}).get("p99")
        fields = [f"{m}_p99/{b}_p99={ratio(m, b, 'p99')}" for b in ("no_load", "local")
                  for m in MODES]
        fields += [f"{m}_ttft/sync_ttft={ratio(m, 'sync', 'ttft')}" for m in MODES
                   if m != "sync"]
        fields += [f"async_ttft-sync_ttft_ms={diff('async', 'sync', 'ttft')}",
                   f"async_ttft-local_ttft_ms={diff('async', 'local', 'ttft')}",
                   f"step_ms={fmt(step)}"]
        fields.append(f"target_p99_1.2x={int(ap <= 1.2 * base['p99'])}"
                      if ap is not None and base["p99"] else "target_p99_1.2x=na")
        fields.append(f"target_p99_1.2x_local={int(ap <= 1.2 * local['p99'])}"
                      if ap is not None and local["p99"] else "target_p99_1.2x_local=na")
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
            or o.decoders < 1 or o.decoder_prompt_tokens < 1 or o.warm_steps < 1
            or o.rounds < 1):
        print(f"{TAG}: need --prompt-tokens >= {BLOCK}, hidden % heads == 0, heads % "
              f"kv-heads == 0, --modes of {','.join(MODES)}, --decoders, "
              f"--decoder-prompt-tokens, --warm-steps and --rounds >= 1", file=sys.stderr)
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
        f"rounds={o.rounds} settle_s={o.settle_s:g} read_delay_ms={o.read_delay_ms:g} "
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
