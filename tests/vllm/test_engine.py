"""The connector inside real vLLM engines (CPU) with real weights.

The model is a random-initialised GQA Llama (conftest.GQA: 4 query heads over
2 KV heads of 32, 2 layers, float32), saved as safetensors and loaded by vLLM
(load_format "safetensors"); its weights are scaled so that a prompt's prefix
decides the greedy tokens, by a margin far above float32 noise (each reference
answer's margin is checked): wrong KV gives other tokens.  So every load is
checked by its tokens: they must equal those of engine REF, which has no
connector, on the same prompt.  A prompt X is 18 blocks of 32 tokens; X' is
X's first 17 blocks and one block of other tokens: an engine that finds X
stored loads 17 blocks (vLLM reports 544 of X''s 576 tokens cached) and
computes the last one over them.

Engines are long-lived servers (engine_server.py, driven over pipes), started
concurrently and each used for several steps; vLLM's local prefix cache is
emptied before each load so that the blocks come from kvshare.  Every engine
is its own process group, SIGKILLed at the end (or on failure) whatever
happened; each wait is bounded.  Each engine's start-up time is printed in the
summary.  To keep start-up affordable, an engine runs vLLM's engine core and
its TP=1 worker in its own process (VLLM_ENABLE_V1_MULTIPROCESSING=0,
executor "uni"), except E2 and KB: E2 (TP=2) has vLLM's usual layout (the
engine core, so the scheduler-side connector, in a process of its own, and a
process per rank) and so has KB at TP=1.

What each test proves:
  test_startup_refused          a kvshare_config with a key typo, a missing
      backend root, or a Redis endpoint nobody answers fails LLM() with the
      library's message naming the key, the path, the socket -- before the
      weights load (vLLM's "Starting to load model" never logged).
  test_tp1_tp2_share_one_cache  E1 (TP=1) and E2 (TP=2) on one kvshare cache
      (Redis backend), both alive: at once E1 stores X and E2 stores Y; then at
      once E2 loads X' (each rank its head of E1's blocks) and E1 loads Y'
      (both heads from E2's two ranks' shards): 544 cached each, tokens REF's.
      Each stored shard is written to Redis once (SET counted), none read.
  test_redis_counted_reads      RB (TP=2), a fresh cache on the same Redis:
      loads X' and Y' from the backend asynchronously (544 cached, tokens REF's), each
      rank reading its own heads: 17 x 2 GETs per prompt, no SET.
  test_failing_backend          F, every backend read failing
      (fault_error_ppm=1000000) over the blocks of X': its loads fail, vLLM
      recomputes ("blocks are recomputed" logged), the tokens are REF's.
  test_async_load_beside_decoders  SL (kvshare_load_mode="async", every
      backend read held 150 ms) gets X' in one batch with two prompts it
      computes: X''s prefix loads asynchronously while they run (544 cached),
      every prompt's tokens REF's.
  test_abort_during_async_load  SL: a request for X' aborted while its load
      runs (engine_server's abort_during_load): vLLM's free KV block count
      comes back once the load ends; then X' loads whole, tokens REF's.
  test_one_rank_fails_its_load  RF (TP=2, killing_connector.RankLoadFailConnector:
      rank 1 fails every load, rank 0's succeed): vLLM recovers from the load
      failure once, the tokens are REF's.
  test_killed_and_restarted     on a posix backend, cache K: KA is killed -9
      right after a dump of only its first KV head of W reached the cache
      (killing_connector.py: a TP peer dead before its dump): no block of W is
      in the backend; KB, fresh on the cache KA left, finds none of
      W' (0 cached, tokens REF's), then is killed -9 (its rank, then the whole
      process group) right after its dumps of Z reached the cache; KC, fresh
      on the cache KB left, loads Z' (544 cached, tokens REF's), and the
      blocks of Z in the backend afterwards are bit for bit those E1 computed
      from scratch.
  test_finetune_same_directory  after KB/KC stored Z on model directory MK,
      a fine-tune is written over MK (same config.json, other weights); FT on
      MK, same cache (kvshare_unique_id) and backend, must either find
      nothing of Z' (0 cached) and answer as the fine-tune does (REF_TUNE, no
      connector), or be refused at start-up (below).
  test_same_model_id_other_weights  MID: another directory with the
      fine-tune's weights, the same kvshare_model_id and kvshare_unique_id as
      E1/E2: either 0 cached of X' and REF_TUNE's tokens, or refused at
      start-up.
      Why either is right, and nothing else: the library binds a cache to
      the backend identity of its ranks, the layout_tag (the fingerprint's)
      included, since any rank writes blocks another rank dumped (and an
      adopter of a stale cache those the dead left DIRTY) with its own
      backend and tag: an engine with other weights in the cache would store
      the first engine's KV under its own tag.  So while the cache is live
      (KC; E1, E2), or stale with DIRTY blocks of the other weights, the
      rank's kvs_store_open is refused (KVS_ECONFIG) and the engine does not
      start (engine_server exit 3), its log holding the connector's error
      naming kvshare_unique_id (REFUSED_OTHER_WEIGHTS) and the library's
      line naming both layout tags: the cache's (the other engine's
      fingerprint) and its own, another.  Once the cache is gone (its last
      rank closed it, or a stale one without DIRTY blocks was adopted) the
      engine binds it anew and starts, and must then find none of the other
      weights' KV.  Both tests meet a live cache here (KC and E1/E2 live to
      the end), so refusal is what this module's run shows; the other branch
      is checked all the same should the order change.
  test_redis_degraded           Redis unreachable with redis_start_degraded=1:
      DEG starts, serves X' (REF's tokens) and the library's lines about the
      unreachable server are rate-limited: at most 4, not one per shard.
  test_library_lines_in_vllm_format  the library's own lines (logger
      "kvshare") are in the engine's log in vLLM's format
      ("(<process> pid=N) INFO MM-DD hh:mm:ss [file.py:N] ..."), not bare
      stderr lines.
  test_no_cache_left_behind     every engine ended, no cache of the run is
      left in /dev/shm (the caches of the engines killed -9 were adopted and
      then closed by the engines after them).

KVSHARE_VLLM_TEST_BREAK breaks engines on purpose, to check that the tests
can fail: "swap-heads:e2,rb" runs those engines (names as in Fleet.spec) with
killing_connector.SwappedHeadsConnector (each rank loads and dumps the
mirrored heads), "ignore-load-errors:f" with IgnoreLoadErrorsConnector (failed
loads never reported to vLLM), "no-weights-fingerprint" sets
kvshare_weights_fingerprint=False in every engine (the fingerprint leaves the
weights out); items joined by ";"."""
import json
import os
import random
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import kvshare
from conftest import SUMMARY, write_gqa_model

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "engine_server.py")
BLOCK = 32
LAYERS, KV_HEADS, HEAD_DIM = 2, 2, 32          # conftest.GQA
LAYER = 2 * BLOCK * HEAD_DIM * 4               # a layer's (block, KV head), float32
SHARD = LAYER * LAYERS                         # a KV head of a block, every layer
SPB = KV_HEADS                                 # shards per block
SHARED = 17                                    # blocks X' shares with X
# A reference token's least lead over the runner-up (logprob): 100 times and
# more the float32 differences between one engine and another (TP degrees,
# batch shapes), so that equal tokens mean equal KV to that precision.
MIN_GAP = 1e-3
MODEL_ID = "kvt-gqa-llama"
TUNE = (1, 7)        # the fine-tune: gqa_weights(1, tune=7)

rng = random.Random(23)


def _prompt(blocks, extra):
    return [rng.randrange(3, 1000) for _ in range(blocks * BLOCK + extra)]


def _pair():
    p = [rng.randrange(3, 1000) for _ in range((SHARED + 1) * BLOCK)]
    return p, p[:SHARED * BLOCK] + [rng.randrange(3, 1000) for _ in range(BLOCK)]


X, X2 = _pair()   # E1 stores X; E2, RB, F, MID, DEG get X'
Y, Y2 = _pair()   # E2 stores Y; E1, RB get Y'
W, W2 = _pair()   # KA dies storing W; KB gets W'
Z, Z2 = _pair()   # KB dies storing Z; KC, FT get Z'; E1 computes Z (its bytes)
D1, D2 = _prompt(2, 5), _prompt(3, 11)  # SL computes them beside X''s load

# vLLM's line prefix: "(EngineCore pid=12) INFO 12-03 14:42:22 [core.py:133] "
VLLM_LINE = re.compile(r"^(\([\w.-]+ pid=\d+\) )?(DEBUG|INFO|WARNING|ERROR|CRITICAL) "
                       r"\d\d-\d\d \d\d:\d\d:\d\d \[[\w.]+:\d+\] ")
BREAKS = {"swap-heads": "SwappedHeadsConnector", "ignore-load-errors": "IgnoreLoadErrorsConnector"}
WEIGHTS_LOADING = ("Starting to load model", "Loading weights took", "Model loading took")
# The connector's error when its cache is bound to another fingerprint
# (connector.py, _open_store)
REFUSED_OTHER_WEIGHTS = ("another engine with other weights (a different fingerprint) uses "
                         "this cache: give this engine its own kvshare_unique_id, or leave it "
                         "unset (the default is per fingerprint)")
# The library's line (store/store.c, backend_bind): the cache, its ranks'
# identity and this rank's, each ending in its layout_tag
BOUND_LINE = re.compile(r"store: the cache '([^']+)' is bound to another backend: its ranks "
                        r"dump to .* layout_tag=(\d+); this rank to .* layout_tag=(\d+) "
                        r"\(give every rank")


def tail(text, n=40):
    return "\n".join(text.splitlines()[-n:])


class EngineGone(Exception):
    pass


def group_members(pgid):
    """The live processes of process group pgid (zombies left out)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(pid))
    return out


class Engine:
    """One engine_server.py process (its own process group) and its pipes."""

    def __init__(self, fleet, name, spec, env):
        self.name, self.spec, self.fleet = name, spec, fleet
        self.log_path = fleet.tmp / f"{name}.log"
        spec_path = fleet.tmp / f"{name}.json"
        spec_path.write_text(json.dumps(spec))
        r, w = os.pipe()
        self.launched, self.launched_wall = time.monotonic(), time.time()
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen([sys.executable, SERVER, str(spec_path), str(w)],
                                         pass_fds=(w,), stdin=subprocess.PIPE, stdout=log,
                                         stderr=subprocess.STDOUT, env=env, text=True,
                                         start_new_session=True)
        os.close(w)
        self.pgid = self.proc.pid
        self.reply, self.buf = r, b""
        self.ready_info = None
        self.ready_s = None
        self.state = "starting"

    def log(self):
        return self.log_path.read_text(errors="replace")

    def _fail(self, what):
        pytest.fail(f"engine {self.name} {what}; the last lines of its log "
                    f"({self.log_path}):\n{tail(self.log())}", pytrace=False)

    def readline(self, timeout):
        """The next reply line; EngineGone at the pipe's end (the process
        died), pytest.fail after timeout seconds."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self._fail(f"gave no reply in {timeout} s")
            ready, _, _ = select.select([self.reply], [], [], min(left, 1.0))
            if ready:
                data = os.read(self.reply, 1 << 20)
                if not data:
                    raise EngineGone(self.name)
                self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def wait_ready(self, timeout=420, refusable=False):
        """Its ready line; refusable: None where it exited before it was
        ready (state "refused"; its exit code in proc.returncode)."""
        if self.ready_info is None:
            try:
                self.ready_info = self.readline(timeout)
            except EngineGone:
                self.proc.wait(30)
                if refusable:
                    self.ready_s = time.monotonic() - self.launched  # here: to its exit
                    self.state = "refused"
                    return None
                self.state = "died"
                self._fail(f"exited {self.proc.returncode} before it was ready")
            # from the launch to the engine's own "ready" (not to this call)
            self.ready_s = self.ready_info["t"] - self.launched_wall
            self.state = "ready"
        return self.ready_info

    @property
    def fingerprint(self):
        return self.wait_ready()["fingerprint"]

    def send(self, cmd):
        self.wait_ready()
        try:
            self.proc.stdin.write(json.dumps(cmd) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            self._fail(f"is gone (exit {self.proc.poll()})")

    def recv(self, timeout=180):
        try:
            out = self.readline(timeout)
        except EngineGone:
            self.proc.wait(30)
            self._fail(f"died (exit {self.proc.returncode})")
        if "error" in out:
            self._fail(f"answered {out['error']}")
        return out

    def call(self, cmd, timeout=180):
        self.send(cmd)
        return self.recv(timeout)

    def gen(self, prompt, reset=True, logprobs=False):
        """One prompt's result (engine_server.py), vLLM's prefix cache emptied first."""
        if reset:
            assert self.call({"op": "reset"})["ok"], f"{self.name}: reset_prefix_cache failed"
        return self.call({"op": "generate", "prompts": [prompt],
                          "logprobs": logprobs})["prompts"][0]

    def expect_death(self, marker, timeout=180):
        """The engine's rank kills itself (killing_connector.py writes marker
        first): SIGKILL the rest of its process group at once, as a crash of
        the whole engine would."""
        deadline = time.monotonic() + timeout
        while not os.path.exists(marker) and self.proc.poll() is None:
            if time.monotonic() > deadline:
                self._fail(f"was not killed within {timeout} s")
            time.sleep(0.05)
        assert os.path.exists(marker), (
            f"engine {self.name} exited {self.proc.returncode} without being killed:\n"
            f"{tail(self.log())}")
        self.kill()
        self.state = "killed"

    def kill(self):
        try:
            os.killpg(self.pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            pass
        deadline = time.monotonic() + 30
        while group_members(self.pgid) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = group_members(self.pgid)
        assert not left, f"engine {self.name}: processes {left} outlived SIGKILL of its group"

    def exit_status(self, timeout=240):
        """For an engine that must not start: its exit code (it must exit)."""
        try:
            self.ready_info = self.readline(timeout)
        except EngineGone:
            self.proc.wait(30)
            self.ready_s = time.monotonic() - self.launched  # here: to its exit
            self.state = "refused"
            return self.proc.returncode
        self.state = "ready"
        self._fail("started, but its configuration must be refused")

    def close_begin(self):
        if self.proc.poll() is None and self.state == "ready":
            try:
                self.proc.stdin.write('{"op": "exit"}\n')
                self.proc.stdin.flush()
            except (BrokenPipeError, ValueError):
                pass

    def close_end(self, timeout):
        try:
            self.proc.wait(max(0.1, timeout))
        except subprocess.TimeoutExpired:
            pass
        if self.state == "ready":
            self.state = "closed" if self.proc.poll() == 0 else f"exit {self.proc.poll()}"
        self.kill()  # whatever is left of the group
        os.close(self.reply)
        if self.proc.stdin:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass


class Redis:
    """A redis-server on a unix socket under a tmp dir, with its command counts."""

    def __init__(self, tmp):
        exe = shutil.which("redis-server") or shutil.which("valkey-server")
        if exe is None:
            pytest.skip("no redis-server or valkey-server (apt-get install redis-server)")
        self.sock = str(tmp / "redis.sock")
        self.proc = subprocess.Popen([exe, "--port", "0", "--unixsocket", self.sock,
                                      "--save", "", "--appendonly", "no"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        for _ in range(200):
            if os.path.exists(self.sock):
                break
            time.sleep(0.05)

    def counts(self):
        """Calls per command (INFO commandstats), e.g. {"get": 68, "set": 72}."""
        with socket.socket(socket.AF_UNIX) as c:
            c.settimeout(10)
            c.connect(self.sock)
            c.sendall(b"INFO commandstats\r\n")
            data = b""
            while b"\r\n" not in data:  # the bulk reply's "$<length>" line
                data += c.recv(65536)
            head, _, body = data.partition(b"\r\n")
            while len(body) < int(head[1:]) + 2:
                body += c.recv(65536)
        out = {}
        for line in body.decode().splitlines():
            if line.startswith("cmdstat_"):
                name, rest = line[len("cmdstat_"):].split(":", 1)
                out[name] = int(rest.split("calls=")[1].split(",")[0])
        return {"get": out.get("get", 0), "set": out.get("set", 0)}

    def settle(self, base, timeout=60, **delta):
        """The counts once they reach base + delta (the backend writes run
        after a save returns), checked to stay there; the last counts on
        timeout."""
        want = {k: base[k] + delta.get(k, 0) for k in base}
        deadline = time.monotonic() + timeout
        now = self.counts()
        while any(now[k] < want[k] for k in want) and time.monotonic() < deadline:
            time.sleep(0.1)
            now = self.counts()
        time.sleep(0.5)
        return self.counts(), want

    def close(self):
        self.proc.kill()
        self.proc.wait(30)


def dead_socket(path):
    """A unix socket file nobody listens on (connect: ECONNREFUSED)."""
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()
    return str(path)


def store_keys(spec_keys, fp_hex, name):
    """A fresh reader's store over an engine's backend (its own cache)."""
    fp = bytes.fromhex(fp_hex)
    return {"unique_id": f"vt-{os.getpid()}-read-{name}-{time.monotonic_ns()}",
            "device_id": 0, "shard_size": SHARD, "tensor_size": LAYER,
            "block_size": SHARD * SPB,
            "copy_engine": "host", "cache_buffer_capacity_gb": 0.01,
            "layout_tag": int.from_bytes(fp[:8], "little"),
            **{k: v for k, v in spec_keys.items() if k.startswith(("backend", "redis"))}}


def read_blocks(keys, ids):
    """The stored bytes of blocks, read through a fresh cache."""
    with kvshare.Store(keys) as s:
        out = np.zeros((len(ids), SHARD * SPB), dtype=np.uint8)
        assert s.load([bytes.fromhex(i) for i in ids], list(out)).wait()
        return out


def stored_prefix(keys, ids):
    with kvshare.Store(keys) as s:
        return s.lookup_prefix([bytes.fromhex(i) for i in ids])


def block_files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root)
                  for d, _, files in os.walk(root) for f in files)


class Fleet:
    """The module's engines, made on first use (start() makes them early, so
    that their start-ups overlap), and the steps several tests build on (once)."""

    def __init__(self, tmp, redis):
        self.t0 = time.monotonic()
        self.tmp, self.redis = tmp, redis
        self.engines, self.phases, self.refs = {}, {}, {}
        self.closed = False
        self.shm0 = set(os.listdir("/dev/shm"))  # what close() must not remove
        self.model = write_gqa_model(tmp / "model")              # M: REF, E1, E2, RB, F, DEG
        self.model_k = write_gqa_model(tmp / "model-k")          # MK: KA, KB, KC; then FT
        self.model_tune = write_gqa_model(tmp / "model-tune", *TUNE)  # REF_TUNE, MID
        self.posix_k = tmp / "posix-k"
        self.posix_k.mkdir()
        self.dead = dead_socket(tmp / "nobody.sock")
        pid = os.getpid()
        self.uid_c, self.uid_k = f"vt-{pid}-c", f"vt-{pid}-k"
        self.redis_c = {"backend": "redis", "redis_endpoints": redis.sock,
                        "redis_key_prefix": "c:", "cache_buffer_capacity_gb": 0.05}
        self.posix = {"backend": "posix", "backend_roots": str(self.posix_k), "fsync": 0,
                      "cache_buffer_capacity_gb": 0.05}
        self.kill_file = str(tmp / "kb.arm")
        self.gates = {"kb": str(tmp / "kb.open"), "kc": str(tmp / "kc.open")}
        # KVSHARE_VLLM_TEST_BREAK (module docstring): {engine: connector class}
        # and whether the fingerprint leaves the weights out
        self.broken, self.no_weights = {}, False
        for item in filter(None, os.environ.get("KVSHARE_VLLM_TEST_BREAK", "").split(";")):
            kind, _, names = item.partition(":")
            if kind == "no-weights-fingerprint":
                self.no_weights = True
                continue
            cls = BREAKS[kind]  # KeyError: an unknown break
            self.broken.update((n, cls) for n in names.split(","))

    def spec(self, name):
        m, mk, mt = self.model, self.model_k, self.model_tune
        c = {"model_id": MODEL_ID, "unique_id": self.uid_c, "kvshare_config": self.redis_c}
        k = {"model": mk, "unique_id": self.uid_k, "kvshare_config": self.posix}
        specs = {
            "ref": {"model": m, "connector": False},
            "ref_tune": {"model": mt, "connector": False},
            "e1": {"model": m, **c},
            "e2": {"model": m, "tp": 2, "mp_core": True, **c},
            # asynchronous loads at TP=2, both ranks from Redis (docs/vllm.md:
            # the steps that compute nothing sleep, else this engine starved
            # the Redis it waited for)
            "rb": {"model": m, "tp": 2, **c, "unique_id": self.uid_c + "-b",
                   "extra": {"kvshare_load_mode": "async"}},
            "f": {"model": m, **c, "unique_id": self.uid_c + "-f", "role": "kv_consumer",
                  "kvshare_config": {**self.redis_c, "fault_error_ppm": 1000000}},
            # asynchronous loads: every backend read held 150 ms; TP=2 with
            # rank 1 failing every load
            "sl": {"model": m, **c, "unique_id": self.uid_c + "-s", "role": "kv_consumer",
                   "kvshare_config": {**self.redis_c, "fault_delay_us": 150000},
                   "extra": {"kvshare_load_mode": "async"}},
            "rf": {"model": m, "tp": 2, **c, "unique_id": self.uid_c + "-r",
                   "role": "kv_consumer", "connector_class":
                   "killing_connector:RankLoadFailConnector",
                   "extra": {"kvshare_load_mode": "async"}},
            "mid": {"model": mt, **c},
            "ka": {**k, "kill_at": "partial", "kill_marker": str(self.tmp / "ka.killed")},
            "kb": {**k, "mp_core": True, "kill_at": "cached", "kill_file": self.kill_file,
                   "kill_marker": str(self.tmp / "kb.killed"), "open_after": self.gates["kb"]},
            "kc": {**k, "open_after": self.gates["kc"]},
            "ft": k,
            "deg": {"model": m, "unique_id": f"vt-{os.getpid()}-d", "kvshare_config": {
                "backend": "redis", "redis_endpoints": self.dead,
                "redis_start_degraded": 1, "cache_buffer_capacity_gb": 0.05}},
            # engines that must not start, tried one after another in one
            # process (engine_server.attempts): a key typo, a missing root, a
            # Redis nobody answers
            "refusals": {"attempts": {
                "key": {"model": m, "kvshare_config": {
                    "backend": "posix", "backend_roots": str(self.posix_k),
                    "cache_bufer_capacity_gb": 0.05}},
                "root": {"model": m, "kvshare_config": {
                    "backend": "posix", "backend_roots": str(self.tmp / "no-such-root"),
                    "cache_buffer_capacity_gb": 0.05}},
                "redis": {"model": m, "kvshare_config": {
                    "backend": "redis", "redis_endpoints": self.dead,
                    "cache_buffer_capacity_gb": 0.05}}}},
        }
        spec = dict(specs[name])
        if name in self.broken:
            spec["connector_class"] = "killing_connector:" + self.broken[name]
        if self.no_weights:
            spec["weights_fingerprint"] = False
        return spec

    def env(self, spec):
        env = dict(os.environ)
        env["PYTHONPATH"] = HERE + os.pathsep + env.get("PYTHONPATH", "")
        tp = spec.get("tp", 1)
        if not spec.get("mp_core"):
            # the engine core in the server's process (a TP=1 worker too: "uni")
            env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
            if tp == 1:
                spec["executor"] = "uni"
        if tp > 1:  # one NUMA node here: vLLM's "auto" binding wants one per rank
            env["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(str(c % os.cpu_count())
                                                        for c in range(tp))
        return env

    def start(self, *names):
        for name in names:
            if name not in self.engines:
                spec = self.spec(name)
                env = self.env(spec)
                self.engines[name] = Engine(self, name, spec, env)

    def get(self, name, refusable=False):
        """The engine, ready; refusable: None where it exited at start-up."""
        self.start(name)
        e = self.engines[name]
        if e.state == "refused" and refusable:
            return None
        return e if e.wait_ready(refusable=refusable) is not None else None

    def once(self, key, fn):
        if key not in self.phases:
            self.phases[key] = None  # a failed step is not retried by the next test
            self.phases[key] = fn()
        if self.phases[key] is None:
            pytest.fail(f"step {key!r} failed in an earlier test", pytrace=False)
        return self.phases[key]

    def ref(self, prompt, engine="ref"):
        """REF's (or REF_TUNE's) greedy tokens of prompt, their margin checked."""
        key = (engine, tuple(prompt))
        if key not in self.refs:
            r = self.get(engine).gen(prompt, logprobs=True)
            assert r["gap"] is not None and r["gap"] >= MIN_GAP, (
                f"{engine}: the greedy tokens of a prompt lead by only {r['gap']}: they "
                f"would not show wrong KV (choose other weights, conftest.GAIN)")
            self.refs[key] = r["tokens"]
        return self.refs[key]

    def close(self):
        if self.closed:
            return
        self.closed = True
        for e in self.engines.values():
            e.close_begin()
        deadline = time.monotonic() + 60
        for e in self.engines.values():
            e.close_end(deadline - time.monotonic())
        self._remove_engine_shm()
        total = time.monotonic() - self.t0
        SUMMARY.append("vllm.engine: engine start-ups (launch: s after the module's start; "
                       "ready: s from launch to its first reply):")
        for e in self.engines.values():
            ready = f"{e.ready_s:6.1f}" if e.ready_s is not None else "     -"
            inner = (f" (LLM() {e.ready_info['startup_s']:.1f} s)"
                     if e.ready_info and "startup_s" in e.ready_info else "")
            SUMMARY.append(f"  {e.name:13s} tp={e.spec.get('tp', 1)} launch {e.launched - self.t0:6.1f}"
                           f"  ready {ready}{inner}  {e.state}")
        SUMMARY.append(f"vllm.engine: {len(self.engines)} engines, {total:.0f} s from the "
                       f"module's first engine to the last one's end")

    def _remove_engine_shm(self):
        """The engines are SIGKILLed at the end, so the shared memory of
        vLLM's and Python's multiprocessing in them (psm_*, sem.mp-*: hundreds
        of MB a run) and the TP=2 engines' CPU communicator segments
        (vllm_dist_*: 8 MiB an engine) are never unlinked: remove what
        appeared during the run and no live process maps (a name another
        process is about to open would be mapped by its creator)."""
        mapped = set()
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/maps") as f:
                    mapped.update(line.rsplit("/dev/shm/", 1)[1].split()[0]
                                  for line in f if "/dev/shm/" in line)
            except OSError:
                continue
        for name in set(os.listdir("/dev/shm")) - self.shm0 - mapped:
            if name.startswith(("psm_", "sem.mp-", "vllm_dist_")):
                try:
                    os.unlink(os.path.join("/dev/shm", name))
                except OSError:
                    pass

    def leftovers(self):
        """The kvshare caches of this run still in /dev/shm (their ids all
        start vt-<pid>-)."""
        prefix = f"kvshare.vt-{os.getpid()}-"
        return sorted(n[len("kvshare."):-len(".ctl")] for n in os.listdir("/dev/shm")
                      if n.startswith(prefix) and n.endswith(".ctl"))

    def clean(self):
        """Remove this run's stale caches (engines killed on a failure) with
        the kvshare CLI of the library's build, where there is one."""
        lib = os.environ.get("KVSHARE_LIBRARY", "")
        cli = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(lib))), "bin",
                           "kvshare") if lib else ""
        for uid in self.leftovers():
            if os.access(cli, os.X_OK):
                subprocess.run([cli, "clean", uid], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=60)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("engines")
    redis = Redis(tmp)
    f = None
    try:
        f = Fleet(tmp, redis)
        # the first wave: what the first tests need, and the engines on MK
        # (KB and KC wait to meet the cache until the one before them died),
        # whose weights must all be loaded before FT's replace them
        f.start("refusals", "ka", "kb", "kc", "ref", "e1", "e2")
        yield f
    finally:
        try:
            if f is not None:
                f.close()
                f.clean()
        finally:
            redis.close()


def test_startup_refused(fleet):
    want = {"key": "cache_bufer_capacity_gb", "root": str(fleet.tmp / "no-such-root"),
            "redis": fleet.dead}
    e = fleet.engines.get("refusals") or (fleet.start("refusals") or fleet.engines["refusals"])
    replies = {}
    try:
        for _ in want:
            r = e.readline(300)
            replies[r["name"]] = r
    except EngineGone:
        pass
    e.proc.wait(60)
    e.ready_s, e.state = time.monotonic() - e.launched, "refused"
    text = e.log()
    logs = dict(part.split("\n", 1) for part in text.split("engine_server: attempt ")[1:])
    for name, named in want.items():
        r, log = replies.get(name), logs.get(name, "")
        assert r is not None, f"no answer for attempt {name}:\n{tail(text)}"
        assert r["refused"], f"engine {name} started: its configuration must be refused"
        assert named in r["error"] and named in log, (
            f"{name}: LLM() raised without naming {named!r}: {r['error']}\n{tail(log)}")
        loaded = [w for w in WEIGHTS_LOADING if w in log]
        assert not loaded, (f"{name}: refused only after the weights loaded ({loaded[0]!r} "
                            f"logged):\n{tail(log)}")


def _wait_file(path, engine, timeout=420):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if engine.proc.poll() is not None:
            engine._fail(f"exited {engine.proc.returncode}")
        if time.monotonic() > deadline:
            engine._fail(f"did not write {path} in {timeout} s")
        time.sleep(0.1)


def _k_chain(fleet):
    """KA killed storing W; KB: W', then killed storing Z; KC loads Z'."""
    fleet.start("kb", "kc")
    ka, kb, kc = (fleet.engines[n] for n in ("ka", "kb", "kc"))
    ka.wait_ready()
    ka.send({"op": "generate", "prompts": [W]})
    ka.expect_death(ka.spec["kill_marker"])
    files_after_ka = block_files(fleet.posix_k)
    _wait_file(fleet.gates["kb"] + ".waiting", kb)  # weights loaded, no store yet
    open(fleet.gates["kb"], "w").close()  # KB meets the cache KA left
    kb.wait_ready()
    fleet.start("rb", "f")
    w2 = kb.gen(W2)
    open(fleet.kill_file, "w").close()  # armed: its next save kills it
    kb.send({"op": "generate", "prompts": [Z]})
    kb.expect_death(kb.spec["kill_marker"])
    fleet.start("ref_tune", "mid", "deg")
    _wait_file(fleet.gates["kc"] + ".waiting", kc)
    open(fleet.gates["kc"], "w").close()  # KC meets the cache KB left
    kc.wait_ready()
    # Every engine on MK is made (each of its processes took the weights'
    # fingerprint: an engine's scheduler takes it only once its workers are
    # up): a fine-tune may replace the weights now, for FT.
    write_gqa_model(fleet.tmp / "model-k", *TUNE)
    fleet.start("ft")
    z2 = kc.gen(Z2)
    keys = store_keys(fleet.posix, kc.fingerprint, "k")
    deadline = time.monotonic() + 60
    while stored_prefix(keys, z2["ids"]) < SHARED + 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    return {"files_after_ka": files_after_ka, "w2": w2, "z2": z2, "keys": keys}


def _e1_z(fleet):
    """E1 computes Z from scratch; its backend writes waited for."""
    c0 = fleet.redis.counts()
    z = fleet.get("e1").gen(Z)
    got, want = fleet.redis.settle(c0, set=(SHARED + 1) * SPB)
    assert got == want, f"E1 storing Z: Redis counts {got}, want {want}"
    return z


def test_killed_and_restarted(fleet):
    k = fleet.once("k_chain", lambda: _k_chain(fleet))
    kc = fleet.engines["kc"]
    assert k["files_after_ka"] == [], "a block of W was written with one head of two"
    assert k["w2"]["cached"] == 0, (
        f"KB loaded {k['w2']['cached']} tokens of W', none of whose blocks KA completed")
    assert k["w2"]["tokens"] == fleet.ref(W2), "KB: wrong tokens"
    assert k["z2"]["cached"] == SHARED * BLOCK, (
        f"KC found {k['z2']['cached']} of Z' cached (KB died with Z in the cache), want "
        f"{SHARED * BLOCK}:\n{tail(kc.log())}")
    assert k["z2"]["tokens"] == fleet.ref(Z2), "KC, loading what KB left: wrong tokens"
    # the blocks of Z in K's backend (whoever wrote them: KB before it died, or
    # KC for it) are bit for bit what E1 computed from scratch
    assert stored_prefix(k["keys"], k["z2"]["ids"]) == SHARED + 1, "Z' is not all in the backend"
    e1 = fleet.get("e1")
    z = fleet.once("e1_z", lambda: _e1_z(fleet))
    assert z["cached"] == 0
    c_keys = store_keys(fleet.redis_c, e1.fingerprint, "c")
    ours = read_blocks(k["keys"], k["z2"]["ids"][:SHARED])
    e1s = read_blocks(c_keys, z["ids"][:SHARED])
    for i in range(SHARED):
        assert np.array_equal(ours[i], e1s[i]), f"block {i} of Z in K's backend is not E1's KV"


def _cross_tp(fleet):
    """E1 (TP=1) and E2 (TP=2) on cache C: each stores, then each loads the
    other's, at the same time."""
    e1, e2, redis = fleet.get("e1"), fleet.get("e2"), fleet.redis
    assert e1.fingerprint == e2.fingerprint, "the TP degree changed the fingerprint"
    c0 = redis.counts()
    e1.call({"op": "reset"})
    e2.call({"op": "reset"})
    e1.send({"op": "generate", "prompts": [X]})
    e2.send({"op": "generate", "prompts": [Y]})
    x, y = e1.recv()["prompts"][0], e2.recv()["prompts"][0]
    assert x["cached"] == 0 and y["cached"] == 0, (x["cached"], y["cached"])
    c1, want = redis.settle(c0, set=2 * (SHARED + 1) * SPB)
    assert c1 == want, f"storing X and Y: Redis counts {c1}, want {want} (each shard once)"
    e1.call({"op": "reset"})
    e2.call({"op": "reset"})
    e1.send({"op": "generate", "prompts": [Y2]})
    e2.send({"op": "generate", "prompts": [X2]})
    y2, x2 = e1.recv()["prompts"][0], e2.recv()["prompts"][0]
    # the only new block of each: its last, which each engine computed and stored
    c2, want = redis.settle(c1, set=2 * SPB)
    return {"x": x, "y": y, "x2": x2, "y2": y2, "counts": (c2, want)}


def test_tp1_tp2_share_one_cache(fleet):
    fleet.start("ref", "rb", "f", "sl", "rf")
    r = fleet.once("cross_tp", lambda: _cross_tp(fleet))
    e1, e2 = fleet.engines["e1"], fleet.engines["e2"]
    assert r["x2"]["cached"] == SHARED * BLOCK, (
        f"E2 (TP=2) found {r['x2']['cached']} of X' cached, want {SHARED * BLOCK}:\n"
        f"{tail(e2.log())}")
    assert r["y2"]["cached"] == SHARED * BLOCK, (
        f"E1 (TP=1) found {r['y2']['cached']} of Y' cached, want {SHARED * BLOCK}:\n"
        f"{tail(e1.log())}")
    assert r["x2"]["ids"][:SHARED] == r["x"]["ids"][:SHARED]
    assert r["x2"]["tokens"] == fleet.ref(X2), "E2 (TP=2) loading E1's (TP=1) X: wrong tokens"
    assert r["y2"]["tokens"] == fleet.ref(Y2), "E1 (TP=1) loading E2's (TP=2) Y: wrong tokens"
    assert r["x"]["tokens"] == fleet.ref(X) and r["y"]["tokens"] == fleet.ref(Y)
    got, want = r["counts"]
    assert got == want, f"loading X' and Y' from the shared cache: Redis counts {got}, want {want}"


def test_redis_counted_reads(fleet):
    fleet.once("cross_tp", lambda: _cross_tp(fleet))
    rb, redis = fleet.get("rb"), fleet.redis
    assert rb.fingerprint == fleet.engines["e1"].fingerprint
    for prompt, name in ((X2, "X'"), (Y2, "Y'")):
        c0 = redis.counts()
        r = rb.gen(prompt)
        assert r["cached"] == SHARED * BLOCK, (
            f"RB found {r['cached']} of {name} cached, want {SHARED * BLOCK}:\n"
            f"{tail(rb.log())}")
        got, want = redis.settle(c0, get=SHARED * SPB)
        assert got == want, (f"RB loading {name}: Redis counts {got}, want {want} (each "
                             f"shard of its 17 blocks read once, each rank its heads; the "
                             f"last block stored already)")
        assert r["tokens"] == fleet.ref(prompt), f"RB (TP=2) loading {name}: wrong tokens"


def test_failing_backend(fleet):
    fleet.once("cross_tp", lambda: _cross_tp(fleet))
    f = fleet.get("f")
    r = f.gen(X2)
    text = f.log()
    assert "blocks are recomputed" in text, tail(text)
    assert r["tokens"] == fleet.ref(X2), "F (every backend read failing): wrong tokens"


def test_async_load_beside_decoders(fleet):
    """SL loads X''s prefix from a backend whose reads take 150 ms each,
    asynchronously (kvshare_load_mode="async"), in one batch with two
    prompts it computes: every prompt's tokens are REF's, X''s prefix
    cached."""
    fleet.once("cross_tp", lambda: _cross_tp(fleet))
    sl = fleet.get("sl")
    assert sl.call({"op": "reset"})["ok"]
    others = [D1, D2]
    out = sl.call({"op": "generate", "prompts": others + [X2]})["prompts"]
    assert out[-1]["cached"] == SHARED * BLOCK, (
        f"SL found {out[-1]['cached']} of X' cached, want {SHARED * BLOCK}:\n{tail(sl.log())}")
    for prompt, r in zip(others + [X2], out):
        assert r["tokens"] == fleet.ref(prompt), "SL (asynchronous loads): wrong tokens"


def test_abort_during_async_load(fleet):
    """SL: a request for X' is aborted while its asynchronous load runs (each
    backend read held 150 ms); vLLM frees its blocks only once the worker
    reports the load ended, so the free block count must come back to where
    it was; then X' loads whole (544 cached, REF's tokens): nothing of the
    aborted load was left behind."""
    fleet.once("cross_tp", lambda: _cross_tp(fleet))
    sl = fleet.get("sl")
    assert sl.call({"op": "reset"})["ok"]
    r = sl.call({"op": "abort_during_load", "prompt": X2, "timeout": 60})
    assert r["waiting"], f"SL: the request never waited for its load: {r}\n{tail(sl.log())}"
    assert r["free_after"] == r["free_before"], (
        f"SL: {r['free_before'] - r['free_after']} KV blocks not freed after the abort "
        f"({r}):\n{tail(sl.log())}")
    assert sl.call({"op": "reset"})["ok"]
    out = sl.call({"op": "generate", "prompts": [X2]})["prompts"][0]
    assert out["cached"] == SHARED * BLOCK, (
        f"SL after the abort found {out['cached']} of X' cached:\n{tail(sl.log())}")
    assert out["tokens"] == fleet.ref(X2), "SL after the abort: wrong tokens"


def test_one_rank_fails_its_load(fleet):
    """RF (TP=2): rank 1 fails every load, rank 0's succeed; vLLM recomputes
    the union of the ranks' bad blocks once ("Recovered from KV load
    failure"), and the tokens are REF's."""
    fleet.once("cross_tp", lambda: _cross_tp(fleet))
    rf = fleet.get("rf")
    r = rf.gen(X2)
    text = rf.log()
    assert "rank 1 fails a load" in text and "Recovered from KV load failure" in text, tail(text)
    assert r["tokens"] == fleet.ref(X2), "RF (rank 1's loads failing): wrong tokens"


def refused_other_weights(fleet, name, other, uid):
    """Engine name refused at start-up because cache uid is bound to engine
    other's fingerprint (module docstring): it exited 3 (engine_server: the
    engine could not be made), its log holds the connector's error and the
    library's line naming uid, other's layout_tag as the cache's and another
    as its own."""
    e = fleet.engines[name]
    text = e.log()
    assert e.proc.returncode == 3, (
        f"{name} exited {e.proc.returncode} at start-up, not refused (3):\n{tail(text)}")
    assert REFUSED_OTHER_WEIGHTS in text, (
        f"{name} did not start, but not for the cache's binding (no "
        f"{REFUSED_OTHER_WEIGHTS!r}):\n{tail(text)}")
    theirs = int.from_bytes(bytes.fromhex(other.fingerprint)[:8], "little")
    bound = [m.groups() for m in BOUND_LINE.finditer(text)]
    assert any(c == uid and int(t) == theirs and int(m) != theirs for c, t, m in bound), (
        f"{name}: no library line naming cache {uid} bound to {other.name}'s layout_tag "
        f"{theirs} and another one for this rank (found {bound}):\n{tail(text)}")


def test_finetune_same_directory(fleet):
    k = fleet.once("k_chain", lambda: _k_chain(fleet))
    ft, kc = fleet.get("ft", refusable=True), fleet.engines["kc"]
    assert k["z2"]["cached"] == SHARED * BLOCK  # Z' was there to be found
    if ft is None:  # refused: the cache is KC's (live, or DIRTY blocks of MK's weights)
        refused_other_weights(fleet, "ft", kc, fleet.uid_k)
        return
    r = ft.gen(Z2)
    tuned = fleet.ref(Z2, "ref_tune")
    assert tuned != fleet.ref(Z2), "the fine-tune answers as the model it replaced"
    wrong = [f"found {r['cached']} tokens of Z' cached (the KV of the weights it replaced)"
             ] if r["cached"] != 0 else []
    if r["tokens"] != tuned:
        wrong.append(f"answers {r['tokens']}, the fine-tune {tuned}")
    assert not wrong, "FT (the fine-tune written over MK): " + "; ".join(wrong)
    assert ft.fingerprint != kc.fingerprint, (
        "the fine-tune written over MK has the fingerprint of the weights it replaced")


def test_same_model_id_other_weights(fleet):
    fleet.once("cross_tp", lambda: _cross_tp(fleet))
    mid = fleet.get("mid", refusable=True)
    if mid is None:  # refused: the cache is E1's and E2's (live, or their DIRTY blocks)
        refused_other_weights(fleet, "mid", fleet.engines["e1"], fleet.uid_c)
        return
    r = mid.gen(X2)
    tuned = fleet.ref(X2, "ref_tune")
    assert tuned != fleet.ref(X2), "the fine-tune answers as the base model"
    wrong = [f"found {r['cached']} tokens of X' cached (E1's KV)"] if r["cached"] != 0 else []
    if r["tokens"] != tuned:
        wrong.append(f"answers {r['tokens']}, its weights {tuned}")
    assert not wrong, ("MID (other weights, the same kvshare_model_id and cache): "
                       + "; ".join(wrong))
    assert mid.fingerprint != fleet.engines["e1"].fingerprint, (
        "other weights under the same kvshare_model_id: the same fingerprint")


def test_redis_degraded(fleet):
    deg = fleet.get("deg")
    r = deg.gen(X2)
    assert r["tokens"] == fleet.ref(X2), "DEG (Redis unreachable): wrong tokens"
    assert r["cached"] == 0
    text = deg.log()
    # the library's lines name the endpoint "redis <socket>"
    about = re.compile(r"\bredis " + re.escape(fleet.dead))
    lines = [line for line in text.splitlines() if about.search(line)]
    # each store open (vLLM's config check, the worker's, the scheduler's
    # watcher) says it once: "connection not established ..." and "...
    # unreachable at open ..., opened degraded (redis_start_degraded=1) ..."
    opens = sum("opened degraded" in line for line in lines)
    assert opens, f"DEG logged no degraded open of {fleet.dead}:\n{tail(text)}"
    failures = len(lines) - 2 * opens
    # serving X' stored 18 blocks x 2 shards and looked them up, all failing
    assert failures <= 5, (f"{len(lines)} lines about the unreachable Redis, {opens} opens: "
                           f"not rate-limited:\n" + "\n".join(lines))
    bare = [line for line in lines if not VLLM_LINE.match(line)]
    assert not bare, "library lines not in vLLM's format:\n" + "\n".join(bare)
    SUMMARY.append(f"vllm.engine: DEG logged {len(lines)} lines about the unreachable "
                   f"Redis: {opens} store opens, {failures} more")


def _cpus(status_path):
    """The Cpus_allowed_list of a /proc status file, as a set."""
    with open(status_path) as f:
        text = next(line for line in f if line.startswith("Cpus_allowed_list:"))
    cpus = set()
    for run in text.split(":", 1)[1].strip().split(","):
        a, _, b = run.partition("-")
        cpus.update(range(int(a), int(b or a) + 1))
    return cpus


def test_store_threads_not_on_the_workers_core(fleet):
    """E2's workers (TP=2, each bound by vLLM to one core: its OpenMP master
    is the thread that opens the store): the store's dispatcher and copier run
    on every CPU the engine's process may use, not on the worker's one core."""
    e2 = fleet.get("e2")
    allowed = _cpus(f"/proc/{e2.pgid}/status")
    checked = []
    for pid in group_members(e2.pgid):
        try:
            main = _cpus(f"/proc/{pid}/status")
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    name = f.read().strip()
                cpus = _cpus(f"/proc/{pid}/task/{tid}/status")
            except (OSError, StopIteration):
                continue
            if name in ("kvs-dispatch", "kvs-copier") and main < allowed:
                checked.append((pid, name, main, cpus))
    if not checked:
        pytest.skip(f"no worker of E2 is bound to fewer CPUs than its engine ({allowed}): "
                    "nothing to move the store's threads from")
    wrong = [c for c in checked if c[3] != allowed]
    assert not wrong, (f"store threads not on the engine's CPUs {sorted(allowed)}: " +
                       "; ".join(f"pid {p} {n} on {sorted(c)} (its main thread on "
                                 f"{sorted(m)})" for p, n, m, c in wrong))


def test_library_lines_in_vllm_format(fleet):
    """The posix backend's open line ("backend: posix, 1 root(s), ...") of KC's
    worker: in vLLM's log format, and never bare."""
    fleet.once("k_chain", lambda: _k_chain(fleet))
    text = fleet.engines["kc"].log()
    lines = [line for line in text.splitlines() if "backend: posix, " in line]
    assert lines, f"no library line (\"backend: posix, ...\") in KC's log:\n{tail(text)}"
    bare = [line for line in lines if not VLLM_LINE.match(line)]
    assert not bare, "library lines not in vLLM's format:\n" + "\n".join(bare)


def test_no_cache_left_behind(fleet):
    """Once every engine ended (those killed -9 had their caches adopted by
    the next engine, the others exited cleanly), no cache of this run is left
    in /dev/shm: the last clean close removed each."""
    fleet.close()
    left = fleet.leftovers()
    states = ", ".join(f"{e.name} {e.state}" for e in fleet.engines.values())
    assert not left, f"caches left behind: {left} (engines: {states})"
