# Startup of a large tier (issue 15): pre-fault by thread count, open to first
# load, registration per chunk size (GPU); perf/startup_bench.sh runs both variants.
kvs_bench(startup_bench SOURCES startup_bench.c LIBS kvs_store)
