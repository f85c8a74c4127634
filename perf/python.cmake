# The C side of perf/python_load.py (the binding's per-task cost against C's,
# one run): store_load_bench loads a block set from a warm cache through the
# shared library, as an application linking libkvshare.so.1 would.
kvs_bench(store_load_bench SOURCES store_load_bench.c LIBS kvshare)
