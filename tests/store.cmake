# Tests of the store (core/store*.c, kvs_store_*), host copy engine, real processes.
#   store_config  the key=value parser and config resolution: every key's bad value
#   store_load    one process: round trips, layer-wise, dedup, faults, head slices,
#                 watcher lookups, tasks (timeouts, queue full)
#   store_mp      rank processes (fork and exec): 8 ranks over one segment, cold
#                 posix cache read once, head slices across TP degrees, kill -9
kvs_test(store_config SOURCES store_config.c LIBS kvs_store LABELS unit)
kvs_test(store_load SOURCES store_load.c LIBS kvs_store LABELS "unit;fault" TIMEOUT 180)
kvs_test(store_mp SOURCES store_mp.c LIBS kvs_store LABELS "mp;fault" TIMEOUT 300)
