# Benchmarks of core/ (kvs_bench(), cmake/kvs.cmake); perf/get_bench.sh runs them.
kvs_bench(get_bench SOURCES get_bench.c LIBS kvs_core)
