# Tests of the Python binding (python/kvshare, docs/python.md), one per variant:
#   <variant>.python  pytest over tests/python/ with the package from python/ and
#                     this variant's libkvshare.so.1 (KVSHARE_LIBRARY): the ctypes
#                     layouts against the C compiler's (python_abi, below), round
#                     trips of torch and numpy tensors, 4 spawned rank processes
#                     on one cache, a failing backend, a SIGKILLed rank, watcher,
#                     batch interface, Store.flush of cached dumps (a slow and a
#                     failing backend, a library without KVSHARE_1.1).  Skipped (77) where python3, pytest, torch
#                     or numpy is missing (tests/python/run.sh says which).
# python_abi prints python/kvshare/_abi.py from include/kvshare.h: the single
# source of the binding's struct layouts (tests/python_abi.c).
if(KVS_FUZZ)
  return() # clang's libFuzzer runtime is not one python can preload; no ctest there
endif()
add_executable(python_abi_${KVS_V} ${PROJECT_SOURCE_DIR}/tests/python_abi.c)
set_target_properties(python_abi_${KVS_V} PROPERTIES OUTPUT_NAME python_abi
                      RUNTIME_OUTPUT_DIRECTORY ${KVS_VDIR}/tests)
target_include_directories(python_abi_${KVS_V} PRIVATE ${PROJECT_SOURCE_DIR}/include)

add_test(NAME ${KVS_V}.python
         COMMAND ${PROJECT_SOURCE_DIR}/tests/python/run.sh ${KVS_V}
                 $<TARGET_FILE:kvshare_${KVS_V}> $<TARGET_FILE:python_abi_${KVS_V}>
                 "${KVS_SANITIZE}" ${CMAKE_C_COMPILER})
set_tests_properties(${KVS_V}.python PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 300
                     LABELS "${KVS_V};python;mp;fault")
