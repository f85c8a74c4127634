"""kvshare.vllm.identity -- the ids vLLM's blocks have in kvshare.

kvshare's 16-byte id of a vLLM block is stable_id(block_hash, namespace=the
engine's fingerprint).  vLLM's block hash covers the tokens and what vLLM
itself keys on (LoRA, multimodal inputs, cache_salt), chained from a root; it
does not cover the model.  The fingerprint covers what makes the KV bytes of
the same tokens differ between engines:

  - the model: its Hugging Face config as vLLM loaded it (overrides included,
    the local path it was read from left out), the model name or path and its
    revision, the load format and the quantization;
  - the weights themselves (weights_fingerprint): two fine-tunes of one
    architecture share a config.json, and a fine-tune saved over a checkpoint's
    directory shares its path too, but not their KV.  Read cheaply, never
    whole: each weight file's size and, for safetensors, its header (tensor
    names, dtypes, shapes, offsets), and a hash of a fixed sample of its bytes;
    a file the Hugging Face cache holds as a link to a blob is named by the blob
    (its sha256 or etag) without reading it.  Computed once per process and
    logged with its cost.  Engines that load the same weights from different
    paths (two hosts sharing a Redis store) name them the same with
    kv_connector_extra_config["kvshare_model_id"], which replaces the name,
    path and revision -- the weights still count.  kvshare_weights_fingerprint
    = False leaves them out (docs/vllm.md says the risk);
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

Each stored block also carries the fingerprint (its first 8 bytes, the store's
layout_tag, layout_tag()): a read of a block stored under another is refused
by the library, so a load of it fails and vLLM recomputes -- even an id that
collides across fingerprints cannot serve another model's KV.
"""

import hashlib
import json
import logging
import os
import time

from ..store import stable_id

# How a stored block lays out a vLLM block (docs/vllm.md): 1, a shard per
# (layer, KV head); 2, a shard per KV head holding every layer.
LAYOUT_VERSION = 2

_RANDOM_ROOT_ALGOS = ("xxhash", "xxhash_cbor")  # random root without PYTHONHASHSEED

EXTRA_MODEL_ID = "kvshare_model_id"           # replaces the model's name, path, revision
EXTRA_WEIGHTS = "kvshare_weights_fingerprint"  # False: the weights are not fingerprinted

# The weight files of a checkpoint directory, and what is read of each.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
SAMPLES = 16                # chunks per file, evenly spread over its tensor bytes
SAMPLE_BYTES = 64 << 10     # bytes per chunk
_SAFETENSORS_HEADER_MAX = 100 << 20  # the format's own limit on the JSON header

# Under vLLM's logger (identity needs no vLLM to import, but its lines belong
# in the engine's log).
logger = logging.getLogger("vllm.kvshare.identity")

_weights_cache = {}  # (real path, load format) -> weights_fingerprint result


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


def _blob_name(path):
    """The Hugging Face cache's name of a file's content (its sha256 or etag:
    the blob a snapshot's file links to), or None for a plain file."""
    if not os.path.islink(path):
        return None
    target = os.path.realpath(path)
    if os.path.basename(os.path.dirname(target)) != "blobs":
        return None
    return os.path.basename(target)


def _sampled(f, h, start, end):
    """Hash SAMPLES chunks of SAMPLE_BYTES evenly spread over [start, end) of
    f (all of it when shorter); the bytes read."""
    span = end - start
    if span <= SAMPLES * SAMPLE_BYTES:
        offsets, size = [start], span
    else:
        # the first chunk at start, the last ending at end, the rest between
        offsets = [start + (span - SAMPLE_BYTES) * i // (SAMPLES - 1) for i in range(SAMPLES)]
        size = SAMPLE_BYTES
    read = 0
    for off in offsets:
        chunk = os.pread(f.fileno(), size, off)
        h.update(off.to_bytes(8, "little") + chunk)
        read += len(chunk)
    return read


def _file_digest(path):
    """One weight file's identity: (hex digest, bytes read).  safetensors: its
    header and a sample of its tensor bytes; other formats: a sample of the
    file; a Hugging Face blob link: the blob's name, nothing read."""
    size = os.path.getsize(path)
    h = hashlib.blake2b(digest_size=16)
    h.update(size.to_bytes(8, "little"))
    blob = _blob_name(path)
    if blob is not None:
        h.update(b"blob:" + blob.encode())
        return h.hexdigest(), 0
    with open(path, "rb") as f:
        start, read = 0, 0
        if path.endswith(".safetensors") and size >= 8:
            n = int.from_bytes(os.pread(f.fileno(), 8, 0), "little")
            if n > min(_SAFETENSORS_HEADER_MAX, size - 8):
                raise ValueError(f"kvshare: {path}: not a safetensors file (header of {n} "
                                 f"bytes in a file of {size})")
            h.update(b"header:" + os.pread(f.fileno(), n, 8))
            start, read = 8 + n, 8 + n
        read += _sampled(f, h, start, size)
    return h.hexdigest(), read


def weight_files(model_dir):
    """The weight files under a checkpoint directory (relative paths, sorted)."""
    out = []
    for d, dirs, files in os.walk(model_dir, followlinks=True):
        dirs[:] = sorted(x for x in dirs if not x.startswith("."))
        for name in files:
            if name.endswith(WEIGHT_SUFFIXES) and not name.startswith("."):
                out.append(os.path.relpath(os.path.join(d, name), model_dir))
    return sorted(out)


def weights_fingerprint(model_dir):
    """The weights of the checkpoint in model_dir, without reading them whole
    (module docstring): a dict {"digest": hex, "files": n, "bytes": total size,
    "read": bytes read, "ms": time}.  Raises ValueError when the directory
    holds no weight file."""
    t0 = time.monotonic()
    files = weight_files(model_dir)
    if not files:
        raise ValueError(f"kvshare: no weight files ({', '.join(WEIGHT_SUFFIXES)}) under "
                         f"{model_dir}: the fingerprint that keeps two models' KV apart "
                         f"covers the weights; give the checkpoint's directory, or set "
                         f"kv_connector_extra_config[{EXTRA_WEIGHTS!r}]=False to leave "
                         f"them out (docs/vllm.md, \"Identity\": the risk)")
    h = hashlib.blake2b(digest_size=32)
    total = read = 0
    for rel in files:
        digest, n = _file_digest(os.path.join(model_dir, rel))
        h.update(f"{rel}\0{digest}\0".encode())
        total += os.path.getsize(os.path.join(model_dir, rel))
        read += n
    return {"digest": h.hexdigest(), "files": len(files), "bytes": total, "read": read,
            "ms": (time.monotonic() - t0) * 1e3}


def _model_dir(vllm_config):
    """The local directory vLLM loads the model's weights from: the model
    itself when it is a directory, else its snapshot in the Hugging Face cache
    (the workers downloaded it before any connector exists); None when neither."""
    mc = vllm_config.model_config
    if os.path.isdir(mc.model):
        return mc.model
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(mc.model, revision=mc.revision, local_files_only=True,
                                 cache_dir=getattr(vllm_config.load_config, "download_dir",
                                                   None))
    except Exception:  # not in the cache (or no hub client): said by the caller
        return None


def _weights_field(vllm_config, load_format):
    """What the fingerprint says of the weights: "dummy" for vLLM's dummy
    weights, None when the user left them out, else weights_fingerprint's
    digest (computed once per process and directory, logged)."""
    if load_format == "dummy":
        return "dummy"
    if extra_config(vllm_config).get(EXTRA_WEIGHTS, True) is False:
        return None
    model_dir = _model_dir(vllm_config)
    if model_dir is None:
        raise ValueError(f"kvshare: the weights of {vllm_config.model_config.model!r} are not "
                         f"in a local directory or the Hugging Face cache, so they cannot be "
                         f"fingerprinted: set kv_connector_extra_config[{EXTRA_WEIGHTS!r}]="
                         f"False and name the model with {EXTRA_MODEL_ID!r} "
                         f"(docs/vllm.md, \"Identity\": the risk)")
    key = (os.path.realpath(model_dir), load_format)
    got = _weights_cache.get(key)
    if got is None:
        got = _weights_cache[key] = weights_fingerprint(model_dir)
        logger.info("kvshare: weights of %s: %d files, %.2f GiB, fingerprint %s in %.0f ms "
                    "(%.1f MiB read)", model_dir, got["files"], got["bytes"] / 2**30,
                    got["digest"][:16], got["ms"], got["read"] / 2**20)
    return got["digest"]


def fingerprint_fields(vllm_config, environ=None):
    """The dict the fingerprint hashes (what it covers, for logs and tests)."""
    import vllm  # only here: importing kvshare.vllm needs no vLLM

    env = os.environ if environ is None else environ
    mc, cc = vllm_config.model_config, vllm_config.cache_config
    hf = {k: v for k, v in mc.hf_config.to_dict().items() if k != "_name_or_path"}
    model_id = extra_config(vllm_config).get(EXTRA_MODEL_ID)
    lc = vllm_config.load_config
    load_format = str(getattr(lc, "load_format", None))
    return {
        "weights": _weights_field(vllm_config, load_format),
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


def layout_tag(fp):
    """The store's layout_tag for fingerprint fp: its first 8 bytes, stored
    with every block and checked at every backend read."""
    return int.from_bytes(fp[:8], "little")


def block_ids(block_hashes, fp):
    """kvshare ids of vLLM block hashes (bytes, or ints with vLLM's integer
    hashes) under fingerprint fp."""
    return [stable_id(h, namespace=fp) for h in block_hashes]
