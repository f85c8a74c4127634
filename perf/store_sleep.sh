#!/usr/bin/env bash
# perf/store_sleep.sh [builddir] — what a store's dispatcher and copier threads
# cost while one backend read is held for a long time (issue 22 item 15), both
# variants in one run (perf/store_sleep_bench.c says how each number is taken).
# For each variant, kernel then plain: latency/own, pool/own, uring/own and
# latency/peer, each with one read held 1.5 s and its threads measured for 1 s
# of it.  Prints the bench's lines:
#   store_sleep variant=<v> backend=<latency|pool|uring> waiter=<own|peer> hold_ms=1500 measure_ms=1000 dispatcher_wakeups_per_s=<..> dispatcher_cpu_ms=<..> copier_wakeups_per_s=<..> copier_cpu_pct=<..> src=<perf|schedstat>
# (uring where io_uring is refused, and always in the plain build:
#   store_sleep variant=<v> backend=uring waiter=own skipped=io_uring_unavailable
# exit 77, noted on stderr, not an error).  Then checks the targets on stderr:
# waiter=own: dispatcher_wakeups_per_s <= 20 and dispatcher_cpu_ms <= 2 (per 1 s
# of window: cpu_ms * 1000 / measure_ms); kernel copier_wakeups_per_s <= 110;
# plain copier_cpu_pct <= 5.  waiter=peer: kernel copier_wakeups_per_s <= 110;
# the plain copier is reported, no target (it spins on other processes' words by
# design).  Prints "met" or "MISSED" per check, exits 3 if one was missed, 1 if
# a run failed.  CPU and wakeups come from `perf stat --per-thread` on the two
# threads; without a usable perf, from /proc/<tid>/schedstat (src=schedstat).
# About 11 s (each run: store start-up, a 1.5 s hold, close).
# Smoke mode (KVS_PERF_SMOKE=1; the perf.store_sleep CTest entry,
# tests/perf_smoke.sh): every run and line as above with a 400 ms hold measured
# for 100 ms (the lines say hold_ms=400 measure_ms=100; the targets are still
# checked, but mean nothing at that length, and the test takes their exit 3
# as a pass).  About 4 s.
set -euo pipefail
build=${1:-build}
hold_ms=1500 measure_ms=1000
[ "${KVS_PERF_SMOKE:-0}" = 1 ] && hold_ms=400 measure_ms=100
for v in kernel plain; do
	if [ ! -x "$build/$v/perf/store_sleep_bench" ]; then
		echo "store_sleep.sh: $build/$v/perf/store_sleep_bench missing" \
		     "(cmake --build $build --target bench_store_sleep_bench_$v)" >&2
		exit 1
	fi
done

opts=()
if ! command -v perf >/dev/null 2>&1 ||
   ! perf stat -e task-clock,context-switches -- true >/dev/null 2>&1; then
	echo "store_sleep.sh: perf stat unusable here; measuring with schedstat" >&2
	opts+=(--perf none)
fi

out=$(mktemp)
trap 'rm -f "$out"' EXIT
rc=0
for v in kernel plain; do
	for run in latency:own pool:own uring:own latency:peer; do
		b=${run%%:*} w=${run##*:}
		r=0
		"$build/$v/perf/store_sleep_bench" --backend "$b" --waiter "$w" \
			--hold-ms "$hold_ms" --measure-ms "$measure_ms" "${opts[@]}" | tee -a "$out" || r=$?
		if [ "$r" = 77 ]; then
			echo "store_sleep.sh: $v backend=$b waiter=$w skipped (io_uring unavailable)" >&2
		elif [ "$r" != 0 ]; then
			echo "store_sleep.sh: $v backend=$b waiter=$w failed (exit $r)" >&2
			rc=1
		fi
	done
done

awk '
function val(k,   i, kv) {
	for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) return kv[2] }
	return ""
}
function check(ok, what) {
	printf "store_sleep.sh: %s: %s\n", what, ok ? "met" : "MISSED" > "/dev/stderr"
	bad += !ok
}
$1 == "store_sleep" && val("skipped") == "" {
	v = val("variant"); b = val("backend"); w = val("waiter")
	tag = sprintf("%s backend=%s waiter=%s", v, b, w)
	dw = val("dispatcher_wakeups_per_s"); dcpu = val("dispatcher_cpu_ms") * 1000 / val("measure_ms")
	cw = val("copier_wakeups_per_s"); cpct = val("copier_cpu_pct")
	if (w == "own") {
		check(dw <= 20, sprintf("%s dispatcher_wakeups_per_s %s <= 20", tag, dw))
		check(dcpu <= 2, sprintf("%s dispatcher_cpu_ms %.3f per s <= 2", tag, dcpu))
		if (v == "kernel")
			check(cw <= 110, sprintf("%s copier_wakeups_per_s %s <= 110", tag, cw))
		else
			check(cpct <= 5, sprintf("%s copier_cpu_pct %s <= 5", tag, cpct))
	} else if (v == "kernel") {
		check(cw <= 110, sprintf("%s copier_wakeups_per_s %s <= 110", tag, cw))
	} else {
		printf "store_sleep.sh: %s copier_cpu_pct %s copier_wakeups_per_s %s: no target " \
		       "(spins by design: the plain build waits on other processes'"'"' words by " \
		       "spinning)\n", tag, cpct, cw > "/dev/stderr"
	}
}
END { exit bad ? 3 : 0 }' "$out" || rc=$(( rc ? rc : $? ))
exit "$rc"
