#!/usr/bin/env bash
# perf/hit_profile.sh [builddir] [hit_bench options...] — where a cold shard's
# CPU goes, thread by thread, within one run (docs/store.md, "What a hit
# costs").  hit_bench's overhead_cpu_ns_per_shard subtracts a baseline run
# beside the pipeline; on a noisy machine the fill and the copy alone move more
# between the two than the pipeline's own work is.  This splits one run instead.
#
# Per variant, kernel then plain: `hit_bench --path cold` (one rank; 8 KiB
# shards, 8192 of them, 9 rounds, unless the options say otherwise) under
# `perf record -e cpu-clock -F 20000`, and from its samples, in ns per shard:
#
#   hit_profile variant=<v> shard_bytes=<b> shards=<n> rounds=<r> fill_ns=<..>
#     copy_ns=<..> dispatcher_own_ns=<..> copier_own_ns=<..> own_ns=<..>
#     base_fill_ns=<..> base_nt_ns=<..> base_memcpy_ns=<..>
#     overhead_cpu_ns_per_shard=<..>
#
#   fill_ns            the dispatcher thread (kvs-dispatch) in latency_poll, the
#                      latency backend's reap, where its fill of the slot is;
#   copy_ns            the copier thread (kvs-copier) in kvs_copy_bytes and the
#                      libc copy it calls;
#   dispatcher_own_ns, copier_own_ns
#                      everything else of those two threads (kernel included);
#                      own_ns their sum: the pipeline's own work;
#   base_fill_ns, base_nt_ns, base_memcpy_ns
#                      the bench's own baseline, on its main thread: the same
#                      fill, and the two copies of it (the host engine's streamed
#                      one, memcpy);
#   overhead_cpu_ns_per_shard
#                      hit_bench's own figure from the same run.
#
# The pipeline's figures divide by every shard it loaded (the untimed first
# round is cold too: rounds + 1), the baseline's by its passes (a fill in each
# of its two copies a round and in the final check of the bytes: 2 x rounds +
# 1; each copy once a round).  A renamed or no longer inlined function moves
# samples between the columns: the script fails if a thread or function it
# splits by has no samples at all (outside smoke mode).  Needs `perf` (exit 77
# with SKIP: otherwise).  About 30 s on a 2-core machine.
#
# Smoke mode (KVS_PERF_SMOKE=1; the perf.hit_profile CTest entry,
# tests/perf_smoke.sh): 64 shards, 2 rounds; the lines only (too few samples
# to split).  About 5 s.
set -uo pipefail
build=${1:-build}
shift || true
smoke=${KVS_PERF_SMOKE:-0}
shards=8192 rounds=9 kib=8
args=()
while [ $# -gt 0 ]; do
	if [ "$1" = --verbose ]; then # hit_bench's one option without a value
		args+=("$1")
		shift
		continue
	fi
	[ $# -ge 2 ] || { echo "hit_profile.sh: $1 needs a value" >&2; exit 1; }
	case $1 in
	--shards) shards=$2 ;;
	--rounds) rounds=$2 ;;
	--shard-kib) kib=$2 ;;
	--ranks | --path)
		echo "hit_profile.sh: $1 is fixed here (one rank, the cold path)" >&2
		exit 1 ;;
	*) args+=("$1" "$2") ;;
	esac
	shift 2
done
[ "$smoke" = 1 ] && shards=64 rounds=2
for v in kernel plain; do
	if [ ! -x "$build/$v/perf/hit_bench" ]; then
		echo "hit_profile.sh: $build/$v/perf/hit_bench missing (cmake --build $build)" >&2
		exit 1
	fi
done
if ! command -v perf >/dev/null 2>&1 ||
   ! perf record -q -e cpu-clock -o /dev/null -- true >/dev/null 2>&1; then
	echo "SKIP: hit_profile.sh: perf record unusable here (install linux-perf; perf_event_paranoid)"
	exit 77
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rc=0
for v in kernel plain; do
	line=$(perf record -q -e cpu-clock -F 20000 -o "$work/$v.data" -- \
		"$build/$v/perf/hit_bench" --path cold --shard-kib "$kib" --shards "$shards" \
		--rounds "$rounds" ${args[@]+"${args[@]}"} 2>"$work/$v.err" | tail -n 1)
	if [[ $line != "hit_bench variant=$v path=cold "* ]]; then
		echo "hit_profile.sh: $v: hit_bench failed:" >&2
		cat "$work/$v.err" >&2
		rc=1
		continue
	fi
	# period: the ns of cpu-clock each sample stands for
	perf report -i "$work/$v.data" --sort comm,sym -F period,comm,sym --stdio 2>/dev/null |
		awk -v v="$v" -v line="$line" -v shards="$shards" -v rounds="$rounds" \
		    -v kib="$kib" -v smoke="$smoke" '
		/^#/ || NF < 4 { next }
		{ ns = $1; comm = $2; sym = $4 }
		comm == "kvs-dispatch" { disp += ns; if (sym == "latency_poll") fill += ns }
		comm == "kvs-copier" { cop += ns; if (sym == "kvs_copy_bytes" || sym ~ /^__mem(move|cpy)/) copy += ns }
		comm == "hit_bench" && sym ~ /^kvs_pattern_fill/ { bfill += ns }
		comm == "hit_bench" && sym == "kvs_copy_bytes" { bnt += ns }
		comm == "hit_bench" && sym ~ /^__mem(move|cpy)/ { bmc += ns }
		END {
			if (smoke != 1 && (!fill || !copy || !bfill || !bnt || !bmc || disp == fill || cop == copy)) {
				printf "hit_profile.sh: %s: a column has no samples (fill %d copy %d base fill %d nt %d memcpy %d): renamed or inlined functions? (perf report)\n", v, fill, copy, bfill, bnt, bmc > "/dev/stderr"
				exit 1
			}
			n = shards * (rounds + 1); nb = shards * rounds
			match(line, /overhead_cpu_ns_per_shard=[-0-9.]+/)
			ov = substr(line, RSTART + 26, RLENGTH - 26)
			printf "hit_profile variant=%s shard_bytes=%d shards=%d rounds=%d fill_ns=%.0f copy_ns=%.0f dispatcher_own_ns=%.0f copier_own_ns=%.0f own_ns=%.0f base_fill_ns=%.0f base_nt_ns=%.0f base_memcpy_ns=%.0f overhead_cpu_ns_per_shard=%s\n",
			       v, kib * 1024, shards, rounds, fill / n, copy / n, (disp - fill) / n,
			       (cop - copy) / n, (disp - fill + cop - copy) / n,
			       bfill / (shards * (2 * rounds + 1)), bnt / nb, bmc / nb, ov
		}' || rc=1
done
exit $rc
