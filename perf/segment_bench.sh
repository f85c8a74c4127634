#!/usr/bin/env bash
# perf/segment_bench.sh [builddir] — data segment create / attach cost, both
# variants in one run: the kernel build on hugetlbfs and on /dev/shm, the plain
# build on /dev/shm.  Prints only the bench's lines:
#   segment variant=<plain|kernel> backing=<hugetlb|shm> gib=<g> create_ms=<..> attach_ms=<..> ms_per_gib=<..>
# As root it grows vm.nr_hugepages so that 2 GiB of 2 MiB pages are free for the
# run, and puts the old value back on exit.  Sizes: HUGETLB_GIB, SHM_GIB.
# Smoke mode (KVS_PERF_SMOKE=1; the perf.segment_bench CTest entry,
# tests/perf_smoke.sh): the same three runs at 1/16 and 1/8 GiB (HUGETLB_GIB,
# SHM_GIB still win), and the hugepage pool left as it is (other tests use it
# meanwhile): a size it cannot hold is skipped, said on stderr.
set -euo pipefail
build=${1:-build}
smoke=${KVS_PERF_SMOKE:-0}
if [ "$smoke" = 1 ]; then
	hugetlb_gib=${HUGETLB_GIB:-0.0625,0.125}
	shm_gib=${SHM_GIB:-0.0625,0.125}
else
	hugetlb_gib=${HUGETLB_GIB:-0.25,0.5,1,2}
	shm_gib=${SHM_GIB:-0.25,0.5,1,2,4}
fi
for v in kernel plain; do
	if [ ! -x "$build/$v/perf/segment_bench" ]; then
		echo "segment_bench.sh: $build/$v/perf/segment_bench missing (cmake --build $build)" >&2
		exit 1
	fi
done

sysfs=/sys/kernel/mm/hugepages/hugepages-2048kB
old=""
if [ "$smoke" = 0 ] && [ "$(id -u)" = 0 ] && [ -w "$sysfs/nr_hugepages" ]; then
	old=$(cat "$sysfs/nr_hugepages")
	trap 'echo "$old" >"$sysfs/nr_hugepages"' EXIT
	free=$(( $(cat "$sysfs/free_hugepages") - $(cat "$sysfs/resv_hugepages") ))
	want=1030 # 2 GiB + slack
	if [ "$free" -lt "$want" ]; then
		echo $(( old + want - free )) >"$sysfs/nr_hugepages" || true
	fi
	echo "segment_bench.sh: hugepage pool $(cat "$sysfs/nr_hugepages") (was $old)," \
	     "$(cat "$sysfs/free_hugepages") free" >&2
fi

"$build/kernel/perf/segment_bench" --backing hugetlb --gib "$hugetlb_gib"
"$build/kernel/perf/segment_bench" --backing shm --gib "$shm_gib"
"$build/plain/perf/segment_bench" --backing shm --gib "$shm_gib"
