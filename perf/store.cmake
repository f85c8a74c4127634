# Benchmarks of the store (kvs_bench(), cmake/kvs.cmake); perf/tp_scaling.sh runs
# both variants.
kvs_bench(tp_scaling SOURCES tp_scaling.c ${PROJECT_SOURCE_DIR}/tools/count_backend.c
          LIBS kvs_store)
# perf/store_sleep.sh: the dispatcher's and copier's cost while one read is held.
kvs_bench(store_sleep_bench SOURCES store_sleep_bench.c LIBS kvs_store)
# perf/open_cost.sh: the ranks' open times and the whole run's CPU at 8 ranks.
kvs_bench(open_cost SOURCES open_cost.c LIBS kvs_store)
