#!/bin/bash
# perf/get_bench.sh [builddir] — the slot protocol's hit and miss paths, 1 and N
# processes (N = online CPUs, at least 2), both variants from one run.  One line
# per result:
#   get_bench variant=<kernel|plain> path=<hit|miss> procs=<n> ops_per_s=<..> ns_per_op=<..>
# ops_per_s counts all processes together; ns_per_op is one process's mean.
# Each run lasts ${KVS_BENCH_SECS:-1} s.  Target: hit, 1 process, >= 5 M ops/s.
# Smoke mode (KVS_PERF_SMOKE=1; the perf.get_bench CTest entry,
# tests/perf_smoke.sh): every line as above, each run 0.05 s (KVS_BENCH_SECS
# still wins).
set -euo pipefail

build=${1:-build}
if [ "${KVS_PERF_SMOKE:-0}" = 1 ]; then
	secs=${KVS_BENCH_SECS:-0.05}
else
	secs=${KVS_BENCH_SECS:-1}
fi
n=$(nproc)
[ "$n" -ge 2 ] || n=2
for v in kernel plain; do
	[ -x "$build/$v/perf/get_bench" ] || { echo "get_bench: $build/$v/perf/get_bench not built (cmake --build $build)" >&2; exit 1; }
done
for path in hit miss; do
	for procs in 1 "$n"; do
		for v in kernel plain; do
			"$build/$v/perf/get_bench" "$path" "$procs" "$secs"
		done
	done
done
