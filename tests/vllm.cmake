# Tests against the real vLLM (label vllm; docs/vllm.md), in the pinned venv that
# python/vllm/env.sh makes outside the repository (made on first use, about 4
# minutes; reused after).  Skipped (77), with the reason, where it cannot be made.
# Once per build, not in sanitizer or fuzz builds (vLLM's interpreter would need
# the sanitizer runtime preloaded, and nothing of the library's C runs here).
add_test(NAME vllm.identity COMMAND ${PROJECT_SOURCE_DIR}/tests/vllm/run.sh)
set_tests_properties(vllm.identity PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 900
                     LABELS "vllm;python")
