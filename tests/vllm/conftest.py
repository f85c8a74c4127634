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
