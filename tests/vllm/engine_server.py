"""One real vLLM engine, long-lived, driven by test_engine.py over pipes.

    python engine_server.py SPEC.json REPLY_FD

SPEC.json: {"model": dir, "tp": n, "connector": bool (default true),
  "role": "kv_both"|"kv_producer"|"kv_consumer", "kvshare_config": {...},
  "unique_id": kvshare_unique_id, "model_id": kvshare_model_id,
  "weights_fingerprint": kvshare_weights_fingerprint,
  "failure_policy": "recompute"|"fail", "extra": more kv_connector_extra_config
  keys (e.g. kvshare_load_mode), "executor": vLLM's
  distributed_executor_backend (e.g. "uni": the worker in the engine's own
  process), "connector_class": "module:Class" (a test-only connector,
  killing_connector.py), "kill_at"/"kill_file"/"kill_marker"/"open_after"
  (KillingConnector: where its rank kills itself -9, the file that arms it,
  the file it writes first; the file its ranks wait for before they open
  their stores)}.
  Or {"attempts": {name: spec}}: engines that must be refused (attempts()).

The engine is made once: LLM(...) with real weights (load_format
"safetensors"), float32, block_size 32, eager, no tokenizer.  Then REPLY_FD
gets one JSON line {"ready": true, "startup_s": LLM()'s seconds, "t": the
time.time() it was ready, "fingerprint": hex|null};
where the engine cannot be made the process exits 3 instead, the traceback in
its log.  Then one JSON command per line on stdin, one JSON reply per line on
REPLY_FD:
  {"op": "generate", "prompts": [[token ids]], "max_tokens": n, "logprobs": bool}
      -> {"prompts": [{"tokens": greedy tokens, "cached": num_cached_tokens,
                       "gap": with logprobs, the smallest lead of the greedy
                              token's logprob over the runner-up's, over the
                              tokens (else null),
                       "ids": kvshare ids of its full blocks (hex; vLLM's
                              own block hasher; [] without a connector)}]}
  {"op": "reset"}  -> {"ok": llm.reset_prefix_cache()}: vLLM's local prefix
                      cache emptied, so the next prompt's blocks come from
                      kvshare
  {"op": "abort_during_load", "prompt": [token ids], "timeout": s}
      -> {"waiting": whether the request was WAITING_FOR_REMOTE_KVS (its load
                     running) when aborted,
          "free_before", "free_after": vLLM's free KV blocks before the request
                     and once the engine has nothing left to step for it,
          "steps": steps after the abort}: the request is added, stepped
      until its asynchronous load runs, aborted there, and the engine stepped
      until it has no request left (or timeout); in-process engine core only
  {"op": "exit"}   -> {"ok": true}; the engine is shut down, exit 0.
stdin's end (the test gone) also shuts it down, and the parent's death sends
it SIGTERM.  stdout and stderr are the engine's log: vLLM's lines, the
connector's, the library's."""
import ctypes
import json
import os
import signal
import sys
import time
import traceback

BLOCK = 32


def make_llm(spec):
    from vllm import LLM

    transfer = None
    if spec.get("connector", True):
        module, cls = "kvshare.vllm", "KVShareConnector"
        if "kill_at" in spec or "open_after" in spec:
            module, cls = "killing_connector", "KillingConnector"
        if spec.get("connector_class"):
            module, cls = spec["connector_class"].split(":")
        extra = {"kvshare_config": spec.get("kvshare_config", {})}
        if spec.get("unique_id"):
            extra["kvshare_unique_id"] = spec["unique_id"]
        if spec.get("model_id"):
            extra["kvshare_model_id"] = spec["model_id"]
        if "weights_fingerprint" in spec:
            extra["kvshare_weights_fingerprint"] = spec["weights_fingerprint"]
        for key in ("kill_at", "kill_file", "kill_marker", "open_after"):
            if key in spec:
                extra["test_" + key] = spec[key]
        extra.update(spec.get("extra", {}))
        transfer = {"kv_connector": cls, "kv_connector_module_path": module,
                    "kv_role": spec.get("role", "kv_both"),
                    "kv_load_failure_policy": spec.get("failure_policy", "recompute"),
                    "kv_connector_extra_config": extra}
    return LLM(model=spec["model"], load_format=spec.get("load_format", "safetensors"),
               skip_tokenizer_init=True, enforce_eager=True, dtype="float32",
               block_size=BLOCK, max_model_len=2048, max_num_seqs=8,
               kv_cache_memory_bytes=spec.get("kv_cache_bytes", 32 << 20),
               tensor_parallel_size=spec.get("tp", 1),
               distributed_executor_backend=spec.get("executor"),
               enable_prefix_caching=True, seed=0, kv_transfer_config=transfer)


def block_ids(vllm_config, tokens):
    import kvshare.vllm as kv
    from vllm import SamplingParams
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.request import Request

    hash_fn = get_hash_fn_by_name(vllm_config.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    req = Request(request_id="ids", prompt_token_ids=tokens,
                  sampling_params=SamplingParams(max_tokens=1), pooling_params=None,
                  block_hasher=get_request_block_hasher(BLOCK, hash_fn))
    return [i.hex() for i in kv.block_ids(req.block_hashes, kv.fingerprint(vllm_config))]


def generate(llm, cmd, with_ids):
    from vllm import SamplingParams

    # logprobs only where asked: their first use compiles (torch.compile, ~3 s)
    params = SamplingParams(max_tokens=cmd.get("max_tokens", 8), temperature=0.0,
                            detokenize=False, ignore_eos=True,
                            logprobs=2 if cmd.get("logprobs") else None)
    prompts = cmd["prompts"]
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
    cfg = llm.llm_engine.vllm_config
    res = []
    for o, p in zip(outs, prompts):
        c = o.outputs[0]
        gaps = []
        for tok, lp in zip(c.token_ids, c.logprobs or []):
            best = sorted((v.logprob for v in lp.values()), reverse=True)
            # the greedy token not the most likely one: no lead at all
            gaps.append(best[0] - best[1] if lp[tok].logprob == best[0] else 0.0)
        res.append({"tokens": list(c.token_ids), "cached": o.num_cached_tokens,
                    "gap": min(gaps) if gaps else None,
                    "ids": block_ids(cfg, p) if with_ids else []})
    return {"prompts": res}


def abort_during_load(llm, cmd):
    from vllm import SamplingParams
    from vllm.v1.request import RequestStatus

    engine = llm.llm_engine
    sched = engine.engine_core.engine_core.scheduler  # in-process core (InprocClient)
    pool = sched.kv_cache_manager.block_pool
    free_before = pool.get_num_free_blocks()
    rid = f"abort-{time.monotonic_ns()}"
    # vLLM makes the id unique inside (a suffix): the scheduler knows that one
    internal = engine.add_request(rid, {"prompt_token_ids": cmd["prompt"]},
                                  SamplingParams(max_tokens=4, temperature=0.0,
                                                 detokenize=False, ignore_eos=True))
    deadline = time.monotonic() + cmd.get("timeout", 60)
    waiting = False
    while time.monotonic() < deadline:
        engine.step()
        req = sched.requests.get(internal)
        if req is not None and req.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
            waiting = True
            break
        if req is None:
            break
    engine.abort_request([rid])
    steps = 0
    while time.monotonic() < deadline and (engine.has_unfinished_requests()
                                           or sched.has_requests()):
        engine.step()
        steps += 1
    return {"waiting": waiting, "free_before": free_before,
            "free_after": pool.get_num_free_blocks(), "steps": steps}


def attempts(spec, send):
    """Engines that must not be made, one after another in this process:
    per attempt a log line "engine_server: attempt NAME" and a reply
    {"name": NAME, "refused": true, "error": str(the exception)}; an engine
    that is made ends the process at once (exit 4, after a reply with
    "refused": false)."""
    for name, one in spec["attempts"].items():
        print(f"engine_server: attempt {name}", flush=True)
        try:
            make_llm(one)
        except Exception as e:
            traceback.print_exc()
            sys.stderr.flush()
            send({"name": name, "refused": True, "error": str(e)})
            continue
        send({"name": name, "refused": False})
        os._exit(4)
    print("engine_server: attempts done", flush=True)


def main():
    # the test's death ends the engine (its own processes watch this one)
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    reply = os.fdopen(int(sys.argv[2]), "w", buffering=1)
    os.set_inheritable(reply.fileno(), False)

    def send(obj):
        reply.write(json.dumps(obj) + "\n")
        reply.flush()

    if "attempts" in spec:
        return attempts(spec, send)

    t0 = time.monotonic()
    try:
        llm = make_llm(spec)
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(3)
    with_connector = spec.get("connector", True)
    fp = None
    if with_connector:
        import kvshare.vllm as kv

        fp = kv.fingerprint(llm.llm_engine.vllm_config).hex()
    print(f"engine_server: engine made in {time.monotonic() - t0:.1f} s", flush=True)
    send({"ready": True, "startup_s": time.monotonic() - t0, "t": time.time(),
          "fingerprint": fp})
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "generate":
            send(generate(llm, cmd, with_connector))
        elif op == "abort_during_load":
            send(abort_during_load(llm, cmd))
        elif op == "reset":
            send({"ok": bool(llm.reset_prefix_cache())})
        elif op == "exit":
            send({"ok": True})
            break
        else:
            send({"error": f"unknown op {op!r}"})
    print("engine_server: shutting down", flush=True)


if __name__ == "__main__":
    main()
