# Tests of wait/ (kvs_test(), cmake/kvs.cmake).  They link the module archive
# directly (internals such as the adaptive policy are tested too).
kvs_test(wait_basic SOURCES wait_basic.c LIBS kvs_wait LABELS unit)
kvs_test(wait_any SOURCES wait_any.c LIBS kvs_wait LABELS unit)
kvs_test(wait_mp SOURCES wait_mp.c LIBS kvs_wait LABELS mp)
kvs_test(wait_stress SOURCES wait_stress.c LIBS kvs_wait LABELS mp)
