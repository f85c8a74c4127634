#!/usr/bin/env bash
# tests/perf_smoke.sh perf/SCRIPT BUILD_DIR — the perf.<script> CTest entries
# (tests/perf_smoke.cmake): one perf/ script run in its smoke mode
# (KVS_PERF_SMOKE=1: the script's own loops and lines on tiny sizes, in a few
# seconds; its opening comment says what it shrinks), then every
# machine-readable line it promises checked, each one exactly once, with
# numbers where numbers belong.  A run that stops part way (a block-file
# geometry refusal, a failed reader) fails by its exit code or by the lines it
# did not print.
#
# Exit codes of the script: 0 pass (then the lines); 3 (a missed performance
# target: wait_cost, store_sleep, tp_scaling, hit_bench) is no failure here, since a smoke
# run's numbers judge nothing, but the lines are checked and so are the
# correctness invariants the targets include; 77 skip, its "SKIP:" reason
# printed by the script (tests/skips.sh lists it); anything else fails.
# Python scripts run under $KVS_PYTHON, else python3; vllm_load_profile.py,
# which needs vLLM, under the pinned vLLM venv's python where
# python/vllm-env/env.sh gives one (the vllm.env fixture made it).  Scratch
# files go to a temporary TMPDIR, removed at the end.  Exit 0 pass, 1 fail, 77
# skip.
set -uo pipefail

script=${1:?usage: perf_smoke.sh perf/SCRIPT BUILD_DIR}
build=${2:?usage: perf_smoke.sh perf/SCRIPT BUILD_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
name=$(basename "$script")
work=$(mktemp -d "${TMPDIR:-/tmp}/kvs-perf-smoke.XXXXXX")
trap 'rm -rf "$work"' EXIT
out=$work/stdout err=$work/stderr

case $name in
chaos.sh) cmd=("$root/$script" --build "$build") ;;
gpu_check.sh) cmd=("$root/$script" "$build") KVS_GPU_CHECK_OUT=$work/gpu_check ;;
vllm_ttft.py | vllm_itl.py) cmd=("${KVS_PYTHON:-python3}" "$root/$script")
	KVSHARE_LIBRARY=$build/lib/libkvshare.so.1 ;;
weights_fingerprint.py) cmd=("${KVS_PYTHON:-python3}" "$root/$script")
	PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH} ;;
vllm_load_profile.py)
	py=${KVS_PYTHON:-}
	if [ -z "$py" ] && venv=$("$root/python/vllm-env/env.sh" 2>/dev/null | tail -n 1) &&
	   [ -x "$venv/bin/python" ]; then
		py=$venv/bin/python
	fi
	cmd=("${py:-python3}" "$root/$script" "$build")
	PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH} KVSHARE_LIBRARY=$build/lib/libkvshare.so.1 ;;
*.py) cmd=("${KVS_PYTHON:-python3}" "$root/$script" "$build") ;;
*) cmd=("$root/$script" "$build") ;;
esac
export KVS_GPU_CHECK_OUT KVSHARE_LIBRARY PYTHONPATH

t0=$(date +%s.%N)
KVS_PERF_SMOKE=1 TMPDIR=$work timeout -k 10 150 "${cmd[@]}" >"$out" 2>"$err" </dev/null
rc=$?
secs=$(awk -v t0="$t0" -v t1="$(date +%s.%N)" 'BEGIN { printf "%.1f", t1 - t0 }')
echo "perf_smoke: ${cmd[*]} (KVS_PERF_SMOKE=1): exit $rc in $secs s; its stdout:"
cat "$out"
echo "perf_smoke: its stderr:"
cat "$err"
case $rc in
0) ;;
3) echo "perf_smoke: exit 3 (a target missed): not judged in a smoke run" ;;
77) grep -q '^SKIP: ' "$out" "$err" 2>/dev/null || echo "SKIP: $script exited 77 without a reason"
	exit 77 ;;
*) echo "FAIL: $script exited $rc"; exit 1 ;;
esac

fails=0 checks=0
fail() {
	echo "FAIL: $script: $*"
	fails=$((fails + 1))
}
# want N ERE: exactly N lines of stdout match ERE (anchored by the caller).
want() {
	local n
	n=$(grep -cE -- "$2" "$out")
	checks=$((checks + 1))
	[ "$n" = "$1" ] || fail "want $1 line(s) matching /$2/, got $n"
}
# hugetlb N ERE: as want, but fewer where the run said (on stderr, matching
# $pool_short) that the hugepage pool had no room for a size: the smoke runs
# leave the pool as other tests find it.
pool_short=''
hugetlb() {
	if [ -n "$pool_short" ] && grep -qE -- "$pool_short" "$err"; then
		local n
		n=$(grep -cE -- "$2" "$out")
		checks=$((checks + 1))
		[ "$n" -le "$1" ] || fail "want at most $1 line(s) matching /$2/, got $n"
	else
		want "$@"
	fi
}
said() { grep -qE -- "$1" "$out" "$err"; } # the script said ERE (a "#" or stderr line)
num='[0-9]+(\.[0-9]+)?'

case $name in
backend_bench.sh)
	directs="0 1"
	said '^# backend_bench: O_DIRECT not supported' && directs=0
	for d in $directs; do
		for k in 256 1024; do
			for q in 8 32; do
				p="shard_kib=$k qd=$q gbps=$num cpu_ms_per_gib=$num"
				want 1 "^backend engine=uring $p variant=kernel direct=$d mem=(hugetlb|thp)$"
				want $((1 - d)) "^backend engine=uring $p variant=kernel direct=$d mem=(hugetlb|thp) lookup=1$"
				want 1 "^backend engine=uring $p variant=kernel direct=$d mem=(hugetlb|thp) hint=1$"
				want 1 "^backend engine=pool $p variant=kernel direct=$d mem=(hugetlb|thp)$"
				want 1 "^backend engine=pool $p variant=plain direct=$d mem=(hugetlb|thp)$"
				if command -v fio >/dev/null; then
					want 1 "^backend engine=fio $p variant=fio direct=$d mem=(hugetlb|malloc)$"
				fi
			done
		done
	done
	command -v fio >/dev/null || want 1 '^# backend_bench: fio not installed'
	if command -v redis-server >/dev/null; then
		for k in 16 256 1024; do
			for point in "1 1" "8 1" "32 1" "32 4"; do
				read -r q c <<<"$point"
				for v in kernel plain; do
					want 1 "^backend engine=redis shard_kib=$k qd=$q gbps=$num cpu_ms_per_gib=$num variant=$v direct=0 mem=(hugetlb|thp) conns=$c server_cpu_ms_per_gib=$num sleeps_per_gib=$num$"
				done
			done
		done
	else
		want 1 '^# backend_bench: redis-server not installed'
	fi
	;;
chaos.sh)
	want 3 '^chaos seed=[0-9]+ '
	want 3 '^chaos ranks=8 seconds=1 kills=[0-9]+ tasks=[0-9]+ failures=[0-9]+ max_wait_ms=[0-9]+ durable=[0-9]+ violations=0$'
	;;
get_bench.sh)
	n=$(nproc)
	[ "$n" -ge 2 ] || n=2
	for path in hit miss; do
		for procs in 1 "$n"; do
			for v in kernel plain; do
				want 1 "^get_bench variant=$v path=$path procs=$procs ops_per_s=[0-9]+ ns_per_op=$num$"
			done
		done
	done
	;;
gpu_check.sh)
	want 1 '^gpu_check: PASS build \(prebuilt\)$'
	want 3 '^gpu_check: PASS target tensor_bytes=[0-9]+ auto ratio='
	want 0 '^gpu_check: FAIL'
	want 1 '^gpu_check: summary: [0-9]+ PASS, 0 FAIL'
	;;
hit_bench.sh)
	tail="wall_ns_per_shard=$num cpu_ns_per_shard=$num overhead_cpu_ns_per_shard=-?$num shards_per_s=$num gb_per_s=$num"
	for v in kernel plain; do
		for p in ready cold; do
			[ $p = ready ] && base=memcpy || base='fill\+memcpy'
			for k in 4 8 16 32 256; do
				b=$((k * 1024))
				for rs in "1 same" "2 same" "2 disjoint"; do
					read -r n sh <<<"$rs"
					want 1 "^hit_bench variant=$v path=$p ranks=$n sharing=$sh geometry=none layout=none tp=1 shard_bytes=$b tensors=1 shards=64 per_task=64 $tail base=$base base_ns_per_shard=$num base_gb_per_s=$num ratio=$num nt_ns_per_shard=$num nt_gb_per_s=$num ratio_nt=$num switches_per_kshard=$num streams=1$"
				done
			done
		done
		for k in 4 8 32; do
			for n in 1 2; do
				want 1 "^hit_bench variant=$v path=ready ranks=$n sharing=same geometry=none layout=none tp=1 shard_bytes=$((k * 1024)) tensors=1 shards=64 per_task=32 $tail base=memcpy "
			done
		done
		for gl in llama3-8b:32 llama3-70b:80 mha-72b:80; do
			g=${gl%:*} layers=${gl#*:}
			for tp in 1 2 8; do
				want 1 "^hit_bench variant=$v path=ready ranks=1 sharing=same geometry=$g layout=head tp=$tp shard_bytes=$((8192 * layers)) tensors=$layers shards=[0-9]+ per_task=[0-9]+ $tail base=memcpy "
				want 1 "^hit_bench variant=$v path=ready ranks=1 sharing=same geometry=$g layout=layer-head tp=$tp shard_bytes=8192 tensors=1 shards=[0-9]+ per_task=[0-9]+ $tail base=memcpy "
			done
		done
	done
	;;
hit_profile.sh)
	for v in kernel plain; do
		want 1 "^hit_profile variant=$v shard_bytes=8192 shards=64 rounds=2 fill_ns=$num copy_ns=$num dispatcher_own_ns=$num copier_own_ns=$num own_ns=$num base_fill_ns=$num base_nt_ns=$num base_memcpy_ns=$num overhead_cpu_ns_per_shard=-?$num$"
	done
	;;
open_cost.sh)
	pool_short='huge pages not free'
	p="gib=0.125 ranks=8 blocks=8 create_ms=$num attach_ms_mean=$num attach_ms_max=$num load_ms_max=$num cpu_s=$num wall_s=$num$"
	want 1 "^open_cost variant=kernel backing=shm $p"
	want 1 "^open_cost variant=plain backing=shm $p"
	hugetlb 1 "^open_cost variant=kernel backing=hugetlb $p"
	;;
weights_fingerprint.py)
	for c in cold warm; do
		want 1 "^weights_fingerprint case=$c files=2 gib_per_file=$num ms=$num ms_per_file=$num read_mib=$num total_gib=$num$"
	done
	want 1 "^weights_fingerprint model=70b_bf16 files=30 est_cold_ms=$num est_warm_ms=$num$"
	;;
vllm_load_profile.py)
	want 1 "^vllm_load_profile config layers=8 kv_heads=8 head_dim=128 blocks=4 shard_bytes=262144 layer_bytes=32768 prefix_bytes=8388608 "
	want 1 "^vllm_load_profile floor copy_bytes=8388608 floor_ms=$num floor_median_ms=$num shard_floor_ms=$num shard_copies=256 shard_call_overhead_ms=$num$"
	want 1 "^vllm_load_profile tp=1 save wait_for_save_ms=$num bytes=8388608 "
	want 1 "^vllm_load_profile tp=1 lookup ids_ms=$num lookup_prefix_ms=$num blocks=5 hit=4 "
	for c in backend_hot cache_hit; do
		want 1 "^vllm_load_profile tp=1 case=$c total_ms=$num .* owner_reads=[0-9]+ load_hits=[0-9]+ gib_per_s=$num floor_ms=$num total/floor=$num best_ms=$num rounds=1 all_ms=[0-9]+$"
	done
	# 4 blocks x 8 shards (a KV head each, every layer), loaded as the connector's
	# 4 layer groups: the first group's task reads each shard, the other 3 hit it
	want 1 "^vllm_load_profile tp=1 case=backend_hot .* owner_reads=32 load_hits=96 "
	want 1 "^vllm_load_profile tp=1 case=cache_hit .* owner_reads=0 load_hits=128 "
	want 0 "FAILED"
	;;
python_load.py)
	for v in kernel plain; do
		for m in block shard; do
			for d in c python; do
				want 1 "^store_load driver=$d variant=$v mode=$m .* tasks=[0-9]+ seconds=$num gib_per_s=$num tasks_per_s=[0-9]+$"
			done
			want 1 "^store_load_ratio variant=$v mode=$m python_over_c_tasks_per_s=$num$"
		done
	done
	;;
readme_sample.sh)
	want 1 "^readme_sample: .*/README.md: sample replaced \\($num s run\\)$"
	;;
segment_bench.sh)
	pool_short='backing=hugetlb gib=[0-9.]+ skipped'
	for g in 0.0625 0.125; do
		p="gib=$g create_ms=$num attach_ms=$num ms_per_gib=$num$"
		want 1 "^segment variant=kernel backing=shm $p"
		want 1 "^segment variant=plain backing=shm $p"
		hugetlb 1 "^segment variant=kernel backing=hugetlb $p"
	done
	;;
startup_bench.sh)
	pool_short='backing=hugetlb [0-9]+ bytes skipped'
	for v in kernel plain; do
		for t in 1 2; do
			want 1 "^startup prefault variant=$v backing=shm gib=0.0625 threads=$t reps=1 prefault_ms=$num ms_per_gib=$num speedup=$num$"
		done
		want 1 "^startup first_load variant=$v backing=shm gib=0.0625 open_ms=$num first_load_ms=$num ready_ms=$num staged=[01]$"
	done
	hugetlb 2 "^startup prefault variant=kernel backing=hugetlb gib=0.0625 threads=[12] "
	hugetlb 1 "^startup first_load variant=kernel backing=hugetlb "
	if said '^startup register skipped: '; then # no GPU: one line per register run
		hugetlb 2 '^startup register skipped: '
	else
		want 1 "^startup register variant=kernel backing=shm gib=0.0625 chunk=16777216 open_ms=$num "
		hugetlb 1 "^startup register variant=kernel backing=hugetlb gib=0.0625 chunk=16777216 "
	fi
	want 1 "^(PASS|FAIL) startup target backing=shm threads2_vs_1=$num "
	hugetlb 1 "^(PASS|FAIL) startup target backing=hugetlb threads2_vs_1=$num "
	;;
store_sleep.sh)
	for v in kernel plain; do
		for run in latency:own pool:own uring:own latency:peer; do
			b=${run%%:*} w=${run##*:}
			p="hold_ms=400 measure_ms=100 dispatcher_wakeups_per_s=$num dispatcher_cpu_ms=$num copier_wakeups_per_s=$num copier_cpu_pct=$num src=(perf|schedstat)"
			[ "$b" = uring ] && p="($p|skipped=io_uring_unavailable)"
			want 1 "^store_sleep variant=$v backend=$b waiter=$w $p$"
		done
	done
	;;
tp_scaling.sh)
	for v in kernel plain; do
		for o in rotated natural; do
			for r in 1 2 4 8; do
				want 1 "^tp_scaling variant=$v order=$o ranks=$r tasks_per_s=$num backend_reads=[0-9]+ unique_shards=[0-9]+ max_inflight_reads=[0-9]+ owner_share_max=$num waiter_cpu_pct=$num mean_inflight_reads=$num$"
			done
		done
		want 1 "^tp_scaling_slow_copier variant=$v ranks=4 others_tasks_per_s_base=$num others_tasks_per_s_slow=$num ratio=$num$"
		# one per variant where perf stat works (the script says when it does not)
		said 'perf stat unusable here' && n=0 || n=1
		want $n "^tp_scaling_perf variant=$v task_clock_ms=$num context_switches=[0-9]+$"
	done
	# a correctness target, not a timing one: every shard read once at every rank count
	checks=$((checks + 1))
	bad=$(awk '$1 == "tp_scaling" {
		for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
		if (f["backend_reads"] != f["unique_shards"]) print
	}' "$out")
	[ -z "$bad" ] || fail "backend_reads != unique_shards: $bad"
	;;
wait_cost.sh)
	for n in 1 3 7; do
		for h in 10 100 1000; do
			for v in plain kernel; do
				want 1 "^wait_cost variant=$v waiters=$n hold_us=$h rounds=[0-9]+ cpu_pct=$num ctx_switches=[0-9]+ wake_p50_us=$num wake_p99_us=$num( src=rusage)?$"
			done
		done
	done
	;;
*)
	fail "no smoke checks for $script: add its lines to tests/perf_smoke.sh"
	;;
esac

if [ "$fails" != 0 ]; then
	echo "perf_smoke: $script: $fails of $checks checks failed"
	exit 1
fi
echo "perf_smoke: $script: $checks checks passed"
