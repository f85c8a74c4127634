"""One real vLLM engine with the kvshare connector, in its own process (run by
test_engine.py): argv[1] is a JSON file of
  {"model": dir, "tp": n, "role": "kv_both"|"kv_producer"|"kv_consumer",
   "kvshare_config": {...}, "unique_id": str, "prompts": [[token ids]],
   "max_tokens": n, "failure_policy": "recompute"|"fail", "connector": bool,
   "kill_at": "layer"|"cached"}  (killing_connector.py: killed -9 while storing)
and argv[2] the JSON file it writes: the fingerprint, and per prompt the
greedy tokens, the tokens vLLM reports cached (num_cached_tokens) and the
kvshare ids of its full blocks (vLLM's own block hasher)."""
import json
import sys

from vllm import LLM, SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.request import Request

import kvshare.vllm as kv

BLOCK = 32


def block_ids(vllm_config, tokens):
    hash_fn = get_hash_fn_by_name(vllm_config.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    req = Request(request_id="ids", prompt_token_ids=tokens,
                  sampling_params=SamplingParams(max_tokens=1), pooling_params=None,
                  block_hasher=get_request_block_hasher(BLOCK, hash_fn))
    return [i.hex() for i in kv.block_ids(req.block_hashes, kv.fingerprint(vllm_config))]


def main():
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    transfer = None
    if spec.get("connector", True):
        killing = "kill_at" in spec
        transfer = {"kv_connector": "KillingConnector" if killing else "KVShareConnector",
                    "kv_connector_module_path": "killing_connector" if killing
                    else "kvshare.vllm",
                    "kv_role": spec.get("role", "kv_both"),
                    "kv_load_failure_policy": spec.get("failure_policy", "recompute"),
                    "kv_connector_extra_config": {
                        "kvshare_config": spec["kvshare_config"],
                        "kvshare_unique_id": spec["unique_id"],
                        "test_kill_at": spec.get("kill_at")}}
    llm = LLM(model=spec["model"], load_format="dummy", skip_tokenizer_init=True,
              enforce_eager=True, dtype="float32", block_size=BLOCK, max_model_len=2048,
              kv_cache_memory_bytes=64 << 20, tensor_parallel_size=spec.get("tp", 1),
              enable_prefix_caching=True, seed=0, kv_transfer_config=transfer)
    params = SamplingParams(max_tokens=spec.get("max_tokens", 4), temperature=0.0,
                            detokenize=False)
    outs = llm.generate([{"prompt_token_ids": p} for p in spec["prompts"]], params,
                        use_tqdm=False)
    cfg = llm.llm_engine.vllm_config
    result = {"fingerprint": kv.fingerprint(cfg).hex(), "prompts": [
        {"tokens": list(o.outputs[0].token_ids), "cached": o.num_cached_tokens,
         "ids": block_ids(cfg, p)} for o, p in zip(outs, spec["prompts"])]}
    with open(sys.argv[2], "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
