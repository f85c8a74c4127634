# Tests of the backend stores (io/backend.c, posix*.c, uring.c, pool.c, none.c,
# latency.c, fault.c, notify.c).  io_wait: every backend's wait descriptor, with
# io_wait_uring (--uring) the posix cases on io_uring, Skipped like io_posix_uring.  io_posix is two CTest tests of one binary: io_posix (the
# pool engine and everything engine-neutral) and io_posix_uring (--uring: the same
# cases on the io_uring engine), which shows as Skipped, with the reason, in the
# plain variant and where io_uring is refused; io_posix_file (what a block file
# holds) and io_posix_ahead (the open-ahead of hinted blocks) are two the same way;
# io_posix_crash is the crash cleanup (pool engine).  io_uring_fallback (kernel variant)
# refuses io_uring itself.  The copy engines' tests are in tests/copy.cmake.

# kvs_io_test_group(<name> TEST <kvs_test name> ARGS <args...> LABELS <labels...>
#                   [TIMEOUT <s>])
# A second CTest test "<variant>.<name>" running the binary of kvs_test <TEST> with
# ARGS (a group of its cases), with kvs_test's conventions: exit 77 is Skipped.
# Also used by tests/copy.cmake (included after this file).
function(kvs_io_test_group name)
  cmake_parse_arguments(G "" "TEST;TIMEOUT" "ARGS;LABELS" ${ARGN})
  if(NOT G_TIMEOUT)
    set(G_TIMEOUT 120)
  endif()
  add_test(NAME ${KVS_V}.${name} COMMAND test_${G_TEST}_${KVS_V} ${G_ARGS})
  set_tests_properties(${KVS_V}.${name} PROPERTIES SKIP_RETURN_CODE 77
                       TIMEOUT ${G_TIMEOUT} LABELS "${KVS_V};${G_LABELS}")
endfunction()

kvs_test(io_posix SOURCES io_posix.c LIBS kvs_io LABELS "unit;fault" TIMEOUT 60)
kvs_io_test_group(io_posix_uring TEST io_posix ARGS --uring LABELS "unit;fault;uring" TIMEOUT 60)
kvs_test(io_posix_file SOURCES io_posix_file.c LIBS kvs_io LABELS "unit;fault" TIMEOUT 60)
kvs_test(io_posix_ahead SOURCES io_posix_ahead.c LIBS kvs_io LABELS "unit;fault" TIMEOUT 60)
kvs_io_test_group(io_posix_ahead_uring TEST io_posix_ahead ARGS --uring LABELS "unit;fault;uring"
                  TIMEOUT 60)
kvs_test(io_posix_crash SOURCES io_posix_crash.c LIBS kvs_io LABELS "unit;fault;mp" TIMEOUT 60)
kvs_io_test_group(io_posix_file_uring TEST io_posix_file ARGS --uring LABELS "unit;fault;uring"
                  TIMEOUT 60)
kvs_test(io_synthetic SOURCES io_synthetic.c LIBS kvs_io LABELS "unit;fault" TIMEOUT 60)
kvs_test(io_wait SOURCES io_wait.c LIBS kvs_io LABELS "unit" TIMEOUT 120)
kvs_io_test_group(io_wait_uring TEST io_wait ARGS --uring LABELS "unit;uring" TIMEOUT 60)
if(KVS_KERNEL)
  kvs_test(io_uring_fallback SOURCES io_uring_fallback.c LIBS kvs_io LABELS "unit;uring;fault"
           TIMEOUT 60)
endif()
