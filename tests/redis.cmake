# Tests of the redis backend (io/redis*.c) against a real redis-server that each
# case starts on a unix socket in a temp dir and stops (skipped, 77, without
# redis-server; tests/redis_util.h).  Two binaries:
#   io_redis     backend cases: round trips, pipelining, wrong-length values,
#                values of another geometry, garbage value headers, passwords,
#                outages (absent, kill -9, SIGSTOP), error replies, the wait
#                descriptor, config
#   store_redis  store cases: two nodes sharing the server (one read per shard per
#                node), lookups, the server killed mid-load, errors, a block half
#                stored (a READY shard proves only itself), a stopped server
#                (every task reports by its deadline)
find_package(PkgConfig REQUIRED)
pkg_check_modules(KVS_HIREDIS REQUIRED IMPORTED_TARGET hiredis>=0.14)
kvs_test(io_redis SOURCES io_redis.c LIBS kvs_store LABELS "unit;fault" TIMEOUT 120)
target_link_libraries(test_io_redis_${KVS_V} PRIVATE PkgConfig::KVS_HIREDIS)
kvs_test(store_redis SOURCES store_redis.c LIBS kvs_store LABELS "mp;fault" TIMEOUT 120)
target_link_libraries(test_store_redis_${KVS_V} PRIVATE PkgConfig::KVS_HIREDIS)
# io_redis_cluster: the backend on a Redis Cluster of 3 masters + 3 replicas the
# test starts on loopback ports (tests/redis_cluster_util.h): slots, round trips,
# a seed down, refusals, ASK, a reshard, an uncovered slot, a master killed -9.
kvs_test(io_redis_cluster SOURCES io_redis_cluster.c LIBS kvs_store LABELS "unit;fault"
         TIMEOUT 180)
target_link_libraries(test_io_redis_cluster_${KVS_V} PRIVATE PkgConfig::KVS_HIREDIS)
# store_redis_cluster: the store over such a cluster: node B's 8 rank processes
# load what node A dumped, one GET per shard summed over the nodes; <v>.store_
# redis_cluster_mixed has every odd rank from the other variant's build.
kvs_test(store_redis_cluster SOURCES store_redis_cluster.c LIBS kvs_store LABELS "mp;fault"
         TIMEOUT 180)
target_link_libraries(test_store_redis_cluster_${KVS_V} PRIVATE PkgConfig::KVS_HIREDIS)
kvs_other_variant(kvs_rcl_other)
if(kvs_rcl_other)
  add_test(NAME ${KVS_V}.store_redis_cluster_mixed
           COMMAND test_store_redis_cluster_${KVS_V}
                   --mixed $<TARGET_FILE:test_store_redis_cluster_${kvs_rcl_other}>)
  set_tests_properties(${KVS_V}.store_redis_cluster_mixed PROPERTIES SKIP_RETURN_CODE 77
                       TIMEOUT 180 LABELS "${KVS_V};mp;fault")
endif()
