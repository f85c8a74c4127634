# Benchmarks of io/ (kvs_bench(), cmake/kvs.cmake); perf/backend_bench.sh runs both
# variants and fio on the same files.
kvs_bench(backend_bench SOURCES backend_bench.c LIBS kvs_io)
# perf/copy_bench.c: H2D scatter per copy strategy against the bulk pinned ceiling
# (needs a GPU; exits 77 without one).  Kernel variant with the CUDA engine only;
# perf/gpu_check.sh builds and runs it with the cuda tests.
if(KVS_KERNEL AND KVS_HAVE_CUDA)
  kvs_bench(copy_bench SOURCES copy_bench.c LIBS kvs_io)
  target_link_libraries(bench_copy_bench_${KVS_V} PRIVATE CUDA::cudart_static)
endif()
