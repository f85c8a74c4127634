#!/usr/bin/env bash
# tests/tools_replay.sh KVSHARE [VARIANT] — `kvshare replay` driven end to end, as a user
# runs it: a tiny generated trace whose hit counts are derived by hand below
# for every policy (fifo, lru, belady, and clock: the real libkvshare cache),
# the table mode, --json, --shards, and bad input (missing file, a malformed
# line reported by its number, bad numbers, unknown flags: a one-line message
# and a non-zero exit), --help; and `kvshare trace gen` (deterministic by seed,
# its trace replays with hits).  Every run must leave no cache segment behind.
# LD_LIBRARY_PATH picks the library variant the CLI runs against
# (tests/tools_replay.cmake runs this once per variant).
# Exit 0 pass, 1 fail.
set -uo pipefail

BIN=${1:?usage: tools_replay.sh KVSHARE [VARIANT]}
VARIANT=${2:-} # when given: the library variant the CLI must report
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kvs-replay-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
fails=0

fail() {
	echo "FAIL: $*"
	fails=$((fails + 1))
}

# run ARGS...: runs the CLI in the background to learn its pid; sets rc, out,
# err, and checks that no segment of that pid is left in /dev/shm.
run() {
	"$BIN" "$@" >"$WORK/out" 2>"$WORK/err" &
	local pid=$!
	wait $pid
	rc=$?
	out=$(cat "$WORK/out")
	err=$(cat "$WORK/err")
	if ls /dev/shm/kvshare.kvshare-replay.$pid.* >/dev/null 2>&1; then
		fail "replay $* left segments: $(ls /dev/shm/kvshare.kvshare-replay.$pid.*)"
		rm -f /dev/shm/kvshare.kvshare-replay.$pid.*
	fi
}

expect_line() { # expect_line TEXT: out has exactly this line
	if ! grep -qxF -- "$1" <<<"$out"; then
		fail "missing line: $1"
		echo "--- stdout:"
		echo "$out"
		echo "--- stderr:"
		echo "$err"
	fi
}

# expect_error RC PATTERN ARGS...: exit RC, stdout empty, stderr one line matching
expect_error() {
	local want=$1 pat=$2
	shift 2
	run "$@"
	if [ "$rc" -ne "$want" ]; then
		fail "replay $*: exit $rc, want $want (stderr: $err)"
	elif [ -n "$out" ]; then
		fail "replay $*: stdout not empty: $out"
	elif [ "$(printf '%s\n' "$err" | wc -l)" -ne 1 ]; then
		fail "replay $*: stderr is not one line: $err"
	elif ! grep -qE -- "$pat" <<<"$err"; then
		fail "replay $*: stderr '$err' does not match '$pat'"
	else
		echo "ok: replay $* -> exit $rc: $err"
	fi
}

# --- the tiny trace ---------------------------------------------------------
# Eight requests R1..R8; in timestamp order their hash_ids are
#   R1 [3]  R2 [3,2]  R3 [1]  R4 [3,4]  R5 [1]  R6 [3,2,6]  R7 [4]  R8 [3,5]
# (13 block accesses, 6 distinct blocks).  The file lists them out of order;
# R3 and R4 share timestamp 20 and must stay in file order (swapped, clock
# would get 4 hits, not 5); a blank line, a CRLF line and an unknown field are
# ignored.
cat >"$WORK/tiny.jsonl" <<'EOF'
{"timestamp": 30, "input_length": 512, "output_length": 8, "hash_ids": [1]}
{"timestamp": 0, "input_length": 300, "output_length": 8, "hash_ids": [3]}
{"timestamp": 10, "input_length": 1000, "output_length": 8, "hash_ids": [3, 2], "session": "x"}
{"timestamp": 20, "input_length": 512, "output_length": 8, "hash_ids": [1]}
{"timestamp": 20, "input_length": 1000, "output_length": 8, "hash_ids": [3, 4]}

{"timestamp": 70, "input_length": 1000, "output_length": 8, "hash_ids": [3, 5]}
{"timestamp": 60, "input_length": 512, "output_length": 8, "hash_ids": [4]}
{"timestamp": 40, "input_length": 1500, "output_length": 8, "hash_ids": [3, 2, 6]}
EOF
printf '\r\n' >>"$WORK/tiny.jsonl"

# Expected hits at capacity 3 blocks.  A request's hits = the longest prefix
# of its ids resident before it; then each of its ids is touched or inserted.
#
# FIFO (queue, oldest first; a hit changes nothing):
#   R1 [3]     0        q 3
#   R2 [3,2]   1 (3)    q 3 2
#   R3 [1]     0        q 3 2 1
#   R4 [3,4]   1 (3)    4 evicts 3: q 2 1 4
#   R5 [1]     1        -
#   R6 [3,2,6] 0 (3 gone)  3 evicts 2, 2 evicts 1, 6 evicts 4: q 3 2 6
#   R7 [4]     0        4 evicts 3: q 2 6 4
#   R8 [3,5]   0                                   total 3
# LRU (most recent first):
#   R1 0 [3];  R2 1 [2 3];  R3 0 [1 2 3];  R4 1: 3 touched [3 1 2], 4 evicts 2 [4 3 1]
#   R5 1 [1 4 3];  R6 1 (3; 2 gone): [3 1 4], 2 evicts 4 [2 3 1], 6 evicts 1 [6 2 3]
#   R7 0: 4 evicts 3 [4 6 2];  R8 0                total 4
# Belady (evict the farthest next use; access positions 0..12 in order):
#   R1 0;  R2 1 {3 next@4, 2 next@8};  R3 0 {1 next@6}
#   R4 1: 4 evicts 2 (next@8 is the farthest of 3@7, 1@6, 2@8)
#   R5 1: {3@7, 4@10, 1 never};  R6 1 (3; 2 gone): 2 evicts 1 (never), 6 evicts
#   2 (never): {3@11, 4@10, 6 never};  R7 1;  R8 1 (3)   total 6
# CLOCK, the real cache (core/clock.c: weight 1 at allocation, +1 per new use
# up to 2, the hand takes 1 per pass and evicts at 0; three slots s0 s1 s2,
# the hand starts at s0 and stops one past the slot it takes):
#   R1 0: 3 -> s0 (w1)
#   R2 1: 3 hit (w2); 2 -> s1 (w1)
#   R3 0: 1 -> s2 (w1)                      s0 3:2  s1 2:1  s2 1:1
#   R4 1: 3 hit (stays 2); 4: hand s0 2->1, s1 1->0, s2 1->0, s0 1->0, s1 taken:
#         s0 3:0  s1 4:1  s2 1:0, hand at s2
#   R5 1: 1 hit (w1)
#   R6 1 (3; 2 gone): 3 hit (w1); 2: s2 1->0, s0 1->0, s1 1->0, s2 taken (1
#         evicted); 6: s0 taken (3 evicted): s0 6:1  s1 4:0  s2 2:1, hand at s1
#   R7 1: 4 is still there (LRU lost it)  -> w1
#   R8 0: 3 gone                           total 5
# (A single reference bit, the layout before version 4, gives 3 here.)
cap_line() { # cap_line POLICY HITS
	printf 'replay trace=tiny.jsonl policy=%s capacity_blocks=3 accesses=13 hits=%d hit_ratio=%.4f' \
		"$1" "$2" "$(echo "$2 / 13" | awk -F/ '{ printf "%.6f", $1 / $2 }')"
}

run replay "$WORK/tiny.jsonl" --capacity-blocks 3
[ "$rc" -eq 0 ] || fail "replay --capacity-blocks 3: exit $rc: $err"
expect_line "$(cap_line clock 5)"
expect_line "$(cap_line fifo 3)"
expect_line "$(cap_line lru 4)"
expect_line "$(cap_line belady 6)"
[ "$(grep -c '^replay ' <<<"$out")" -eq 4 ] || fail "want 4 replay lines: $out"
if [ -n "$VARIANT" ] && ! grep -q "^tiny.jsonl: .* libkvshare [0-9.]* ($VARIANT)" <<<"$out"; then
	fail "the CLI did not run against the $VARIANT library: $(head -1 <<<"$out")"
fi
echo "ok: capacity 3: clock 5, fifo 3, lru 4, belady 6"

# Two shards per block: a block's shards sit in adjacent slots, inserted and
# touched together, so the hand sees each slot pair as one slot: same hits.
run replay --shards 2 --shard-size 1k --capacity-blocks=3 "$WORK/tiny.jsonl"
[ "$rc" -eq 0 ] || fail "replay --shards 2: exit $rc: $err"
expect_line "$(cap_line clock 5)"
expect_line "$(cap_line lru 4)"
echo "ok: --shards 2: clock 5"

# Capacity 1: every policy holds just the last block inserted, so a request
# hits only when its first id is the previous request's last one: R2 [3,2]
# after R1 [3], and no other -> 1 hit for each policy.
run replay "$WORK/tiny.jsonl" --capacity-blocks 1
for p in clock fifo lru belady; do
	expect_line "replay trace=tiny.jsonl policy=$p capacity_blocks=1 accesses=13 hits=1 hit_ratio=0.0769"
done
echo "ok: capacity 1: 1 hit each"

# Table mode: 5/10/25/50% of 6 distinct blocks = 1, 1, 2, 3 blocks.
run replay "$WORK/tiny.jsonl"
[ "$rc" -eq 0 ] || fail "table: exit $rc: $err"
[ "$(grep -c '^replay ' <<<"$out")" -eq 16 ] || fail "table: want 16 replay lines"
expect_line "$(cap_line clock 5)"
expect_line "$(cap_line belady 6)"
grep -q 'infinite cache' <<<"$out" || fail "table: no infinite-cache row"
grep -qE '^ +50% +3 +38\.46 +23\.08 +30\.77 +46\.15 +-7\.69 pt$' <<<"$out" ||
	fail "table: no 50% row with 38.46 23.08 30.77 46.15: $out"
grep -q '6 distinct blocks' <<<"$out" || fail "table: distinct count"
# Infinite cache: R2 1 (3), R4 1 (3), R5 1, R6 2 (3 and 2, seen in R2), R7 1,
# R8 1 (3) = 7 of 13.
grep -q 'infinite-cache hit ratio 0.5385' <<<"$out" || fail "table: infinite-cache ratio"
echo "ok: table mode"

run replay "$WORK/tiny.jsonl" --capacity-blocks 3 --json
[ "$rc" -eq 0 ] || fail "--json: exit $rc: $err"
if command -v python3 >/dev/null; then
	python3 - "$WORK/out" <<'EOF' || fail "--json: bad document: $out"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["trace"] == "tiny.jsonl" and d["accesses"] == 13 and d["distinct_blocks"] == 6, d
assert d["infinite_hits"] == 7, d
got = {r["policy"]: r["hits"] for r in d["results"]}
assert got == {"clock": 5, "fifo": 3, "lru": 4, "belady": 6}, got
assert all(r["capacity_blocks"] == 3 for r in d["results"]), d
EOF
else
	grep -q '"policy": "clock"' <<<"$out" || fail "--json: no clock result"
fi
grep -q '^replay ' <<<"$out" && fail "--json: text lines in the JSON output"
echo "ok: --json"

# --capacity-gib: 12 KiB / (1 shard x 4 KiB) = 3 blocks
run replay "$WORK/tiny.jsonl" --capacity-gib 0.000011444091796875
expect_line "$(cap_line clock 5)"
echo "ok: --capacity-gib"

# --- the public Mooncake traces (docs/replay.md) ------------------------------
# Optional data, read from ../shared/traces beside the checkout; a trace that is
# not there is skipped, saying so.
# Every count below was cross-checked against an independent simulator (a
# Python one-off with its own FIFO deque, LRU OrderedDict, heapq Belady and a
# CLOCK with the weights of core/clock.c): regression values for the policies'
# data structures (the tiny trace above is too small to exercise Belady's heap).
TRACES=$(cd "$(dirname "$0")/../.." && pwd)/shared/traces
check_trace() { # check_trace FILE "CAP CLOCK FIFO LRU BELADY" ...
	local f=$1 row
	shift
	if [ ! -r "$TRACES/$f" ]; then
		echo "skip: $TRACES/$f not there"
		return
	fi
	run replay "$TRACES/$f"
	[ "$rc" -eq 0 ] || fail "replay $f: exit $rc: $err"
	for row in "$@"; do
		set -- $row
		local n p=0
		for n in clock fifo lru belady; do
			p=$((p + 1))
			shift
			local hits=$1 acc
			acc=$(sed -n 's/^.* accesses=\([0-9]*\) .*$/\1/p' <<<"$out" | head -1)
			grep -q "^replay trace=$f policy=$n capacity_blocks=${row%% *} accesses=$acc hits=$hits " <<<"$out" ||
				fail "$f: $n at ${row%% *} blocks: want $hits hits: $(grep "policy=$n capacity_blocks=${row%% *} " <<<"$out")"
		done
	done
	# the issue's target: clock within 0.5 point of lru at every capacity
	awk '/^clock vs lru: at most/ { found = 1; if ($5 + 0 > 0.5) bad = 1 }
	     END { exit !(found && !bad) }' <<<"$out" ||
		fail "$f: clock more than 0.5 pt below lru: $(tail -1 <<<"$out")"
	echo "ok: $f: $(tail -1 <<<"$out")"
}
#                                capacity clock  fifo   lru    belady
check_trace mooncake_trace_1000.jsonl "610 5550 5196 5545 6761" "1221 5568 5385 5568 7372" \
	"3052 5894 5821 5894 7479" "6104 6810 6769 6811 7479"
check_trace synthetic_trace.jsonl "2196 18953 18429 18861 48205" "4392 31552 30055 31668 61703" \
	"10981 54830 51048 54044 76296" "21962 71695 67057 71763 77953"

# --- bad input ----------------------------------------------------------------
printf '%s\n' '{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]}' \
	'' \
	'{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": [1, 2}' >"$WORK/broken.jsonl"
printf '%s\n' '{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]}' \
	'{"timestamp": 1.5, "input_length": 1, "output_length": 1, "hash_ids": [1]}' >"$WORK/real.jsonl"
: >"$WORK/empty.jsonl"

expect_error 1 "^kvshare replay: $WORK/missing.jsonl: No such file or directory$" replay "$WORK/missing.jsonl"
expect_error 1 "^kvshare replay: $WORK/broken.jsonl:3: invalid JSON" replay "$WORK/broken.jsonl"
expect_error 1 "^kvshare replay: $WORK/real.jsonl:2: field \"timestamp\" is not an integer$" \
	replay "$WORK/real.jsonl" --capacity-blocks 2
expect_error 1 "no requests" replay "$WORK/empty.jsonl"
expect_error 1 "Is a directory" replay "$WORK"
for bad in 0 -1 abc 1x '' 99999999999999999999 2147483648; do
	expect_error 2 "bad --capacity-blocks" replay "$WORK/tiny.jsonl" --capacity-blocks "$bad"
done
expect_error 2 "bad --capacity-gib" replay "$WORK/tiny.jsonl" --capacity-gib -1
expect_error 2 "bad --capacity-gib" replay "$WORK/tiny.jsonl" --capacity-gib nan
expect_error 2 "holds no block" replay "$WORK/tiny.jsonl" --capacity-gib 0.0000000001
expect_error 2 "bad --shards" replay "$WORK/tiny.jsonl" --shards 0
expect_error 2 "bad --shard-size" replay "$WORK/tiny.jsonl" --shard-size 4q
expect_error 2 "exclude each other" replay "$WORK/tiny.jsonl" --capacity-blocks 3 --capacity-gib 1
expect_error 2 "over the cache's" replay "$WORK/tiny.jsonl" --capacity-blocks 2000000000 --shards 2
expect_error 2 "unknown option '--bogus'" replay "$WORK/tiny.jsonl" --bogus
expect_error 2 "needs a value" replay "$WORK/tiny.jsonl" --capacity-blocks
expect_error 2 "no TRACE" replay
expect_error 2 "one TRACE only" replay "$WORK/tiny.jsonl" "$WORK/tiny.jsonl"

run replay --help
if [ "$rc" -ne 0 ] || ! grep -q '^usage: kvshare replay TRACE' <<<"$out" || [ -n "$err" ]; then
	fail "--help: exit $rc, stdout '$out', stderr '$err'"
else
	echo "ok: --help"
fi

# --- kvshare trace gen: the README's replay example, from a fresh clone --------
# A seed gives one trace byte for byte; another seed another; the trace parses
# and replays (its prefixes are shared, so LRU and CLOCK hit), no segment left.
"$BIN" trace gen --requests 400 --seed 7 --out "$WORK/gen1.jsonl" || fail "trace gen --out: exit $?"
"$BIN" trace gen --requests 400 --seed 7 >"$WORK/gen2.jsonl" || fail "trace gen to stdout: exit $?"
"$BIN" trace gen --requests 400 --seed 8 >"$WORK/gen3.jsonl" || fail "trace gen --seed 8: exit $?"
if ! cmp -s "$WORK/gen1.jsonl" "$WORK/gen2.jsonl"; then
	fail "trace gen: the same seed gave two traces"
elif cmp -s "$WORK/gen1.jsonl" "$WORK/gen3.jsonl"; then
	fail "trace gen: seeds 7 and 8 gave the same trace"
elif [ "$(wc -l <"$WORK/gen1.jsonl")" -ne 400 ]; then
	fail "trace gen --requests 400: $(wc -l <"$WORK/gen1.jsonl") lines"
else
	echo "ok: trace gen: deterministic by seed, 400 requests"
fi
run replay "$WORK/gen1.jsonl" --capacity-blocks 2000
if [ "$rc" -ne 0 ]; then
	fail "replay of a generated trace: exit $rc: $err"
elif ! grep -qE '^replay trace=gen1.jsonl policy=lru capacity_blocks=2000 accesses=[0-9]+ hits=[1-9][0-9]* ' <<<"$out"; then
	fail "replay of a generated trace: no LRU hits: $out"
else
	echo "ok: replay of a generated trace: $(grep 'policy=clock' <<<"$out")"
fi
run trace gen --requests 0
[ "$rc" -eq 2 ] && grep -q "requests '0'" <<<"$err" || fail "trace gen --requests 0: exit $rc: $err"
run trace bogus
[ "$rc" -eq 2 ] || fail "trace bogus: exit $rc"

if [ $fails -ne 0 ]; then
	echo "$fails failure(s)"
	exit 1
fi
echo "all passed"
