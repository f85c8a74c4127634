#!/usr/bin/env bash
# perf/chaos.sh [--minutes M] [--build DIR] [--runs LIST] [chaos options...] — the
# long chaos run (tests/chaos.c says what it does and checks), one run after the
# other, M minutes each (default 10):
#   kernel  8 kernel-build ranks (hugetlbfs data plane when the pool allows)
#   plain   8 plain-build ranks (/dev/shm)
#   mixed   a mixed node: a kernel-build creator (hugetlbfs), odd ranks plain
# LIST picks and orders them (default kernel,plain,mixed).  Other options go to
# every run (--seed X, --ranks N, --kill-ms MEAN, --fault-delay-us U, ...).
# Prints each run's "chaos seed=" line, its violation lines if any, and its summary:
#   chaos ranks=.. seconds=.. kills=.. tasks=.. failures=.. max_wait_ms=.. violations=..
# (the failures by code and the cache's counters go to stderr).  Exits 1 if any
# run had a violation or failed, 2 on bad usage.
# Smoke mode (KVS_PERF_SMOKE=1; the perf.chaos CTest entry, tests/perf_smoke.sh):
# every run for 1 s instead of M minutes, the checks and lines as above.
set -euo pipefail
minutes=10
build=build
runs=kernel,plain,mixed
extra=()
while [ $# -gt 0 ]; do
	case "$1" in
	--minutes) minutes=${2:?--minutes needs a value}; shift 2 ;;
	--build) build=${2:?--build needs a directory}; shift 2 ;;
	--runs) runs=${2:?--runs needs a list}; shift 2 ;;
	*) extra+=("$1"); shift ;;
	esac
done
if ! [[ "$minutes" =~ ^[0-9]+$ ]] || [ "$minutes" -lt 1 ]; then
	echo "chaos.sh: --minutes must be a whole number >= 1 (got '$minutes')" >&2
	exit 2
fi
for v in kernel plain; do
	if [ ! -x "$build/$v/tests/chaos" ]; then
		echo "chaos.sh: $build/$v/tests/chaos missing (cmake --build $build)" >&2
		exit 1
	fi
done

rc=0
IFS=, read -r -a list <<<"$runs"
for run in "${list[@]}"; do
	case "$run" in
	kernel | plain) cmd=("$build/$run/tests/chaos") ;;
	mixed) cmd=("$build/kernel/tests/chaos" --mixed "$build/plain/tests/chaos") ;;
	*) echo "chaos.sh: unknown run '$run' (kernel, plain, mixed)" >&2; exit 2 ;;
	esac
	secs=$((minutes * 60))
	[ "${KVS_PERF_SMOKE:-0}" = 1 ] && secs=1
	echo "chaos.sh: run $run, $secs s" >&2
	"${cmd[@]}" --seconds $secs "${extra[@]}" || rc=1
done
exit $rc
