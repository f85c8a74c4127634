"""The connector inside real vLLM engines (CPU, dummy weights of the tiny
model): each engine is its own process (engine_child.py), one after another,
on one node's kvshare store.

Engine A computes prompt X and saves it.  Engine B, a fresh process, gets X'
= X's first 17 blocks + one block of other tokens: it must load the 17 blocks
from kvshare (vLLM reports 544 of its 576 tokens cached) and compute the last
one.  Engine R, on a store of its own, computes X' from nothing and saves it
(kv_producer: it never loads).  Dummy models' greedy tokens do not show wrong
KV (docs/vllm.md), so the KV bytes are compared: the stored blocks of X' must
be R's bit for bit -- the 17 that A computed (determinism) and the one B
computed after its load, which attends over the loaded KV: a load into the
wrong blocks, of the wrong heads or of nothing changes it.  The tokens of B
and R must be equal too.  Engine F then meets the same stored blocks with a
backend whose every read fails: its loads fail, vLLM recomputes, the tokens
are still R's (never wrong KV, never a hang).

TP=1 on the posix backend; TP=2 (the ranks save and load their own heads of
one stored block) on a Redis server the test starts, where the shard reads
and writes are counted: each stored shard is written once and read once."""
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import kvshare

HERE = os.path.dirname(os.path.abspath(__file__))
BLOCK = 32
LAYERS, HEADS, HEAD_DIM = 2, 2, 32           # conftest.TINY
SHARD = 2 * BLOCK * HEAD_DIM * 4             # a (layer, head) of a block, float32
SPB = LAYERS * HEADS
SHARED = 17                                  # blocks X' shares with X

rng = random.Random(23)
X = [rng.randrange(3, 1000) for _ in range(18 * BLOCK)]
X2 = X[:SHARED * BLOCK] + [rng.randrange(3, 1000) for _ in range(BLOCK)]


def run_engine(tmp_path, name, killed=False, **spec):
    """Run one engine to completion, its result (engine_child.py); killed:
    it must die (kill_at), its log."""
    spec.setdefault("max_tokens", 4)
    path, out, log = (tmp_path / f"{name}.{ext}" for ext in ("json", "out", "log"))
    path.write_text(json.dumps(spec))
    env = dict(os.environ)
    env["PYTHONPATH"] = HERE + os.pathsep + env.get("PYTHONPATH", "")
    if spec.get("tp", 1) > 1:
        env["VLLM_CPU_OMP_THREADS_BIND"] = "|".join(str(c % os.cpu_count())
                                                    for c in range(spec["tp"]))
    t0 = time.monotonic()
    with open(log, "w") as f:
        rc = subprocess.run([sys.executable, os.path.join(HERE, "engine_child.py"), str(path),
                             str(out)], env=env, stdout=f, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, timeout=600).returncode
    text = log.read_text()
    if killed:
        assert rc != 0 and not out.exists(), f"engine {name} was not killed:\n{text[-3000:]}"
        print(f"engine {name}: killed -9 while storing after {time.monotonic() - t0:.0f} s")
        return text
    if rc != 0:
        pytest.fail(f"engine {name} exited {rc}:\n" + "\n".join(text.splitlines()[-40:]))
    print(f"engine {name}: {time.monotonic() - t0:.0f} s")
    result = json.loads(out.read_text())
    result["log"] = text
    return result


def read_blocks(config, ids):
    """The stored bytes of blocks, read back through a fresh cache."""
    keys = {"unique_id": f"vt-read-{os.getpid()}-{time.monotonic_ns()}", "device_id": 0,
            "shard_size": SHARD, "block_size": SHARD * SPB, "copy_engine": "host",
            "cache_buffer_capacity_gb": 0.01, **config}
    with kvshare.Store(keys) as s:
        out = np.zeros((len(ids), SHARD * SPB), dtype=np.uint8)
        assert s.load([bytes.fromhex(i) for i in ids], list(out)).wait()
        return out


def layout_tag(result):
    """The layout_tag the engine's blocks are stored with (its fingerprint's)."""
    return int.from_bytes(bytes.fromhex(result["fingerprint"])[:8], "little")


def check_stored(b, r, store_of_b, store_of_r):
    """The stored blocks of X' are R's bit for bit (those B loaded and the one
    it computed after its load), and B's tokens are R's."""
    pb, pr = b["prompts"][0], r["prompts"][0]
    assert pr["cached"] == 0 and pb["ids"] == pr["ids"]
    kv_b = read_blocks({**store_of_b, "layout_tag": layout_tag(b)}, pb["ids"])
    kv_r = read_blocks({**store_of_r, "layout_tag": layout_tag(r)}, pr["ids"])
    for i in range(len(pb["ids"])):
        assert np.array_equal(kv_b[i], kv_r[i]), (
            f"block {i} ({'computed by B after its load' if i == SHARED else 'A'}) is not "
            f"the KV engine R computed")
    assert pb["tokens"] == pr["tokens"]


def check_pair(a, b, r, store_of_ab, store_of_r):
    assert a["fingerprint"] == b["fingerprint"] == r["fingerprint"]
    pa, pb = a["prompts"][0], b["prompts"][0]
    assert pa["cached"] == 0
    # B matched the 17 shared blocks (at least 480 of the 512-token prefix)
    assert pb["cached"] == SHARED * BLOCK, b["log"][-3000:]
    assert pb["ids"][:SHARED] == pa["ids"][:SHARED]
    check_stored(b, r, store_of_ab, store_of_r)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """The tiny model, one directory for the module: its path is in the
    fingerprint, so engines that share blocks load it from the same place."""
    from conftest import write_model

    return write_model(tmp_path_factory.mktemp("model") / "tiny-llama")


STORE1 = {"backend": "posix", "fsync": 0, "cache_buffer_capacity_gb": 0.05}


@pytest.fixture(scope="module")
def ref1(tmp_path_factory, model):
    """Engine R at TP=1: X' computed from nothing on a store of its own, and
    that store's keys."""
    tmp = tmp_path_factory.mktemp("ref1")
    (tmp / "store").mkdir()
    r = run_engine(tmp, "r", model=model, unique_id=f"vt-{os.getpid()}r", prompts=[X2],
                   role="kv_producer",
                   kvshare_config={**STORE1, "backend_roots": str(tmp / "store")})
    return r, {"backend": "posix", "backend_roots": str(tmp / "store")}


def test_tp1_pair(tmp_path, model, ref1):
    r, store_of_r = ref1
    shared = tmp_path / "shared"
    shared.mkdir()
    uid = f"vt-{os.getpid()}"
    a = run_engine(tmp_path, "a", model=model, unique_id=uid, prompts=[X],
                   kvshare_config={**STORE1, "backend_roots": str(shared)})
    b = run_engine(tmp_path, "b", model=model, unique_id=uid, prompts=[X2],
                   kvshare_config={**STORE1, "backend_roots": str(shared)})
    check_pair(a, b, r, {"backend": "posix", "backend_roots": str(shared)}, store_of_r)
    # Engine F finds the same 17 blocks stored, but every backend read fails:
    # its loads fail, vLLM recomputes those blocks, and the tokens are R's.
    f = run_engine(tmp_path, "f", model=model, unique_id=uid + "f", prompts=[X2],
                   role="kv_consumer", kvshare_config={
                       **STORE1, "backend_roots": str(shared), "fault_error_ppm": 1000000})
    assert "blocks are recomputed" in f["log"], f["log"][-3000:]
    assert f["prompts"][0]["tokens"] == r["prompts"][0]["tokens"]


def block_files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root)
                  for d, _, files in os.walk(root) for f in files)


@pytest.mark.parametrize("kill_at", ["layer", "cached"])
def test_tp1_killed_while_storing(tmp_path, model, ref1, kill_at):
    """Engine A is killed -9 while it stores X (killing_connector.py): after
    its first layer's dump ("layer": no block of X ever gets its second
    layer), or once its dumps are in the shared cache ("cached": every block
    complete there, its backend write left to a dead rank).  Engine B, on the
    cache A left behind, never loads a partial block: none of X at "layer"
    (B computes X' itself), the 17 complete ones at "cached"; the blocks of X'
    stored after B are R's bit for bit, and B's tokens are R's."""
    r, store_of_r = ref1
    shared = tmp_path / "shared"
    shared.mkdir()
    uid = f"vk-{kill_at}-{os.getpid()}"
    keys = {**STORE1, "backend_roots": str(shared)}
    log = run_engine(tmp_path, "a", killed=True, model=model, unique_id=uid, prompts=[X],
                     kill_at=kill_at, kvshare_config=keys)
    if kill_at == "layer":
        assert block_files(shared) == [], "a block of X was written with one layer of two"
    b = run_engine(tmp_path, "b", model=model, unique_id=uid, prompts=[X2],
                   kvshare_config=keys)
    want = 0 if kill_at == "layer" else SHARED * BLOCK
    assert b["prompts"][0]["cached"] == want, (b["log"][-3000:], log[-2000:])
    check_stored(b, r, {"backend": "posix", "backend_roots": str(shared)}, store_of_r)


class Redis:
    """A redis-server on a unix socket under a tmp dir, with its command counts."""

    def __init__(self, tmp):
        exe = shutil.which("redis-server") or shutil.which("valkey-server")
        if exe is None:
            pytest.skip("no redis-server or valkey-server (apt-get install redis-server)")
        self.sock = str(tmp / "redis.sock")
        self.proc = subprocess.Popen([exe, "--port", "0", "--unixsocket", self.sock,
                                      "--save", "", "--appendonly", "no"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            if os.path.exists(self.sock):
                break
            time.sleep(0.05)

    def counts(self):
        """Calls per command (INFO commandstats), e.g. {"get": 68, "set": 72}."""
        with socket.socket(socket.AF_UNIX) as c:
            c.connect(self.sock)
            c.sendall(b"INFO commandstats\r\n")
            data = b""
            while b"\r\n" not in data:  # the bulk reply's "$<length>" line
                data += c.recv(65536)
            head, _, body = data.partition(b"\r\n")
            while len(body) < int(head[1:]) + 2:
                body += c.recv(65536)
            data = body
        out = {}
        for line in data.decode().splitlines():
            if line.startswith("cmdstat_"):
                name, rest = line[len("cmdstat_"):].split(":", 1)
                out[name] = int(rest.split("calls=")[1].split(",")[0])
        return out

    def close(self):
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def redis(tmp_path):
    r = Redis(tmp_path)
    yield r
    r.close()


def test_tp2_pair(tmp_path, model, redis):
    uid = f"vt2-{os.getpid()}"
    store = {"backend": "redis", "redis_endpoints": redis.sock,
             "cache_buffer_capacity_gb": 0.05}
    a = run_engine(tmp_path, "a2", model=model, tp=2, unique_id=uid, prompts=[X],
                   kvshare_config={**store, "redis_key_prefix": "ab:"})
    after_a = redis.counts()
    b = run_engine(tmp_path, "b2", model=model, tp=2, unique_id=uid, prompts=[X2],
                   kvshare_config={**store, "redis_key_prefix": "ab:"})
    after_b = redis.counts()
    r = run_engine(tmp_path, "r2", model=model, tp=2, unique_id=uid + "r", prompts=[X2],
                   role="kv_producer", kvshare_config={**store, "redis_key_prefix": "r:"})
    # A's two ranks each dumped their heads; every stored shard was written once
    assert after_a.get("set", 0) == 18 * SPB and after_a.get("get", 0) == 0
    # B's ranks read each shard of the 17 blocks once (each its own heads) and
    # wrote the one block they computed
    assert after_b.get("get", 0) == SHARED * SPB
    assert after_b["set"] - after_a["set"] == SPB
    check_pair(a, b, r, {"backend": "redis", "redis_endpoints": redis.sock,
                         "redis_key_prefix": "ab:"},
               {"backend": "redis", "redis_endpoints": redis.sock, "redis_key_prefix": "r:"})
