# Tests of the backend stores (io/backend.c, posix.c, uring.c, pool.c, none.c,
# latency.c, fault.c).  io_posix runs its io_uring cases only where io_uring is
# allowed (skipped with the reason otherwise); io_uring_fallback is the uring-labelled
# one.  The copy engines' tests are in tests/copy.cmake.
kvs_test(io_posix SOURCES io_posix.c LIBS kvs_io LABELS "unit;fault" TIMEOUT 60)
kvs_test(io_synthetic SOURCES io_synthetic.c LIBS kvs_io LABELS "unit;fault" TIMEOUT 60)
if(KVS_KERNEL)
  kvs_test(io_uring_fallback SOURCES io_uring_fallback.c LIBS kvs_io LABELS "unit;uring;fault"
           TIMEOUT 60)
endif()
