# Tests of the redis backend (io/redis.c) against a real redis-server that each
# case starts on a unix socket in a temp dir and stops (skipped, 77, without
# redis-server).  One binary, two CTest tests:
#   io_redis     backend cases: round trips, pipelining, wrong-length values,
#                values of another geometry, garbage value headers, passwords,
#                outages (absent, kill -9, SIGSTOP), error replies, the wait
#                descriptor, config
#   store_redis  store cases: two nodes sharing the server (one read per shard per
#                node), lookups, the server killed mid-load, errors
find_package(PkgConfig REQUIRED)
pkg_check_modules(KVS_HIREDIS REQUIRED IMPORTED_TARGET hiredis>=0.14)
kvs_test(io_redis SOURCES io_redis.c LIBS kvs_store LABELS "unit;fault" TIMEOUT 120
         ARGS roundtrip pipeline wrong_length geometry garbage_header wrong_password outage
              error_replies wait_fd bad_config batch_hook)
target_link_libraries(test_io_redis_${KVS_V} PRIVATE PkgConfig::KVS_HIREDIS)
kvs_io_test_group(store_redis TEST io_redis ARGS store_two_nodes store_kill store_errors
                  LABELS "mp;fault" TIMEOUT 120)
