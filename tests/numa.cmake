# Tests of numa/ (kvs_test(), cmake/kvs.cmake).
kvs_test(numa_segment SOURCES numa_segment.c LIBS kvs_numa LABELS "unit;mp")
kvs_test(numa_hugetlb SOURCES numa_hugetlb.c LIBS kvs_numa LABELS "hugetlb;numa;mp" RUN_SERIAL)
kvs_test(numa_place SOURCES numa_place.c LIBS kvs_numa LABELS "unit;numa")
