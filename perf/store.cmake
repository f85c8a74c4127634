# Benchmarks of the store (kvs_bench(), cmake/kvs.cmake); perf/tp_scaling.sh runs
# both variants.
kvs_bench(tp_scaling SOURCES tp_scaling.c LIBS kvs_store)
