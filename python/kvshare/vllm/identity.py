"""kvshare.vllm.identity -- the ids vLLM's blocks have in kvshare.

kvshare's 16-byte id of a vLLM block is stable_id(block_hash, namespace=the
engine's fingerprint).  vLLM's block hash covers the tokens and what vLLM
itself keys on (LoRA, multimodal inputs, cache_salt), chained from a root; it
does not cover the model.  The fingerprint covers what makes the KV bytes of
the same tokens differ between engines:

  - the model: its Hugging Face config as vLLM loaded it (overrides included,
    the local path it was read from left out), the model name or path and its
    revision, the load format and the quantization -- two fine-tunes of one
    architecture share a config.json but not their KV.  Engines that load the
    same weights from different paths (two hosts sharing a Redis store) name
    them the same with kv_connector_extra_config["kvshare_model_id"], which
    replaces the name, path and revision;
  - the dtype and the KV-cache dtype, the block size;
  - the hash algorithm and PYTHONHASHSEED, which seeds vLLM's root hash;
  - the stored layout's version (LAYOUT_VERSION) and vLLM's version.

Not the tensor-parallel degree: a stored block holds every head, and each
rank loads its heads (layout.py; docs/vllm.md, "One stored block serves every
TP degree") -- except with load_format "dummy", whose random weights, and so
their KV, differ between TP degrees.

A fingerprint is only worth having if the hashes under it are the same in
every process: check_hash_determinism refuses (ValueError naming the setting
and the fix) an engine whose root hash is random per process.
"""

import hashlib
import json
import os

from ..store import stable_id

LAYOUT_VERSION = 1  # how a stored block lays out a vLLM block (docs/vllm.md)

_RANDOM_ROOT_ALGOS = ("xxhash", "xxhash_cbor")  # random root without PYTHONHASHSEED


def extra_config(vllm_config):
    """The engine's kv_connector_extra_config ({} without one)."""
    kt = vllm_config.kv_transfer_config
    return (kt.kv_connector_extra_config or {}) if kt is not None else {}


def check_hash_determinism(vllm_config, environ=None):
    """Raise ValueError unless this engine's block hashes are the same in any
    other process configured alike: vLLM seeds its root hash from
    PYTHONHASHSEED when set, and with the xxhash algorithms from a random
    value per process when not."""
    env = os.environ if environ is None else environ
    algo = vllm_config.cache_config.prefix_caching_hash_algo
    if algo in _RANDOM_ROOT_ALGOS and env.get("PYTHONHASHSEED") is None:
        raise ValueError(
            f"kvshare: prefix_caching_hash_algo={algo!r} without PYTHONHASHSEED gives every "
            f"vLLM process a random root hash, so no two engines would ever find each "
            f"other's blocks: set PYTHONHASHSEED (the same value in every engine) or use "
            f"prefix_caching_hash_algo='sha256' (the default)")


def fingerprint_fields(vllm_config, environ=None):
    """The dict the fingerprint hashes (what it covers, for logs and tests)."""
    import vllm  # only here: importing kvshare.vllm needs no vLLM

    env = os.environ if environ is None else environ
    mc, cc = vllm_config.model_config, vllm_config.cache_config
    hf = {k: v for k, v in mc.hf_config.to_dict().items() if k != "_name_or_path"}
    model_id = extra_config(vllm_config).get("kvshare_model_id")
    lc = vllm_config.load_config
    load_format = str(getattr(lc, "load_format", None))
    return {
        "layout": LAYOUT_VERSION,
        "vllm": vllm.__version__,
        "hf_config": hf,
        "model": model_id if model_id is not None else [mc.model, mc.revision],
        "load_format": load_format,
        # dummy weights are drawn per rank shard: their KV depends on the TP degree
        "dummy_tp": (vllm_config.parallel_config.tensor_parallel_size
                     if load_format == "dummy" else None),
        "quantization": mc.quantization,
        "dtype": str(mc.dtype),
        "kv_cache_dtype": str(cc.cache_dtype),
        "block_size": cc.block_size,
        "hash_algo": cc.prefix_caching_hash_algo,
        "pythonhashseed": env.get("PYTHONHASHSEED"),
    }


def fingerprint(vllm_config, environ=None):
    """32 bytes naming what makes this engine's KV bytes what they are (module
    docstring); refuses engines whose block hashes are random per process."""
    check_hash_determinism(vllm_config, environ)
    canon = json.dumps(fingerprint_fields(vllm_config, environ), sort_keys=True,
                       separators=(",", ":"), default=str)
    return hashlib.blake2b(canon.encode(), digest_size=32).digest()


def block_ids(block_hashes, fp):
    """kvshare ids of vLLM block hashes (bytes, or ints with vLLM's integer
    hashes) under fingerprint fp."""
    return [stable_id(h, namespace=fp) for h in block_hashes]
