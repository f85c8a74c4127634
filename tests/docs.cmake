# Tests of the docs against the code:
#   docs.paths            every repository path and section reference that README.md,
#                         docs/*.md, the comments of include/kvshare.h and the
#                         exporter's HELP texts name exists, and that no other file
#                         of the repository (sources, CMake, scripts) names the
#                         developers' own files beside the checkout, but for the listed
#                         exceptions (tests/docs_paths.py: its opening comment has the
#                         rules, 7 for this one), after its self-test on planted good
#                         and bad references.  Added once (first variant).
#   <variant>.docs_example  the C program of README.md, taken from the README between
#                         its markers, compiled against include/ and this variant's
#                         library and run (tests/docs_example.sh).
# Included once per variant by tests/CMakeLists.txt.
if(KVS_FUZZ)
  return() # clang's libFuzzer runtime: no program of ours links against that library
endif()

list(GET kvs_variants 0 kvs_docs_first)
if(KVS_V STREQUAL kvs_docs_first)
  find_program(KVS_PYTHON3 python3)
  if(KVS_PYTHON3)
    add_test(NAME docs.paths COMMAND ${KVS_PYTHON3} ${PROJECT_SOURCE_DIR}/tests/docs_paths.py
                                     --self-test ${PROJECT_SOURCE_DIR})
  else()
    add_test(NAME docs.paths COMMAND sh -c "echo 'docs.paths: skipped: no python3'; exit 77")
  endif()
  set_tests_properties(docs.paths PROPERTIES LABELS "unit;docs" SKIP_RETURN_CODE 77 TIMEOUT 60)
endif()

add_test(NAME ${KVS_V}.docs_example
         COMMAND ${PROJECT_SOURCE_DIR}/tests/docs_example.sh ${PROJECT_SOURCE_DIR}/README.md
                 ${CMAKE_C_COMPILER} ${PROJECT_SOURCE_DIR}/include
                 $<TARGET_FILE:kvshare_${KVS_V}> "${KVS_SANITIZE}")
set_tests_properties(${KVS_V}.docs_example PROPERTIES LABELS "${KVS_V};unit;docs"
                     SKIP_RETURN_CODE 77 TIMEOUT 120)
