#!/usr/bin/env bash
# perf/open_cost.sh [builddir] — what opening costs the ranks of one node, both
# variants from one run (perf/open_cost.c says how each number is taken).  For
# each cache size in GIBS (1,8) and each backing (shm; hugetlb too where the
# pool has room for it: as root vm.nr_hugepages is grown and restored), RANKS
# (8) ranks on a fresh cache load BLOCKS (32) blocks x 8 shards of 256 KiB cold.
# Prints the bench's lines, kernel then plain:
#   open_cost variant=<v> backing=<b> gib=<g> ranks=<n> blocks=<n> create_ms=<..>
#     attach_ms_mean=<..> attach_ms_max=<..> load_ms_max=<..> cpu_s=<..> wall_s=<..>
# Smoke mode (KVS_PERF_SMOKE=1; the perf.open_cost CTest entry,
# tests/perf_smoke.sh): the same runs on a 1/8 GiB cache with 8 blocks (GIBS,
# BLOCKS still win), and the hugepage pool left as it is (other tests use it
# meanwhile): hugetlb lines only where it has room now.
set -euo pipefail
build=${1:-build}
smoke=${KVS_PERF_SMOKE:-0}
if [ "$smoke" = 1 ]; then
	gibs=${GIBS:-0.125} blocks=${BLOCKS:-8}
else
	gibs=${GIBS:-1,8} blocks=${BLOCKS:-32}
fi
ranks=${RANKS:-8}
for v in kernel plain; do
	if [ ! -x "$build/$v/perf/open_cost" ]; then
		echo "open_cost.sh: $build/$v/perf/open_cost missing (cmake --build $build)" >&2
		exit 1
	fi
done
root=$(mktemp -d /tmp/kvs-open-cost.XXXXXX)
sysfs=/sys/kernel/mm/hugepages/hugepages-2048kB
pages0=$(cat "$sysfs/nr_hugepages" 2>/dev/null || echo 0)
restore() {
	rm -rf "$root"
	[ "$smoke" = 0 ] && [ "$(id -u)" = 0 ] && [ -w "$sysfs/nr_hugepages" ] &&
		echo "$pages0" >"$sysfs/nr_hugepages"
	true
}
trap restore EXIT
pages() { awk -v g="$1" -v extra="$2" 'BEGIN { printf "%d", g * 512 + extra }'; } # of 2 MiB
# The plain build never uses hugetlbfs: its hugetlb lines would say nothing.
for gib in ${gibs//,/ }; do
	backings=shm
	want=$(pages "$gib" 64)
	if [ "$smoke" = 0 ] && [ "$(id -u)" = 0 ] && [ -w "$sysfs/nr_hugepages" ] &&
	   [ "$pages0" -lt "$want" ]; then
		echo "$want" >"$sysfs/nr_hugepages"
	fi
	if ! awk '$3 == "hugetlbfs" { f = 1 } END { exit !f }' /proc/mounts; then
		echo "open_cost.sh: no hugetlbfs mount, so $gib GiB of huge pages not free to a cache: no hugetlb line at $gib GiB" >&2
	elif [ "$(cat "$sysfs/free_hugepages" 2>/dev/null || echo 0)" -ge "$(pages "$gib" 0)" ]; then
		backings="shm hugetlb"
	else
		echo "open_cost.sh: $gib GiB of huge pages not free: no hugetlb line at $gib GiB" >&2
	fi
	for backing in $backings; do
		for v in kernel plain; do
			[ "$backing" = hugetlb ] && [ "$v" = plain ] && continue
			rm -rf "${root:?}"/*
			"$build/$v/perf/open_cost" "$root" "$gib" "$ranks" "$blocks" "$backing"
		done
	done
done
