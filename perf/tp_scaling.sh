#!/usr/bin/env bash
# perf/tp_scaling.sh [builddir] [tp_scaling options...] — the store's TP scaling,
# both variants from one run (perf/tp_scaling.c says how each number is taken).
# Ranks 1, 2, 4, 8 (forked processes on one fresh cache each run), rotated and
# natural dispatch order, 200 blocks x 12 shards of 64 KiB from a latency backend
# (200 us per read, queue depth 1 per rank), 4 tasks in flight per rank.  Prints
# the bench's lines, kernel then plain:
#   tp_scaling variant=<v> order=<rotated|natural> ranks=<n> tasks_per_s=<..> backend_reads=<..> unique_shards=<..> max_inflight_reads=<..> owner_share_max=<..> waiter_cpu_pct=<..> mean_inflight_reads=<..>
#   tp_scaling_slow_copier variant=<v> ranks=4 others_tasks_per_s_base=<..> others_tasks_per_s_slow=<..> ratio=<..>
# and, when `perf stat` works here, one line per variant for the whole program
# (every rank process and thread, store start-up included):
#   tp_scaling_perf variant=<v> task_clock_ms=<..> context_switches=<..>
# Then checks the targets on stderr (per variant: backend_reads == unique_shards
# on every line; at 4 ranks rotated >= 3.5x natural's max_inflight_reads and >= 3x
# its tasks_per_s, rotated owner_share_max <= 0.3; rotated tasks_per_s growing at
# every step to 8 ranks; slow_copier ratio >= 0.9) and exits 3 if one is missed,
# 1 if a run failed.  Extra arguments go to tp_scaling (e.g. --blocks 400).
# About 20 s on a 2-core machine.
# Smoke mode (KVS_PERF_SMOKE=1; the perf.tp_scaling CTest entry,
# tests/perf_smoke.sh): every run and line as above on 10 blocks (--blocks
# given still wins; the targets are still checked, but mean nothing at that
# size, and the test takes their exit 3 as a pass).  About 3 s.
set -euo pipefail
build=${1:-build}
shift || true
[ "${KVS_PERF_SMOKE:-0}" = 1 ] && set -- --blocks 10 "$@"
for v in kernel plain; do
	if [ ! -x "$build/$v/perf/tp_scaling" ]; then
		echo "tp_scaling.sh: $build/$v/perf/tp_scaling missing (cmake --build $build)" >&2
		exit 1
	fi
done

use_perf=1
if ! command -v perf >/dev/null 2>&1 ||
   ! perf stat -e task-clock,context-switches -- true >/dev/null 2>&1; then
	echo "tp_scaling.sh: perf stat unusable here; no tp_scaling_perf lines" >&2
	use_perf=0
fi

out=$(mktemp)
pstat=$(mktemp)
trap 'rm -f "$out" "$pstat"' EXIT
rc=0
for v in kernel plain; do
	if [ "$use_perf" = 1 ]; then
		perf stat -x, -o "$pstat" -e task-clock,context-switches -- \
			"$build/$v/perf/tp_scaling" "$@" | tee -a "$out" || rc=1
		awk -F, -v v="$v" '
			$3 == "task-clock" { tc = $1 }
			$3 == "context-switches" { cs = $1 }
			END { if (tc != "") printf "tp_scaling_perf variant=%s task_clock_ms=%.1f context_switches=%s\n", v, tc, cs }
		' "$pstat"
	else
		"$build/$v/perf/tp_scaling" "$@" | tee -a "$out" || rc=1
	fi
done
if [ "$rc" != 0 ]; then
	echo "tp_scaling.sh: a run failed (see above)" >&2
	exit 1
fi

awk '
function val(k,   i, kv) {
	for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) return kv[2] }
	return ""
}
function check(ok, what) {
	printf "tp_scaling.sh: %s: %s\n", what, ok ? "met" : "MISSED" > "/dev/stderr"
	bad += !ok
}
$1 == "tp_scaling" {
	v = val("variant"); o = val("order"); n = val("ranks") + 0
	variants[v] = 1
	tps[v, o, n] = val("tasks_per_s"); mif[v, o, n] = val("max_inflight_reads")
	osm[v, o, n] = val("owner_share_max")
	if (val("backend_reads") != val("unique_shards")) {
		check(0, sprintf("%s %s ranks=%d backend_reads %s == unique_shards %s", v, o, n,
				 val("backend_reads"), val("unique_shards")))
		reads_bad[v] = 1
	}
	if (o == "rotated") { if (!(v in nr)) nr[v] = 0; rk[v, nr[v]++] = n }
}
$1 == "tp_scaling_slow_copier" { ratio[val("variant")] = val("ratio") }
END {
	bad = 0
	for (v in variants) {
		if (!(v in reads_bad))
			check(1, v " backend_reads == unique_shards on every line")
		if ((v, "rotated", 4) in tps && (v, "natural", 4) in tps) {
			check(mif[v, "rotated", 4] >= 3.5 * mif[v, "natural", 4],
			      sprintf("%s ranks=4 max_inflight_reads rotated %s >= 3.5x natural %s", v,
				      mif[v, "rotated", 4], mif[v, "natural", 4]))
			check(tps[v, "rotated", 4] >= 3 * tps[v, "natural", 4],
			      sprintf("%s ranks=4 tasks_per_s rotated %s >= 3x natural %s", v,
				      tps[v, "rotated", 4], tps[v, "natural", 4]))
			check(osm[v, "rotated", 4] <= 0.3,
			      sprintf("%s ranks=4 rotated owner_share_max %s <= 0.3", v, osm[v, "rotated", 4]))
		}
		for (i = 1; i < nr[v]; i++) {
			a = rk[v, i - 1]; b = rk[v, i]
			check(tps[v, "rotated", b] > tps[v, "rotated", a],
			      sprintf("%s rotated tasks_per_s grows %d -> %d ranks (%s -> %s)", v, a, b,
				      tps[v, "rotated", a], tps[v, "rotated", b]))
		}
		if (v in ratio)
			check(ratio[v] >= 0.9, sprintf("%s slow_copier ratio %s >= 0.9", v, ratio[v]))
	}
	exit bad ? 3 : 0
}' "$out"
