# Tests of the store (store/*.c, kvs_store_*), host copy engine, real processes.
#   store_config  the key=value parser: every key's bad value
#   store_resolve config resolution: derivations, ranges, each error naming its key
#   store_load    one process: round trips, layer-wise, dedup, faults, head slices
#   store_bookkeeping  one process: tasks (timeouts, queue full, ids, close with a
#                 task running), watcher lookups, the counters, refusals at submit
#   store_mp      rank processes (fork and exec): 8 ranks over one segment, cold
#                 posix cache read once, head slices across TP degrees, kill -9
#   store_geometry  a block dumped with one geometry, loaded with another: refused
#                 (-KVS_ECONFIG, both named); the same geometry loads it byte-exact
#   store_dump    the dump protocol across rank processes: durable means in the
#                 backend; peers' failed fills, writers killed -9, split blocks,
#                 many claims, timeouts, writes spread over the ranks
#   store_open    an open that fails fast and safe: a capacity the node cannot
#                 hold refused before anything is allocated, naming the key
#   store_ack     what an acknowledged dump promises, against failing and slow
#                 writes, closes, expired protections, vanished stored copies
#   store_record  the dump record: acknowledged dumps kept DIRTY through kills,
#                 adoptions, watchers' closes and slow last closes; blocks larger
#                 than the pin table; the backend binding; kvs_store_flush
#   store_tasks   tasks of any size on small caches, no head-of-line blocking, one
#                 rank's deadline, lookups, the reserved pool, fork, a failing
#                 poll, a stopped lock holder, copy engine timeouts, no polling
kvs_test(store_config SOURCES store_config.c LIBS kvs_store LABELS unit)
kvs_test(store_resolve SOURCES store_resolve.c LIBS kvs_store LABELS unit)
kvs_test(store_load SOURCES store_load.c LIBS kvs_store LABELS "unit;fault" TIMEOUT 180)
kvs_test(store_bookkeeping SOURCES store_bookkeeping.c LIBS kvs_store LABELS "unit;fault" TIMEOUT 180)
kvs_test(store_mp SOURCES store_mp.c LIBS kvs_store LABELS "mp;fault" TIMEOUT 300)
kvs_test(store_geometry SOURCES store_geometry.c LIBS kvs_store LABELS "unit;fault" TIMEOUT 60)
kvs_test(store_dump SOURCES store_dump.c LIBS kvs_store LABELS "mp;fault" TIMEOUT 300)
kvs_test(store_open SOURCES store_open.c LIBS kvs_store LABELS unit TIMEOUT 60)
kvs_test(store_ack SOURCES store_ack.c LIBS kvs_store LABELS "mp;fault" TIMEOUT 300)
kvs_test(store_record SOURCES store_record.c LIBS kvs_store LABELS "mp;fault" TIMEOUT 300)
kvs_test(store_tasks SOURCES store_tasks.c LIBS kvs_store LABELS "mp;fault" TIMEOUT 300)
