# Tests of core/ (kvs_test(), cmake/kvs.cmake).
kvs_test(core_error SOURCES core_error.c LIBS kvs_core LABELS unit)
