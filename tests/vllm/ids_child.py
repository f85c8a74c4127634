"""Run by test_identity in a fresh interpreter: print this process's
fingerprint of the tiny model at argv[1] and the kvshare ids of vLLM's block
hashes of 96 tokens (3 blocks of 32), as hex, one line."""
import sys

from conftest import vllm_config
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.sampling_params import SamplingParams
from vllm.v1.request import Request

import kvshare.vllm as kv

cfg = vllm_config(sys.argv[1])
hash_fn = get_hash_fn_by_name(cfg.cache_config.prefix_caching_hash_algo)
init_none_hash(hash_fn)
req = Request(request_id="r", prompt_token_ids=list(range(7, 103)),
              sampling_params=SamplingParams(max_tokens=1), pooling_params=None,
              block_hasher=get_request_block_hasher(32, hash_fn))
fp = kv.fingerprint(cfg)
print(fp.hex(), " ".join(i.hex() for i in kv.block_ids(req.block_hashes, fp)))
