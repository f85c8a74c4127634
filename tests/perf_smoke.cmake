# Smoke runs of the perf/ scripts (issue 29 item 12): perf.<script> runs one
# with KVS_PERF_SMOKE=1 (tiny sizes, a few seconds, its own code path; each
# script's opening comment says what its smoke mode shrinks) through
# tests/perf_smoke.sh, which checks every line the script promises.  The
# scripts are the ones README.md and docs/*.md quote, read from them here: a
# newly quoted script gets its test, red until tests/perf_smoke.sh knows its
# lines.  Label perf: the sanitizer targets leave it out (Makefile).
#
# Included once per variant by tests/CMakeLists.txt, but a script runs both
# variants of one build directory: added once, with the first variant, and
# only where both are built (not in fuzz builds: plain only).
if(NOT kvs_variants STREQUAL "kernel;plain" OR NOT KVS_V STREQUAL "kernel")
  return()
endif()
file(GLOB kvs_perf_docs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/README.md
     ${PROJECT_SOURCE_DIR}/docs/*.md)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${kvs_perf_docs})
set(kvs_perf_scripts "")
foreach(doc IN LISTS kvs_perf_docs)
  file(STRINGS ${doc} kvs_perf_lines REGEX "perf/[a-z_]+\\.(sh|py)")
  string(REGEX MATCHALL "perf/[a-z_]+\\.(sh|py)" kvs_perf_found "${kvs_perf_lines}")
  list(APPEND kvs_perf_scripts ${kvs_perf_found})
endforeach()
list(REMOVE_DUPLICATES kvs_perf_scripts)
foreach(s IN LISTS kvs_perf_scripts)
  get_filename_component(n ${s} NAME_WE)
  add_test(NAME perf.${n} COMMAND ${PROJECT_SOURCE_DIR}/tests/perf_smoke.sh ${s} ${CMAKE_BINARY_DIR})
  set_tests_properties(perf.${n} PROPERTIES LABELS perf SKIP_RETURN_CODE 77 TIMEOUT 180)
endforeach()
# It runs in the vLLM venv (tests/perf_smoke.sh), made first by the vllm.env
# fixture (tests/vllm.cmake) where the build has it.
if(TEST perf.vllm_load_profile)
  set_tests_properties(perf.vllm_load_profile PROPERTIES FIXTURES_REQUIRED kvs_vllm_env)
endif()
