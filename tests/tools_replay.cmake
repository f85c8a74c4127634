# Tests of `kvshare replay` and its trace parser (tools/replay.c, tools/trace.c).
# Included once per variant by tests/CMakeLists.txt.  The CLI is built once
# (${CMAKE_BINARY_DIR}/bin/kvshare, against the first variant's library:
# tools/CMakeLists.txt), so:
#   <variant>.tools_replay        tests/tools_replay.sh, end to end, once per
#                                 variant: LD_LIBRARY_PATH runs that one binary
#                                 against this variant's libkvshare.so.1 (the
#                                 real cache of the replay is the library's
#                                 CLOCK; the drop-in promise, exercised)
#   <first variant>.tools_replay_trace  the parser (tests/tools_replay_trace.c);
#                                 it does not depend on the variant: added once
#   <variant>.tools_replay_clock  the CLOCK weights the replay measured
#                                 (core/clock.c), through the public API: a
#                                 library test, both variants
kvs_test(tools_replay_clock SOURCES tools_replay_clock.c LIBS kvshare LABELS tools;unit)

if(NOT TARGET kvshare_cli)
  return() # no CLI in this build
endif()

add_test(NAME ${KVS_V}.tools_replay
         COMMAND ${PROJECT_SOURCE_DIR}/tests/tools_replay.sh $<TARGET_FILE:kvshare_cli> ${KVS_V})
set_tests_properties(${KVS_V}.tools_replay PROPERTIES
  LABELS "${KVS_V};tools;unit" TIMEOUT 120
  ENVIRONMENT "LD_LIBRARY_PATH=${KVS_LIBDIR}")
# the library of this variant must be built before the test runs it
add_dependencies(kvshare_cli kvshare_${KVS_V})

get_property(kvs_replay_trace_done GLOBAL PROPERTY KVS_TOOLS_REPLAY_TRACE_TEST)
if(NOT kvs_replay_trace_done)
  set_property(GLOBAL PROPERTY KVS_TOOLS_REPLAY_TRACE_TEST ON)
  kvs_test(tools_replay_trace SOURCES tools_replay_trace.c LIBS kvshare LABELS tools;unit)
  target_link_libraries(test_tools_replay_trace_${KVS_V} PRIVATE kvs_trace)
  # the public Mooncake traces (docs/replay.md), optional data read from
  # ../shared/traces beside the checkout (the case skips when they are absent)
  target_compile_definitions(test_tools_replay_trace_${KVS_V} PRIVATE
    KVS_SHARED_TRACES="${PROJECT_SOURCE_DIR}/../shared/traces")
endif()
