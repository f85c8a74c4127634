# The mutation check (tests/mutation.sh): copies the source tree, builds the kernel
# variant apart and requires the core, wait, store-dump and Redis Cluster suites
# to go red on each planted bug.  Registered once (with the kernel variant), as "mutation"; labelled slow, so
# the sanitizer targets (ctest -LE slow) leave it out.
if(KVS_V STREQUAL "kernel")
  add_test(NAME mutation COMMAND ${PROJECT_SOURCE_DIR}/tests/mutation.sh ${PROJECT_SOURCE_DIR})
  set_tests_properties(mutation PROPERTIES LABELS "mutation;slow" TIMEOUT 900 RUN_SERIAL ON)
endif()
