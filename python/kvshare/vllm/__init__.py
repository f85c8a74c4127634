"""kvshare.vllm -- kvshare under vLLM (docs/vllm.md).

identity: which stored blocks an engine may load (the model fingerprint, the
kvshare id of a vLLM block hash) and the refusal to start when the engine's
block hashes would not be the same in another process.  The KV connector
itself is still to come (issue 23).  Importing this package imports nothing of
vLLM; its functions take vLLM's own config objects.
"""

from .identity import (LAYOUT_VERSION, block_ids, check_hash_determinism, fingerprint,
                       fingerprint_fields)

__all__ = ["LAYOUT_VERSION", "block_ids", "check_hash_determinism", "fingerprint",
           "fingerprint_fields"]
