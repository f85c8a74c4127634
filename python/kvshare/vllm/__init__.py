"""kvshare.vllm -- kvshare under vLLM (docs/vllm.md).

KVShareConnector: vLLM's KV connector (v1) over a kvshare store, loaded with
kv_connector="KVShareConnector", kv_connector_module_path="kvshare.vllm"
(connector.py).  identity: which stored blocks an engine may load (the model
fingerprint, the kvshare id of a vLLM block hash) and the refusal to start when
the engine's block hashes would not be the same in another process.  layout:
how a vLLM block is stored, and which shards a rank holds.

Importing this package imports nothing of vLLM: the connector's module (which
needs vLLM) is imported when KVShareConnector is first named.
"""

from .identity import (LAYOUT_VERSION, block_ids, check_hash_determinism, fingerprint,
                       fingerprint_fields)
from .layout import StoredGeometry, geometry, rank_heads

__all__ = ["KVShareConnector", "LAYOUT_VERSION", "StoredGeometry", "block_ids",
           "check_hash_determinism", "fingerprint", "fingerprint_fields", "geometry",
           "rank_heads"]


def __getattr__(name):
    if name in ("KVShareConnector", "KVShareMetadata", "KVShareStats"):
        from . import connector

        return getattr(connector, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
