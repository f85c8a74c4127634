# Benchmarks of io/ (kvs_bench(), cmake/kvs.cmake); perf/backend_bench.sh runs both
# variants and fio on the same files.
kvs_bench(backend_bench SOURCES backend_bench.c LIBS kvs_io)
