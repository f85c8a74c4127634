"""kvshare.vllm.identity against vLLM's own config objects and block hasher:
two engine processes configured alike give the same fingerprint and the same
kvshare ids of the same tokens (whatever interpreter hash seed each runs with
by chance: none is set, as in a plain deployment); what makes KV bytes differ
changes the fingerprint (dtype, block size, the model's config, its name,
its weights, PYTHONHASHSEED) and the TP degree does not; an engine whose root
hash is random per process is refused, naming the setting and the fix.

The weights: a fine-tune saved over a checkpoint's directory (same
config.json, same path) and two checkpoints given one kvshare_model_id get
different fingerprints; the same weights from two paths under one
kvshare_model_id the same; a safetensors header (a renamed tensor) or a
sampled byte changes it; a Hugging Face blob link is named by its blob,
nothing read; no weight files at all is refused naming the opt-out, which
leaves the weights out."""
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import save_file

import kvshare.vllm as kv
from conftest import vllm_config, write_model

HERE = os.path.dirname(os.path.abspath(__file__))


def _child(model):
    env = dict(os.environ)
    env["PYTHONPATH"] = HERE + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, os.path.join(HERE, "ids_child.py"), model], env=env,
                         check=True, capture_output=True, text=True,
                         stdin=subprocess.DEVNULL).stdout.strip().splitlines()[-1]
    fp, *ids = out.split()
    return fp, ids


def test_same_in_two_processes(tiny_model):
    a, b = _child(tiny_model), _child(tiny_model)
    assert a == b
    fp, ids = a
    assert fp == kv.fingerprint(vllm_config(tiny_model)).hex()
    assert len(ids) == 3 and len(set(ids)) == 3  # 96 tokens: 3 full blocks


def test_what_changes_kv_changes_it(tiny_model, tmp_path):
    base = kv.fingerprint(vllm_config(tiny_model))
    other_model = write_model(tmp_path / "wider", weights=0, hidden_size=128)
    changed = {
        "dtype": kv.fingerprint(vllm_config(tiny_model, dtype="bfloat16")),
        "block_size": kv.fingerprint(vllm_config(tiny_model, block_size=64)),
        "hf_config": kv.fingerprint(vllm_config(other_model)),
        "model_id": kv.fingerprint(vllm_config(tiny_model, extra={"kvshare_model_id": "x"})),
        "seed": kv.fingerprint(vllm_config(tiny_model), environ={"PYTHONHASHSEED": "5"}),
    }
    for what, fp in changed.items():
        assert fp != base, what
    assert len(set(changed.values())) == len(changed)


def test_not_the_tp_degree(tiny_model):
    cfg1, cfg2 = vllm_config(tiny_model), vllm_config(tiny_model)
    cfg2.parallel_config.tensor_parallel_size = 2
    assert kv.fingerprint_fields(cfg1) == kv.fingerprint_fields(cfg2)
    assert kv.fingerprint(cfg1) == kv.fingerprint(cfg2)
    # dummy weights are drawn per TP degree: their KV differs, so does the id
    cfg1.load_config.load_format = cfg2.load_config.load_format = "dummy"
    assert kv.fingerprint(cfg1) != kv.fingerprint(cfg2)


def test_same_weights_from_two_paths(tmp_path):
    a = write_model(tmp_path / "host-a" / "llama", weights=0)
    b = write_model(tmp_path / "host-b" / "llama", weights=0)
    assert kv.fingerprint(vllm_config(a)) != kv.fingerprint(vllm_config(b))  # paths differ
    named = {"kvshare_model_id": "tiny-llama@1"}
    assert kv.fingerprint(vllm_config(a, extra=named)) == kv.fingerprint(vllm_config(b, extra=named))
    assert "_name_or_path" not in kv.fingerprint_fields(vllm_config(a))["hf_config"]


def test_random_root_refused(tiny_model):
    cfg = vllm_config(tiny_model, hash_algo="xxhash")
    with pytest.raises(ValueError, match="PYTHONHASHSEED") as ei:
        kv.fingerprint(cfg, environ={})
    assert "prefix_caching_hash_algo='xxhash'" in str(ei.value)
    assert "sha256" in str(ei.value)  # the fix
    assert len(kv.fingerprint(cfg, environ={"PYTHONHASHSEED": "0"})) == 32


def _fp(model, **extra):
    kv.identity._weights_cache.clear()  # once per process in an engine; here per call
    return kv.fingerprint(vllm_config(model, extra=extra or None))


def _save(path, tensors):
    path.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path / "model-00001-of-00001.safetensors"))


def _weights(seed, n=1 << 20):
    g = torch.Generator().manual_seed(seed)
    return {"model.embed_tokens.weight": torch.randn(n // 256, 256, generator=g),
            "lm_head.weight": torch.randn(n // 256, 256, generator=g)}


def test_weights_change_it(tmp_path):
    """The issue's failures: a fine-tune saved over the checkpoint's directory,
    and two checkpoints given one kvshare_model_id, had one fingerprint (engine
    B then reported 576 tokens cached and served neither model's output)."""
    model = write_model(tmp_path / "ckpt")
    _save(tmp_path / "ckpt", _weights(1))
    before = _fp(model)
    _save(tmp_path / "ckpt", _weights(2))  # the fine-tune, over it
    assert _fp(model) != before
    other = write_model(tmp_path / "other")
    _save(tmp_path / "other", _weights(3))
    named = {"kvshare_model_id": "llama-ft"}
    assert _fp(model, **named) != _fp(other, **named)
    # the same weights from another path, under one name: the same
    same = write_model(tmp_path / "host-b")
    _save(tmp_path / "host-b", _weights(2))
    assert _fp(model, **named) == _fp(same, **named)
    # the opt-out: the weights are left out, the two checkpoints collide (the risk)
    off = {**named, "kvshare_weights_fingerprint": False}
    assert _fp(model, **off) == _fp(other, **off)
    assert kv.fingerprint_fields(vllm_config(model, extra=off))["weights"] is None


def test_header_and_sampled_bytes(tmp_path):
    """What the weights' digest reads: the safetensors header (a renamed
    tensor, same bytes), a byte at a sampled offset; and what it costs: the
    header and 16 x 64 KiB per file, not the file."""
    d = tmp_path / "w"
    t = _weights(4, n=4 << 20)  # 32 MiB
    _save(d, t)
    base = kv.weights_fingerprint(str(d))
    assert base["files"] == 1 and base["read"] < 2 << 20 < base["bytes"]
    _save(d, {("model.norm.weight" if k == "lm_head.weight" else k): v for k, v in t.items()})
    assert kv.weights_fingerprint(str(d))["digest"] != base["digest"]
    _save(d, t)
    assert kv.weights_fingerprint(str(d))["digest"] == base["digest"]
    f = d / "model-00001-of-00001.safetensors"
    with open(f, "r+b") as fh:  # the last byte: the last sample's
        fh.seek(-1, os.SEEK_END)
        last = fh.read(1)
        fh.seek(-1, os.SEEK_END)
        fh.write(bytes([last[0] ^ 1]))
    assert kv.weights_fingerprint(str(d))["digest"] != base["digest"]


def test_hub_blob_named_not_read(tmp_path):
    """A snapshot of the Hugging Face cache links each file to blobs/<sha256>:
    the blob's name is the content's, so nothing is read; another blob (a new
    revision) changes it."""
    blobs = tmp_path / "hub" / "blobs"
    blobs.mkdir(parents=True)
    snap = tmp_path / "hub" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (blobs / ("a" * 64)).write_bytes(b"x" * 4096)
    (blobs / ("b" * 64)).write_bytes(b"x" * 4096)
    link = snap / "model.safetensors"
    link.symlink_to(blobs / ("a" * 64))
    a = kv.weights_fingerprint(str(snap))
    assert a["read"] == 0
    link.unlink()
    link.symlink_to(blobs / ("b" * 64))
    assert kv.weights_fingerprint(str(snap))["digest"] != a["digest"]


def test_no_weights_refused(tmp_path):
    model = write_model(tmp_path / "config-only")
    with pytest.raises(ValueError, match="kvshare_weights_fingerprint") as ei:
        _fp(model)
    assert "no weight files" in str(ei.value) and model in str(ei.value)
    assert len(_fp(model, kvshare_weights_fingerprint=False)) == 32
