# Tests of `kvshare stat`, `kvshare ls` and `kvshare clean` (tools/stat.c and its
# outputs tools/stat_text.c, stat_json.c, stat_prom.c; tools/ls.c) and of the
# library calls they stand on (core/inspect.c, core/stats.c).
#   core_inspect  kvs_cache_inspect (live, stale, being created, another layout,
#                 corrupt; read-only: no byte changes, nothing adopted),
#                 kvs_cache_rank_info, kvs_cache_seg_info, a watcher store, every
#                 error code -- a library test: both variants.
#   tools_stat    the CLI end to end, as a user runs it: stat on a live cache while
#                 two rank processes (exec'd) load through their stores (--json,
#                 --prometheus, --watch stopped by SIGTERM), joins, dumps, dead,
#                 reaped and stale ranks, the last rank leaving an exporter.
#   tools_clean   ls and clean with a live and a stale cache (only the stale one
#                 removed; --dry-run removes nothing), a bare `clean` in a private
#                 /dev/shm, a creator killed in its pre-fault, a stale cache
#                 holding dirty slots (a rank killed -9 after its cached dumps
#                 returned: counted by ls and stat, refused by clean unless
#                 --discard-dirty), something not a cache, bad input.
#   Both share tools_admin_util.c: running the CLI, the rank processes.  The
#   CLI is built once (${CMAKE_BINARY_DIR}/bin/kvshare, against the first
#   variant's library), so these tests are added once, with the first variant
#   this file is included for; their rank processes use that variant's library.
kvs_test(core_inspect SOURCES core_inspect.c LIBS kvs_store LABELS "unit;mp")

get_property(kvs_tools_admin_done GLOBAL PROPERTY KVS_TOOLS_ADMIN_DONE)
if(NOT kvs_tools_admin_done AND TARGET kvshare_cli)
  set_property(GLOBAL PROPERTY KVS_TOOLS_ADMIN_DONE ON)
  # --json output is parsed with the library the CLI writes it with.
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(KVS_TA_JANSSON REQUIRED IMPORTED_TARGET jansson>=2.13)
  foreach(t tools_stat tools_clean)
    kvs_test(${t} SOURCES ${t}.c tools_admin_util.c LIBS kvs_store LABELS "mp;tools" TIMEOUT 300
             ARGS $<TARGET_FILE:kvshare_cli>)
    add_dependencies(test_${t}_${KVS_V} kvshare_cli)
    target_link_libraries(test_${t}_${KVS_V} PRIVATE PkgConfig::KVS_TA_JANSSON)
  endforeach()
endif()
