# Tests against the real vLLM (label vllm; docs/vllm.md), in the pinned venv that
# python/vllm-env/env.sh makes outside the repository (made on first use, about 4
# minutes; reused after) by the fixture vllm.env before any test that needs it
# (these, and perf.vllm_load_profile).  Skipped (77), with the reason, where it
# cannot be made.
# Once per build, not in sanitizer or fuzz builds (vLLM's interpreter would need
# the sanitizer runtime preloaded), with the first variant's library:
#   vllm.identity   fingerprints and ids against vLLM's configs and block hasher
#   vllm.connector  the connector's pieces against vLLM's classes, no engine
#   vllm.scheduler  the connector under vLLM's real Scheduler, both roles, no model
#   vllm.engine     15 real engines (a GQA model with real weights), long-lived
#                   servers started concurrently (tests/vllm/engine_server.py),
#                   alone (RUN_SERIAL, below):
#                   TP=1 <-> TP=2 on one cache, counted Redis reads, a failing
#                   backend, engines killed -9 and restarted, fine-tunes and
#                   kvshare_model_id, start-up refusals, Redis degraded,
#                   asynchronous loads (a slow backend, one rank failing); about
#                   4-5 min on 2 cores (the whole label under 10)
list(GET kvs_variants 0 kvs_vllm_variant)
add_test(NAME vllm.env COMMAND ${PROJECT_SOURCE_DIR}/tests/vllm/run.sh --env)
set_tests_properties(vllm.env PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 900
                     LABELS "vllm;python" FIXTURES_SETUP kvs_vllm_env)
foreach(t identity connector scheduler engine)
  add_test(NAME vllm.${t} COMMAND ${PROJECT_SOURCE_DIR}/tests/vllm/run.sh
                                  ${PROJECT_SOURCE_DIR}/tests/vllm/test_${t}.py)
  set_tests_properties(vllm.${t} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 1200
                       LABELS "vllm;python" FIXTURES_REQUIRED kvs_vllm_env
                       ENVIRONMENT "KVSHARE_LIBRARY=$<TARGET_FILE:kvshare_${kvs_vllm_variant}>")
endforeach()
# every wait in it is bounded; this only stops a run gone wrong well past its
# 4-5 minutes.  RUN_SERIAL: its 15 engines take both cores for minutes, and the
# suite's timing-sensitive cases run beside them missed their windows
# (perf.store_sleep's held read, store_record/live_closes' 100 ms timeout_ms)
set_tests_properties(vllm.engine PROPERTIES TIMEOUT 900 RUN_SERIAL TRUE)
