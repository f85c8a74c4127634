# Hostile and careless surroundings, stopped and vanished processes (issue 13;
# docs/reliability.md lists what each case proves).
#   hostile_inputs   other uids (segment, watcher), a 0660 group cache, a low
#                    RLIMIT_MEMLOCK, a full and a read-only backend filesystem;
#                    each a clear error and nothing changed on disk.  The uid and
#                    mount cases need root: they skip (77) with the reason otherwise
#   hostile_stopped  a rank stopped (SIGSTOP) owning slots or holding a bucket
#                    lock: bounded errors naming its pid (cache and store), recovery on SIGCONT and
#                    on SIGKILL; every rank killed at once, then restarted
kvs_test(hostile_inputs SOURCES hostile_inputs.c LIBS kvs_store LABELS "unit;mp;hostile"
         TIMEOUT 120)
kvs_test(hostile_stopped SOURCES hostile_stopped.c LIBS kvs_store LABELS "unit;mp;hostile"
         TIMEOUT 120)
