# Startup of a large tier (issue 15): the creator's multi-threaded pre-fault
# (numa/place.c) and the store serving while its data plane is registered with
# the copy engine in the background (store/register.c; host engine, no GPU).
#   numa_prefault   segments fully backed whatever the thread count (mincore,
#                   st_blocks, move_pages), shm and hugetlb; the record in stats
#   store_register  staged-then-direct copies at held registration points,
#                   order and monotonic progress, close mid-registration, a rank
#                   killed -9 mid-registration
kvs_test(numa_prefault SOURCES numa_prefault.c LIBS kvs_core LABELS "unit;numa;hugetlb;mp")
kvs_test(store_register SOURCES store_register.c LIBS kvs_store LABELS "unit;mp;fault")
