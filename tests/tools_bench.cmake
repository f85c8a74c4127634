# Tests of `kvshare bench` (tools/bench.c), driven end to end as a user runs it
# (tests/tools_bench.sh): tiny three-way runs (kernel shared, plain shared by
# re-execution against the plain library, private), each configuration --repeat
# times, bytes verified, backend reads in every shared run equal to the unique
# shards (from --json, and --check), shared and private caches on the same
# memory (also with a hugepage pool that holds one cache, not one per rank),
# Mooncake traces whole and capped, --backend redis against a redis-server of its
# own (skipped without one) and --redis-cluster against a cluster of its own,
# bad input, nothing left behind.
#
# Included once per variant by tests/CMakeLists.txt, but the CLI is built once
# (${CMAKE_BINARY_DIR}/bin/kvshare, against the first variant's library:
# tools/CMakeLists.txt) and one bench run covers both libraries, so the test is
# added once, with the first variant (the CLI's): "<variant>.tools_bench".
if(NOT TARGET kvshare_cli)
  return() # no CLI in this build
endif()
list(GET kvs_variants 0 kvs_bench_cli_variant)
if(NOT KVS_V STREQUAL kvs_bench_cli_variant)
  return()
endif()

# The runs this build can make: kernel shared needs a kernel CLI, plain shared
# the plain library (built when KVS_VARIANT is both or plain).
set(kvs_bench_runs ${kvs_bench_cli_variant})
if(kvs_bench_cli_variant STREQUAL "kernel" AND "plain" IN_LIST kvs_variants)
  set(kvs_bench_runs "kernel,plain")
endif()

add_test(NAME ${KVS_V}.tools_bench
         COMMAND ${PROJECT_SOURCE_DIR}/tests/tools_bench.sh $<TARGET_FILE:kvshare_cli>
                 ${kvs_bench_runs})
set_tests_properties(${KVS_V}.tools_bench PROPERTIES
  LABELS "${KVS_V};tools;mp" TIMEOUT 180)
