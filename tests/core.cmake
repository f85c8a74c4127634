# Tests of core/ (kvs_test(), cmake/kvs.cmake).
kvs_test(core_error SOURCES core_error.c LIBS kvs_core LABELS unit)
kvs_test(core_slot SOURCES core_slot.c LIBS kvs_core LABELS unit)
kvs_test(core_mp SOURCES core_mp.c LIBS kvs_core LABELS mp)
kvs_test(core_fault SOURCES core_fault.c LIBS kvs_core LABELS mp;fault)
kvs_test(core_attach SOURCES core_attach.c LIBS kvs_core LABELS unit;mp)
kvs_test(core_claim SOURCES core_claim.c LIBS kvs_core LABELS unit;mp)
kvs_test(core_hugetlb SOURCES core_hugetlb.c LIBS kvs_core LABELS hugetlb;mp RUN_SERIAL)
kvs_test(core_race SOURCES core_race.c LIBS kvs_core LABELS mp;fault)
