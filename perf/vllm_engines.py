"""perf/vllm_engines.py -- what perf/vllm_ttft.py and perf/vllm_itl.py share:
real vLLM engines (CPU, vLLM 0.32, dummy weights), each its own process, run
and cleaned up after.  Not a script: both import it (perf/ is on sys.path when
Python runs a perf/ script, in the parent and in the --child it re-executes).

The process model: a script's parent makes a Run (a temp dir holding the
model's config.json, each engine's spec, log and result; the children's
environment), then an Engine per child, which re-executes the script as
`SCRIPT --child SPEC.json OUT.json` in a session of its own.  The script's
main() hands --child to child() with its own serve(spec, t0); serve builds the
engine with open_llm() (kv_transfer() for the connector's config), measures, and
returns the result child() writes to OUT.json.  Engine.wait() reads it back,
with the child's wall time and the errors its log shows, after its workers
are gone.

What a run may leave behind, and how it is checked: the engines' processes
(Engine.kill: the child's session, killed); kvshare's segments of this run's
caches in /dev/shm and /dev/hugepages (Run.execute: a "leftover" line, removed,
exit 1); vLLM's /dev/shm/vllm_dist_* segments of this run's engines (its TP>1
CPU shm communicator, left when vLLM kills a worker at shutdown: noted by
Engine.scan, removed by Engine.kill, listed in a "#" line).

The model: a config.json only (load_format dummy, no tokenizer), a Llama of
the scripts' --layers, --hidden, --heads, --head-dim, --kv-heads,
--intermediate and --vocab (add_model_options), float32, block_size BLOCK.
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BLOCK = 32                        # the CPU attention backend needs a multiple of 32
WARMUP_TOKENS = 2 * BLOCK + 8     # two full blocks (the save path runs too) + 8


# -- options --------------------------------------------------------------------

def add_model_options(p, layers, hidden, prompt_tokens, intermediate_help,
                      prompt_help=None):
    """The model's options and the prompt's, with a script's defaults."""
    p.add_argument("--layers", type=int, default=layers)
    p.add_argument("--hidden", type=int, default=hidden)
    p.add_argument("--heads", type=int, default=8, help="attention heads")
    p.add_argument("--head-dim", type=int, default=None, help="default hidden / heads")
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--intermediate", type=int, default=None, help=intermediate_help)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--prompt-tokens", type=int, default=prompt_tokens, help=prompt_help)
    p.add_argument("--suffix-tokens", type=int, default=32)


def parse_options(p, argv):
    """Parse, with the hidden --child SPEC OUT of the re-executed script; the
    model's derived defaults filled in."""
    p.add_argument("--child", nargs=2, metavar=("SPEC", "OUT"), help=argparse.SUPPRESS)
    o = p.parse_args(argv)
    if o.head_dim is None:
        o.head_dim = o.hidden // o.heads
    if o.intermediate is None:
        o.intermediate = 2816 * o.hidden // 1024
    return o


# -- the child: one engine ------------------------------------------------------

def child(spec_path, out_path, serve):
    """The --child side: serve(spec, t0) builds the engine, measures and
    returns the result, written to out_path for the parent.  Returns 0."""
    t0 = time.monotonic()
    with open(spec_path) as f:
        spec = json.load(f)
    result = serve(spec, t0)
    with open(out_path, "w") as f:
        json.dump(result, f)
    return 0


def kv_transfer(spec, connector="KVShareConnector", module="kvshare.vllm", **extra):
    """kv_transfer_config of kvshare's connector (or a subclass of it, loaded
    from module), kv_both: the spec's kvshare_config and unique_id, its
    connector_extra keys and extra in kv_connector_extra_config."""
    config = {**spec.get("connector_extra", {}), "kvshare_config": spec["kvshare_config"],
              "kvshare_unique_id": spec["unique_id"], **extra}
    return {"kv_connector": connector, "kv_connector_module_path": module,
            "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
            "kv_connector_extra_config": config}


def open_llm(spec, transfer):
    """The spec's engine: the dummy model, float32, eager, prefix caching on;
    max_num_batched_tokens the spec's batch_tokens, else max_model_len (one
    prefill step)."""
    from vllm import LLM
    return LLM(model=spec["model"], load_format="dummy", skip_tokenizer_init=True,
               enforce_eager=True, dtype="float32", block_size=BLOCK,
               max_model_len=spec["max_model_len"],
               max_num_batched_tokens=spec.get("batch_tokens") or spec["max_model_len"],
               kv_cache_memory_bytes=spec["kv_cache_memory_bytes"],
               tensor_parallel_size=spec["tp"], enable_prefix_caching=True, seed=0,
               kv_transfer_config=transfer)


# -- the parent ---------------------------------------------------------------

def tokens(seed, vocab):
    """tok(n): n token ids of a fixed stream from seed, uniform over 3 up to
    vocab (past the special ids)."""
    rng = random.Random(seed)
    return lambda n: [rng.randrange(3, vocab) for _ in range(n)]


class EngineFailed(Exception):
    pass


def log_tail(path, n=60):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError as e:
        return f"(no log: {e})\n"


class Engine:
    """One child engine process (its own session: its engine core and workers
    die with it), the script re-executed with --child; env: more of its
    environment than the run's."""

    def __init__(self, run, name, spec, env=None):
        self.name, self.run = name, run
        d = run.tmp
        self.spec_path = os.path.join(d, f"{name}.json")
        self.out = os.path.join(d, f"{name}.out")
        self.log = os.path.join(d, f"{name}.log")
        spec = {"name": name, **run.engine_base, **spec}
        with open(self.spec_path, "w") as f:
            json.dump(spec, f)
        env = {**run.env, **(env or {})}
        if spec["tp"] > 1:
            env["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(
                str(c % os.cpu_count()) for c in range(spec["tp"]))
        self.t0 = time.monotonic()
        self.shm, self.next_scan = set(), 0.0
        with open(self.log, "w") as logf:
            self.proc = subprocess.Popen(
                [sys.executable, run.script, "--child", self.spec_path,
                 self.out], env=env, stdout=logf, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True)
        run.engines.append(self)

    def session(self):
        """Pids of the processes still in the child's session (its engine core,
        its workers)."""
        out = []
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/stat") as f:
                        st = f.read().rsplit(")", 1)[1].split()
                except (OSError, IndexError):
                    continue
                if int(st[3]) == self.proc.pid:   # session id
                    out.append(int(d))
        return out

    def settle(self, grace=30.0):
        """Let the child's workers exit by themselves (a worker killed mid-exit
        leaves vLLM's /dev/shm/vllm_dist_* segments behind), then kill the rest."""
        deadline = time.monotonic() + grace
        while self.session() and time.monotonic() < deadline:
            time.sleep(0.1)
        self.kill()

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        for pid in self.session():  # its engine core / workers, should any outlive it
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for path in self.shm:  # vLLM's segments of this engine, should any be left
            try:
                os.unlink(path)
                self.run.vllm_shm_left.append(path)
            except OSError:
                pass
        self.shm = set()

    def failed(self, why):
        return EngineFailed(f"engine {self.name} {why}; its log's tail:\n"
                            + log_tail(self.log))

    def scan(self):
        """Note the /dev/shm/vllm_dist_* segments its processes map (vLLM's CPU
        shm communicator at TP > 1): a worker vLLM kills at shutdown leaves its
        segment behind, and these names are the ones this engine made.  At
        most every 2 s."""
        if time.monotonic() < self.next_scan:
            return
        self.next_scan = time.monotonic() + 2.0
        for pid in self.session():
            try:
                with open(f"/proc/{pid}/maps") as f:
                    for line in f:
                        i = line.find("/dev/shm/vllm_dist_")
                        if i >= 0:
                            self.shm.add(line[i:].rstrip("\n").removesuffix(" (deleted)"))
            except OSError:
                pass

    def wait(self):
        """The child's result once it exited and its session is gone, with
        wall_s, load_errors_logged (the connector's lines of blocks
        recomputed or loads not submitted) and block_writes_failed (the
        library's lines of block writes that never reached the backend)."""
        deadline = self.t0 + self.run.o.engine_timeout
        while True:
            try:
                rc = self.proc.wait(timeout=2.0)
                break
            except subprocess.TimeoutExpired:
                self.scan()
                if time.monotonic() > deadline:
                    self.kill()
                    raise self.failed(f"ran past {self.run.o.engine_timeout:.0f} s")
        self.settle()  # anything of its session left
        if rc != 0:
            raise self.failed(f"exited {rc}")
        with open(self.out) as f:
            r = json.load(f)
        r["wall_s"] = time.monotonic() - self.t0
        with open(self.log, errors="replace") as f:
            text = f.read()
        r["load_errors_logged"] = (text.count("blocks are recomputed") +
                                   text.count("not submitted"))
        r["block_writes_failed"] = text.count("store: block write of claim")
        return r


def kvshare_files():
    out = set()
    for d in ("/dev/shm", "/dev/hugepages"):
        try:
            out |= {os.path.join(d, n) for n in os.listdir(d) if "kvshare" in n}
        except OSError:
            pass
    return out


def loadavg():
    try:
        load = open("/proc/loadavg").read().split()[:3]
    except OSError:
        load = ["?"] * 3
    return "/".join(load)


class Run:
    """One run of a script: its temp dir, the children's environment, its
    engines, the flags its lines raised, and what was on /dev/shm before it.
    A script's Run subclasses it: the geometry, then write_model()."""

    def __init__(self, o, script, tag, name):
        """script: the file the engines re-execute; tag: the lines' first word;
        name: the temp dir's (kvs-vllm-NAME.*) and unique ids' (perf-NAME-PID)."""
        self.shm0 = kvshare_files()
        self.t0 = time.monotonic()
        self.o, self.script, self.tag = o, os.path.abspath(script), tag
        self.engines = []
        self.tmp = tempfile.mkdtemp(prefix=f"kvs-vllm-{name}.")
        self.uid = f"perf-{name}-{os.getpid()}"
        self.flags = []   # (what, why) of a measurement that did not hit
        self.vllm_shm_left = []  # vLLM's /dev/shm segments of our engines, removed
        lib = os.environ.get("KVSHARE_LIBRARY") or os.path.join(ROOT, "build", "lib",
                                                                 "libkvshare.so.1")
        self.env = dict(os.environ, KVSHARE_LIBRARY=lib, HF_HUB_OFFLINE="1",
                        VLLM_NO_USAGE_STATS="1", PYTHONDONTWRITEBYTECODE="1")
        self.env["PYTHONPATH"] = os.pathsep.join(
            [os.path.join(ROOT, "python")] + [p for p in
                                              os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                              if p])
        self.env.pop("PYTHONHASHSEED", None)
        self.lib = lib

    def write_model(self, max_model_len, kv_bytes):
        """The model's config.json in the temp dir; every engine's spec gets
        it, max_model_len and kv_cache_memory_bytes."""
        o = self.o
        model = os.path.join(self.tmp, "model")
        os.makedirs(model)
        with open(os.path.join(model, "config.json"), "w") as f:
            json.dump({
                "architectures": ["LlamaForCausalLM"], "model_type": "llama",
                "hidden_size": o.hidden, "intermediate_size": o.intermediate,
                "num_hidden_layers": o.layers, "num_attention_heads": o.heads,
                "num_key_value_heads": o.kv_heads, "head_dim": o.head_dim,
                "hidden_act": "silu", "max_position_embeddings": max_model_len,
                "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "vocab_size": o.vocab,
                "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False,
                "torch_dtype": "float32"}, f)
        self.max_model_len, self.kv_bytes = max_model_len, kv_bytes
        self.engine_base = {"model": model, "max_model_len": max_model_len,
                            "kv_cache_memory_bytes": kv_bytes}

    def config_line(self, middle="", tail=""):
        """The "<tag> config" line: the model, the prompt, the script's middle
        fields, the engines' sizes, its tail fields, the machine."""
        o = self.o
        print(f"{self.tag} config layers={o.layers} hidden={o.hidden} heads={o.heads} "
              f"kv_heads={o.kv_heads} head_dim={o.head_dim} intermediate={o.intermediate} "
              f"vocab={o.vocab} dtype=float32 block_size={BLOCK} "
              f"prompt_tokens={o.prompt_tokens} suffix_tokens={o.suffix_tokens} {middle}"
              f"max_model_len={self.max_model_len} kv_cache_memory_bytes={self.kv_bytes} "
              f"kvshare_cache_gb={self.cache_gb} shard_bytes={self.shard_bytes} "
              f"shards_per_block={self.spb} {tail}cpus={os.cpu_count()} "
              f"loadavg={loadavg()} library={self.lib}", flush=True)

    def smoke(self, startup):
        """Smoke mode (KVS_PERF_SMOKE=1): True after the "SKIP:" line, the run
        closed; startup: one engine's start-up on a 2-core machine."""
        if os.environ.get("KVS_PERF_SMOKE") != "1":
            return False
        self.close()
        print(f"SKIP: {self.tag}: smoke mode: configuration only, no engine (one vLLM "
              f"engine's start-up is {startup} on a 2-core machine)", flush=True)
        return True

    def close_services(self):
        """What a script's run started beside its engines, stopped after them."""

    def close(self):
        for e in self.engines:
            e.kill()
        self.close_services()
        if self.o.keep:
            print(f"# {self.tag}: kept {self.tmp}", flush=True)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def remove_persisted(self, uid):
        """The files of cache uid, which this run made persistent (persist=1
        is kept in its header: no close removes it), once every engine on it
        exited: unlinked, as `kvshare clean` removes a stale cache.  Their
        count."""
        mine = [p for p in kvshare_files()
                if os.path.basename(p).startswith(f"kvshare.{uid}.")]
        for p in mine:
            os.unlink(p)
        return len(mine)

    def execute(self, body):
        """Run body() (the engines), close the run, check what it left; the
        script's exit code: 1 for a failed engine or a leftover file, 130 on
        ^C.  Prints the leftover, vLLM segments, FLAG and "done" lines."""
        tag = self.tag
        rc = 0
        try:
            body()
        except EngineFailed as e:
            print(f"{tag}: {e}", file=sys.stderr, flush=True)
            rc = 1
        except KeyboardInterrupt:
            rc = 130
        finally:
            self.close()
        new = kvshare_files() - self.shm0
        left = {p for p in new if self.uid in p}   # ours; others' runs may make files too
        if left:
            print(f"{tag} leftover files={','.join(sorted(left))} (removed)", flush=True)
            for p in left:
                try:
                    os.unlink(p)
                except OSError:
                    pass
            rc = rc or 1
        if new - left:
            print(f"# {tag}: new kvshare files not of this run (left alone): "
                  f"{','.join(sorted(new - left))}", flush=True)
        if self.vllm_shm_left:
            print(f"# {tag}: vLLM left {len(self.vllm_shm_left)} /dev/shm segments of this "
                  f"run's engines (its TP>1 shm communicator; not kvshare's), removed: "
                  f"{','.join(sorted(self.vllm_shm_left))}", flush=True)
        for what, why in self.flags:
            print(f"# {tag} FLAG {what}: {why}", flush=True)
        print(f"{tag} done rc={rc} wall_s={time.monotonic() - self.t0:.0f} "
              f"flags={len(self.flags)} loadavg={loadavg()}", flush=True)
        return rc
