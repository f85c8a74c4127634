# Benchmarks of the store (kvs_bench(), cmake/kvs.cmake); perf/tp_scaling.sh runs
# both variants.
kvs_bench(tp_scaling SOURCES tp_scaling.c ${PROJECT_SOURCE_DIR}/tools/count_backend.c
          LIBS kvs_store)
# perf/store_sleep.sh: the dispatcher's and copier's cost while one read is held.
kvs_bench(store_sleep_bench SOURCES store_sleep_bench.c LIBS kvs_store)
# perf/open_cost.sh: the ranks' open times and the whole run's CPU at 8 ranks.
kvs_bench(open_cost SOURCES open_cost.c LIBS kvs_store)
# perf/hit_bench.sh: the store's hit path (READY hits, owner reads) against memcpy
# of the same bytes; with copy_engine cuda (perf/gpu_check.sh) against the
# device's pinned ceiling.
kvs_bench(hit_bench SOURCES hit_bench.c LIBS kvs_store)
if(KVS_KERNEL AND KVS_HAVE_CUDA)
  target_compile_definitions(bench_hit_bench_${KVS_V} PRIVATE KVS_HIT_BENCH_CUDA=1)
  target_link_libraries(bench_hit_bench_${KVS_V} PRIVATE CUDA::cudart_static)
endif()
