# Tests of numa/ (kvs_test(), cmake/kvs.cmake).
kvs_test(numa_segment SOURCES numa_segment.c LIBS kvs_numa LABELS "unit;mp")
