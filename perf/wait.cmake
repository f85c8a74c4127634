# Benchmarks of wait/ (kvs_bench(), cmake/kvs.cmake); perf/wait_cost.sh runs both
# variants.
kvs_bench(wait_cost_bench SOURCES wait_cost_bench.c LIBS kvs_wait)
