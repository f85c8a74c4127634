# Tests of the store (core/store*.c, kvs_store_*), host copy engine, real processes.
#   store_config  the key=value parser and config resolution: every key's bad value
kvs_test(store_config SOURCES store_config.c LIBS kvs_store LABELS unit)
