#!/usr/bin/env bash
# fuzz/run.sh — bounded libFuzzer runs (make fuzz).
#
#   fuzz/run.sh <build dir> <seconds> <target>...     e.g. fuzz/run.sh build-fuzz 60 ctl
#
# Each target <t> (binary <build dir>/fuzz/fuzz_<t>) runs for <seconds> on a
# scratch copy of fuzz/corpus/<t> (new inputs go there, the repository is not
# modified), with the dictionary fuzz/<t>.dict if there is one, and with
# -timeout=5 so that a hang is reported like a crash.  Crash,
# hang and out-of-memory reproducers are written to fuzz/crashes/<t>/ (ignored
# by git); the full log is <build dir>/fuzz/<t>.log.  Prints libFuzzer's final
# statistics (executions, exec/s, ...) and exits non-zero if any target found
# anything.  $FUZZ_ARGS: more libFuzzer flags (e.g. '-fork=1 -ignore_crashes=1
# -ignore_timeouts=1' to keep going after a finding and collect them all).
set -uo pipefail

if [ $# -lt 3 ]; then
	echo "usage: $0 <build dir> <seconds> <target>..." >&2
	exit 2
fi
build=$1
secs=$2
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)

# Sanitizer reports symbolized, every finding fatal; leaks are checked per input
# by libFuzzer (-detect_leaks, default on).
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
if ! command -v llvm-symbolizer >/dev/null && [ -x /usr/lib/llvm-14/bin/llvm-symbolizer ]; then
	export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-14/bin/llvm-symbolizer
fi

status=0
for t in "$@"; do
	bin=$build/fuzz/fuzz_$t
	log=$build/fuzz/$t.log
	crashes=$root/fuzz/crashes/$t
	if [ ! -x "$bin" ]; then
		echo "fuzz/run.sh: $bin not built" >&2
		exit 2
	fi
	mkdir -p "$crashes"
	marker=$(mktemp "${TMPDIR:-/tmp}/kvs-fuzz-$t.start.XXXXXX")
	scratch=$(mktemp -d "${TMPDIR:-/tmp}/kvs-fuzz-$t.XXXXXX")
	cp -r "$root/fuzz/corpus/$t/." "$scratch/"
	dict=()
	if [ -f "$root/fuzz/$t.dict" ]; then
		dict=(-dict="$root/fuzz/$t.dict")
	fi
	echo "=== fuzz_$t: ${secs}s on a copy of fuzz/corpus/$t ($(ls "$scratch" | wc -l) seeds)"
	"$bin" -max_total_time="$secs" -timeout=5 -max_len=65536 -use_value_profile=1 "${dict[@]}" \
		-print_final_stats=1 -artifact_prefix="$crashes/" ${FUZZ_ARGS:-} "$scratch" >"$log" 2>&1
	rc=$?
	stats='number_of_executed_units|average_exec_per_sec|new_units_added|slowest_unit_time_sec|peak_rss_mb'
	grep -E "^(Done [0-9]+ runs|stat::($stats))" "$log" || true
	grep -E '^#[0-9]+: cov:' "$log" | tail -1 # -fork mode's progress line
	echo "corpus: $(ls "$scratch" | wc -l) inputs at the end"
	# a crashed input leaves its control file (fuzz_block: its block directory
	# and its store's segments): remove those of dead processes
	for f in /dev/shm/kvshare.fuzz.*; do
		pid=${f#/dev/shm/kvshare.fuzz.}
		pid=${pid%%.*}
		if [ -e "$f" ] && [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
			rm -rf -- "$f"
		fi
	done
	found=$(find "$crashes" -type f -newer "$marker" | sort)
	rm -rf "$scratch" "$marker"
	if [ $rc -ne 0 ] || [ -n "$found" ]; then
		status=1
		echo "=== fuzz_$t FAILED (libFuzzer exit $rc); log $log; reproducers:"
		printf '  %s\n' $found
		echo "--- report:"
		grep -E -A40 '^==[0-9]+== ?ERROR|runtime error:|ALARM: working on the last Unit|fuzz_ctl: ' "$log" |
			grep -v -E '^(INFO|#[0-9]+|stat::)' | head -80
		echo "--- reproduce: FUZZ_CTL_VERBOSE=1 $bin <reproducer>"
	else
		echo "=== fuzz_$t: no crash, hang or leak"
	fi
done
exit $status
