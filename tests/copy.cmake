# Tests of the copy engines (io/copy*.c, io/copy_kernel.cu), as two CTest tests of
# one binary so that what could not run shows as Skipped rather than Passed:
#   io_copy       the host engine (contiguous segments, head slices, odd sizes,
#                 every -EINVAL, wait_event) and the cuda engine's open contract
#                 (runs everywhere);
#   io_copy_cuda  (label gpu) the cuda engine: every strategy (memcpy, batch,
#                 kernel, auto) bit-exact, head slices, several streams,
#                 wait_event: Skipped, with the reason, without a CUDA device or
#                 without CUDA in the build.  perf/gpu_check.sh runs it on a GPU.
# kvs_io_test_group() is defined in tests/io.cmake.
kvs_test(io_copy SOURCES io_copy.c LIBS kvs_io LABELS "unit")
if(KVS_KERNEL AND KVS_HAVE_CUDA)
  target_compile_definitions(test_io_copy_${KVS_V} PRIVATE KVS_HAVE_CUDA=1)
  target_link_libraries(test_io_copy_${KVS_V} PRIVATE CUDA::cudart_static)
endif()
kvs_io_test_group(io_copy_cuda TEST io_copy ARGS --cuda LABELS "unit;gpu")
