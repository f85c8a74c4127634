"""kvshare.vllm.identity against vLLM's own config objects and block hasher:
two engine processes configured alike give the same fingerprint and the same
kvshare ids of the same tokens (whatever interpreter hash seed each runs with
by chance: none is set, as in a plain deployment); what makes KV bytes differ
changes the fingerprint (dtype, block size, the model's config, its weights'
name, PYTHONHASHSEED) and the TP degree does not; an engine whose root hash is
random per process is refused, naming the setting and the fix."""
import os
import subprocess
import sys

import pytest

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
    other_model = write_model(tmp_path / "wider", hidden_size=128)
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
    a = write_model(tmp_path / "host-a" / "llama")
    b = write_model(tmp_path / "host-b" / "llama")
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
