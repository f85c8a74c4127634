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
                       fingerprint_fields, layout_tag, weights_fingerprint)
from .layout import StoredGeometry, geometry, rank_heads

__all__ = ["KVShareConnector", "LAYOUT_VERSION", "StoredGeometry", "block_ids",
           "check_hash_determinism", "fingerprint", "fingerprint_fields", "geometry",
           "layout_tag", "rank_heads", "weights_fingerprint"]


def _resolving_config():
    """The KVTransferConfig vLLM is resolving the connector class for, when
    the caller of __getattr__ is its KVConnectorFactory.get_connector_class,
    else None."""
    import sys

    caller = sys._getframe(2)  # __getattr__'s caller (getattr() has no frame)
    if caller.f_code.co_name != "get_connector_class":
        return None
    return caller.f_locals.get("kv_transfer_config")


def __getattr__(name):
    if name in ("KVShareConnector", "KVShareMetadata", "KVShareStats"):
        from . import connector

        # vLLM resolves the class (getattr on this module) while it builds the
        # engine's config, in the process that starts the engine, before any
        # worker loads weights: the kvshare configuration is checked then, so
        # that a typo fails engine creation in seconds, not after the weights
        # (the constructor checks it again).  Not a module attribute, so that
        # every resolution comes here.
        if name == "KVShareConnector":
            kt = _resolving_config()
            if kt is not None:
                connector.check_transfer_config(kt)
        return getattr(connector, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
