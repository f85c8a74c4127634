# Benchmarks of numa/ (kvs_bench(), cmake/kvs.cmake); perf/segment_bench.sh runs both variants.
kvs_bench(segment_bench SOURCES segment_bench.c LIBS kvs_numa)
