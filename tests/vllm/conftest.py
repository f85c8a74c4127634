"""Fixtures of the vLLM tests: a model that is only a config.json (a 2-layer
Llama, 2 KV heads of 32, float32: no weights, no tokenizer), and real vLLM
configs built from it."""
import json

import pytest

TINY = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
    "num_key_value_heads": 2, "head_dim": 32, "hidden_act": "silu",
    "max_position_embeddings": 2048, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
    "vocab_size": 1024, "bos_token_id": 1, "eos_token_id": 2,
    "tie_word_embeddings": False, "torch_dtype": "float32",
}


def write_model(path, weights=None, **changes):
    """A model directory: TINY's config.json with changes; with weights (a
    seed), a stand-in weight file too (model.safetensors, one tensor drawn from
    the seed): what the fingerprint reads of a checkpoint, for configs that
    never load their weights (engines with load_format "dummy" need none)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({**TINY, **changes}))
    if weights is not None:
        import torch
        from safetensors.torch import save_file

        g = torch.Generator().manual_seed(weights)
        save_file({"stub": torch.randn(256, generator=g)}, str(path / "model.safetensors"))
    return str(path)


@pytest.fixture
def tiny_model(tmp_path):
    return write_model(tmp_path / "tiny-llama", weights=0)


def vllm_config(model, dtype="float32", block_size=32, hash_algo="sha256", extra=None):
    """A VllmConfig as an engine with the kvshare connector would have."""
    from vllm.config import (CacheConfig, DeviceConfig, KVTransferConfig, ModelConfig,
                             VllmConfig)

    return VllmConfig(
        model_config=ModelConfig(model=model, skip_tokenizer_init=True, dtype=dtype,
                                 max_model_len=2048, seed=0),
        cache_config=CacheConfig(block_size=block_size, enable_prefix_caching=True,
                                 prefix_caching_hash_algo=hash_algo),
        device_config=DeviceConfig("cpu"),
        # vLLM checks at config time that the connector class exists; kvshare's
        # is still to come, so a built-in one carries the extra config (all the
        # fingerprint reads of it).
        kv_transfer_config=KVTransferConfig(kv_connector="ExampleConnector",
                                            kv_role="kv_both",
                                            kv_connector_extra_config=extra or {}))


# -- a model with real weights, for engines (test_engine.py) ---------------

# A GQA Llama: 4 query heads over 2 KV heads of 32 (at TP=2 each rank holds
# one KV head and two query heads), 2 layers, float32.
GQA = {**TINY, "hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 4,
       "num_key_value_heads": 2}
# The weights' scale: each linear layer's output has about GAIN times the
# variance-preserving scale, so attention is sharp and the logits spread (the
# greedy token leads the next by 0.05 or more on test_engine's prompts, against
# float32 noise of 1e-5): a prefix's KV decides the tokens, and wrong KV (a
# head swapped, a block zeroed or shifted) changes all of them (checked with
# transformers on these weights).  With GAIN 1 the prefix hardly matters.
GAIN, LM_GAIN = 2.5, 4.0


def gqa_weights(seed, tune=None):
    """The GQA model's state dict in Hugging Face names, drawn from seed; with
    tune (a second seed) a "fine-tune" of it: every tensor moved by noise of
    half its own scale (same shapes, same config, other KV and tokens)."""
    import torch

    c = GQA
    g = torch.Generator().manual_seed(seed)
    hid, inter, vocab = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    q = c["num_attention_heads"] * c["head_dim"]
    kv = c["num_key_value_heads"] * c["head_dim"]

    def lin(out, inp, gain=GAIN):
        return torch.randn(out, inp, generator=g) * (gain / inp ** 0.5)

    w = {"model.embed_tokens.weight": torch.randn(vocab, hid, generator=g),
         "model.norm.weight": torch.ones(hid), "lm_head.weight": lin(vocab, hid, LM_GAIN)}
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        w.update({p + "self_attn.q_proj.weight": lin(q, hid),
                  p + "self_attn.k_proj.weight": lin(kv, hid),
                  p + "self_attn.v_proj.weight": lin(kv, hid),
                  p + "self_attn.o_proj.weight": lin(hid, q),
                  p + "mlp.gate_proj.weight": lin(inter, hid),
                  p + "mlp.up_proj.weight": lin(inter, hid),
                  p + "mlp.down_proj.weight": lin(hid, inter),
                  p + "input_layernorm.weight": torch.ones(hid),
                  p + "post_attention_layernorm.weight": torch.ones(hid)})
    if tune is not None:
        gt = torch.Generator().manual_seed(tune)
        for name, t in w.items():
            scale = t.std() if t.numel() > 1 and t.std() > 0 else t.abs().mean()
            w[name] = t + torch.randn(t.shape, generator=gt) * (0.5 * scale)
    return w


def write_gqa_model(path, seed=1, tune=None):
    """A loadable checkpoint of the GQA model: config.json and
    model.safetensors (gqa_weights(seed, tune)); writing over an existing one
    keeps its config.json and replaces its weights."""
    from safetensors.torch import save_file

    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(GQA))
    tmp = path / "model.safetensors.tmp"
    save_file({k: v.contiguous() for k, v in gqa_weights(seed, tune).items()}, str(tmp),
              metadata={"format": "pt"})
    tmp.rename(path / "model.safetensors")
    return str(path)


# Lines a test wants in pytest's summary whatever its capture (test_engine.py:
# each engine's start-up time): appended to, printed at the end of the run.
SUMMARY = []


def pytest_terminal_summary(terminalreporter):
    for line in SUMMARY:
        terminalreporter.write_line(line)
