#!/usr/bin/env python3
"""perf/python_load.py [builddir] [options] -- a block set loaded from a warm
shared cache, driven from Python through the binding (python/kvshare) and from
C (perf/store_load_bench.c says how the workload runs), in the same run, same
workload, per variant and per task size:

  store_load driver=c variant=<v> mode=<block|shard> ... tasks=<n> seconds=<s> gib_per_s=<..> tasks_per_s=<..>
  store_load driver=python variant=<v> mode=<..> tensor=<torch|numpy> ... (the same fields)
  store_load_ratio variant=<v> mode=<..> python_over_c_tasks_per_s=<..>

mode block: one task per block (all its shards); mode shard: one task per
shard, the binding's worst case (its per-task cost against the smallest task).
Each driver runs in its own process (a process loads one libkvshare.so.1);
the Python one is this script with --driver, under KVSHARE_LIBRARY.  The two
drivers run alternately --repeat times and each one's best run (most tasks
per second) is printed: on a shared machine the best is the least disturbed.
Exit 1 if a run fails.  Options: --blocks 128 --spb 8 --shard-kib 64
--tensors 2 --rounds 20 --window 8 --repeat 3 --tensor torch|numpy.  About
40 s on an idle 2-core machine.  Neither torch nor numpy importable: "SKIP:"
and exit 77.

Smoke mode (KVS_PERF_SMOKE=1; the perf.python_load CTest entry,
tests/perf_smoke.sh): every driver, mode and line as above with --blocks 8
--rounds 2 --repeat 1 as the defaults (options given still win).  About 2 s.
"""
import argparse
import importlib.util
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def options(argv):
    smoke = os.environ.get("KVS_PERF_SMOKE") == "1"
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("builddir", nargs="?", default=os.path.join(ROOT, "build"))
    p.add_argument("--blocks", type=int, default=8 if smoke else 128)
    p.add_argument("--spb", type=int, default=8)
    p.add_argument("--shard-kib", type=int, default=64)
    p.add_argument("--tensors", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2 if smoke else 20)
    p.add_argument("--repeat", type=int, default=1 if smoke else 3)
    p.add_argument("--window", type=int, default=8)
    p.add_argument("--tensor", choices=["torch", "numpy"], default=None)
    p.add_argument("--driver", nargs=2, metavar=("UNIQUE_ID", "MODE"), help=argparse.SUPPRESS)
    return p.parse_args(argv)


def drive(o):
    """The Python side: store_load_bench's workload through the binding."""
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import kvshare
    uid, mode = o.driver
    shard = o.shard_kib * 1024
    if o.tensor == "numpy":
        import numpy as np
        dst = np.zeros((o.blocks, o.spb, shard), np.uint8)
    else:
        import torch
        dst = torch.zeros((o.blocks, o.spb, shard), dtype=torch.uint8)
    cfg = {"unique_id": uid, "device_id": 0, "shard_size": shard, "block_size": shard * o.spb,
           "tensor_size": shard // o.tensors, "backend": "latency", "latency_us": 0,
           "copy_engine": "host", "hugetlb": "off", "waiting_queue_depth": o.window,
           "cache_buffer_capacity_gb": f"{shard * o.spb * o.blocks / 2**30 * 1.01:.6f}"}
    if mode == "block":  # one tensor per block, split by the binding
        work = [((i + 1,), (dst[i].reshape(-1),), None) for i in range(o.blocks)]
    else:
        work = [((i + 1,), (dst[i, s],), s) for i in range(o.blocks) for s in range(o.spb)]
    with kvshare.Store(cfg) as s:
        def one_round():
            inflight = []
            for ids, tensors, sh in work:
                if len(inflight) == o.window:
                    inflight.pop(0).wait(60)
                inflight.append(s.load(ids, tensors, shard=sh))
            for t in inflight:
                t.wait(60)
        one_round()  # fill the cache
        t0 = time.monotonic_ns()
        for _ in range(o.rounds):
            one_round()
        sec = (time.monotonic_ns() - t0) / 1e9
        tasks = o.rounds * len(work)
        nbytes = o.rounds * o.blocks * o.spb * shard
        print(f"store_load driver=python variant={kvshare.variant()} mode={mode} "
              f"tensor={o.tensor} blocks={o.blocks} shards_per_block={o.spb} "
              f"shard_bytes={shard} tensors_per_shard={o.tensors} rounds={o.rounds} "
              f"window={o.window} tasks={tasks} seconds={sec:.4f} "
              f"gib_per_s={nbytes / sec / 2**30:.3f} tasks_per_s={tasks / sec:.0f}")


def field(line, key):
    for kv in line.split():
        if kv.startswith(key + "="):
            return kv.split("=", 1)[1]
    raise KeyError(key)


def main(argv):
    o = options(argv)
    if o.tensor is None:
        o.tensor = "torch" if importlib.util.find_spec("torch") else "numpy"
    if not importlib.util.find_spec(o.tensor):
        print(f"SKIP: python_load: {sys.executable} has no {o.tensor} "
              f"(apt-get install python3-{o.tensor})")
        return 77
    if o.driver:
        drive(o)
        return 0
    common = [str(o.blocks), str(o.spb), str(o.shard_kib), str(o.tensors), str(o.rounds),
              str(o.window)]
    rc = 0
    for variant, libdir in (("kernel", "lib"), ("plain", "plain/lib")):
        bench = os.path.join(o.builddir, variant, "perf", "store_load_bench")
        lib = os.path.join(o.builddir, libdir, "libkvshare.so.1")
        if not (os.path.exists(bench) and os.path.exists(lib)):
            print(f"python_load: {bench} or {lib} missing (cmake --build {o.builddir}); "
                  f"no {variant} lines", file=sys.stderr)
            continue
        for mode in ("block", "shard"):
            uid = f"perf.pyload.{variant}.{mode}.{os.getpid()}"
            cmds = {"c": ([bench, uid + ".c", mode] + common, None),
                    "python": ([sys.executable, __file__, "--driver", uid + ".py", mode,
                                "--tensor", o.tensor, "--blocks", str(o.blocks), "--spb",
                                str(o.spb), "--shard-kib", str(o.shard_kib), "--tensors",
                                str(o.tensors), "--rounds", str(o.rounds), "--window",
                                str(o.window)], dict(os.environ, KVSHARE_LIBRARY=lib))}
            best = {}
            for _ in range(o.repeat):
                for driver, (cmd, env) in cmds.items():
                    run = subprocess.run(cmd, capture_output=True, text=True, env=env)
                    sys.stderr.write(run.stderr)
                    if run.returncode:
                        sys.stdout.write(run.stdout)
                        rc = 1
                        continue
                    if (driver not in best or float(field(run.stdout, "tasks_per_s")) >
                            float(field(best[driver], "tasks_per_s"))):
                        best[driver] = run.stdout
            if len(best) != 2:
                continue
            sys.stdout.write(best["c"] + best["python"])
            ratio = (float(field(best["python"], "tasks_per_s")) /
                     float(field(best["c"], "tasks_per_s")))
            print(f"store_load_ratio variant={variant} mode={mode} "
                  f"python_over_c_tasks_per_s={ratio:.3f}", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
