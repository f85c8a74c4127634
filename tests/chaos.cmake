# The chaos run (tests/chaos.c, the controller; chaos_rank.c, a rank): 8 rank processes loading, dumping, prefetching
# and looking up through one cache over a posix backend with injected faults,
# while the controller kill -9s and restarts them.  Every completed load's bytes,
# every failure's code and every task's wait are checked, then the cache after
# the last clean detach, the files left behind, and every block a durable dump
# returned 0 for, loaded by a fresh store.
#   <v>.chaos        8 s, ranks of this variant
#   <v>.chaos_mixed  8 s, ranks of both variants on one segment, created by this
#                    variant (kernel: hugetlbfs data plane attached by plain
#                    ranks; plain: /dev/shm attached by kernel ranks); only when
#                    both variants are built
#   <v>.chaos_plant  4 s with a wrong byte, a too-long wait and a garbage error
#                    code planted in every rank, and one durable block's file
#                    removed before the final check: passes only when all four
#                    are reported (the checks can fail); first variant only
# Fixed seeds, so that a failure can be rerun (the run prints its own;
# docs/reliability.md, "Chaos runs and mixed-variant nodes"): the choices
# repeat, the moments the kills land at do not.  perf/chaos.sh runs the long
# version, seeded by time.
kvs_test(chaos SOURCES chaos.c chaos_rank.c LIBS kvshare LABELS "mp;fault;chaos" TIMEOUT 180
         ARGS --seconds 8 --seed 1301)

kvs_other_variant(kvs_chaos_other)
if(kvs_chaos_other)
  add_test(NAME ${KVS_V}.chaos_mixed
           COMMAND test_chaos_${KVS_V} --seconds 8 --seed 1302
                   --mixed $<TARGET_FILE:test_chaos_${kvs_chaos_other}>)
  set_tests_properties(${KVS_V}.chaos_mixed PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 180
                       LABELS "${KVS_V};mp;fault;chaos")
endif()

list(GET kvs_variants 0 kvs_chaos_first)
if(KVS_V STREQUAL kvs_chaos_first)
  add_test(NAME ${KVS_V}.chaos_plant
           COMMAND test_chaos_${KVS_V} --seconds 4 --seed 1303 --plant bytes,wait,error,durable)
  set_tests_properties(${KVS_V}.chaos_plant PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120
                       LABELS "${KVS_V};mp;fault;chaos")
endif()
