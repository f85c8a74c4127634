# The drop-in promise, checked (included from the top level when both variants
# are built):
#   abi.symbols  both libkvshare.so.1 export exactly the committed ABI,
#                tests/abi_symbols.txt (name@@KVSHARE_1, from the version script
#                libkvshare.map), which names exactly include/kvshare.h's KVS_API
#                functions; abidiff finds no ABI difference between them;
#   abi.dropin.* a program linked against the PLAIN library runs and passes
#                against each library, swapped by LD_LIBRARY_PATH only, and
#                shares one cache with a process running the other library.
add_test(NAME abi.symbols
         COMMAND ${PROJECT_SOURCE_DIR}/tests/abi_symbols.sh
                 $<TARGET_FILE:kvshare_plain> $<TARGET_FILE:kvshare_kernel>
                 ${PROJECT_SOURCE_DIR}/tests/abi_symbols.txt
                 ${PROJECT_SOURCE_DIR}/include/kvshare.h)
set_tests_properties(abi.symbols PROPERTIES LABELS "unit;abi" TIMEOUT 120)

add_executable(test_abi_dropin ${PROJECT_SOURCE_DIR}/tests/abi_dropin.c)
target_include_directories(test_abi_dropin PRIVATE ${PROJECT_SOURCE_DIR}/tests)
target_compile_definitions(test_abi_dropin PRIVATE KVS_TEST_VARIANT="abi")
target_link_libraries(test_abi_dropin PRIVATE kvshare_plain kvs_common)
# No RUNPATH: the library is found through LD_LIBRARY_PATH alone, as an operator
# swapping builds would do.
set_target_properties(test_abi_dropin PROPERTIES OUTPUT_NAME abi_dropin SKIP_BUILD_RPATH ON
                      RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/abi)
foreach(pair "plain;kernel" "kernel;plain")
  list(GET pair 0 v)
  list(GET pair 1 other)
  add_test(NAME abi.dropin.${v}
           COMMAND test_abi_dropin ${v} ${other} $<TARGET_FILE_DIR:kvshare_${other}>)
  set_tests_properties(abi.dropin.${v} PROPERTIES LABELS "unit;abi;mp" SKIP_RETURN_CODE 77
    TIMEOUT 60 ENVIRONMENT "LD_LIBRARY_PATH=$<TARGET_FILE_DIR:kvshare_${v}>")
endforeach()
