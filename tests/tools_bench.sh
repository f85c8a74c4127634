#!/usr/bin/env bash
# tests/tools_bench.sh KVSHARE RUNS — `kvshare bench` driven end to end, as a user
# runs it, with tiny sizes:
#   - the three-way run (kernel shared, plain shared by re-execution, private):
#     exit 0, every run's bytes verified, and in --json: each shared run read
#     every unique shard exactly once from the backend (backend_reads ==
#     unique_shards), the private run once per rank, the library each run
#     loaded (kernel / plain), no backend writes during loads; --check agrees;
#   - the table mode with the latency backend and the scan workload;
#   - a tiny generated Mooncake trace (its distinct blocks are the unique set);
#   - bad input: unknown flags, bad numbers, a capacity too small, a malformed
#     trace line (named by its number): a one-line message and exit 2 (1 for a
#     trace that cannot be used); --help exits 0;
#   - nothing left behind: no kvsbench segment of the run's pid in /dev/shm or
#     /dev/hugepages, the temporary store removed (kept with --keep).
# RUNS: the runs the build has: "kernel,plain" (both variants), "plain" (a CLI
# built for the plain variant only) or "kernel" (no plain library).
# Exit 0 pass, 1 fail.
set -uo pipefail

BIN=${1:?usage: tools_bench.sh KVSHARE RUNS}
RUNS=${2:?usage: tools_bench.sh KVSHARE RUNS}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kvs-bench-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
fails=0
TINY=(--ranks 3 --blocks 8 --shards 2 --shard-size 16k)

fail() {
	echo "FAIL: $*"
	fails=$((fails + 1))
}

# run ARGS...: the CLI in the background (to learn its pid); sets rc, out, err;
# checks that no segment named after that pid is left.
run() {
	"$BIN" bench "$@" >"$WORK/out" 2>"$WORK/err" &
	local pid=$! left
	wait $pid
	rc=$?
	out=$(cat "$WORK/out")
	err=$(cat "$WORK/err")
	left=$(ls /dev/shm /dev/hugepages 2>/dev/null | grep -F "kvshare.kvsbench.$pid." || true)
	if [ -n "$left" ]; then
		fail "bench $* left segments: $left"
		rm -f /dev/shm/kvshare.kvsbench.$pid.* /dev/hugepages/kvshare.kvsbench.$pid.* 2>/dev/null
	fi
}

# usage_error ARGS...: exit 2, one line on stderr naming the problem, no stdout.
usage_error() {
	run "$@"
	[ "$rc" = 2 ] || fail "bench $*: exit $rc, want 2 (stderr: $err)"
	[ -z "$out" ] || fail "bench $*: printed on stdout: $out"
	[ "$(printf '%s\n' "$err" | wc -l)" = 1 ] && [[ $err == "kvshare bench: "* ]] ||
		fail "bench $*: want one 'kvshare bench: ...' line on stderr, got: $err"
}

# check_json FILE RANKS: the --json document of a successful run.
check_json() {
	if ! command -v python3 >/dev/null; then
		echo "note: no python3: JSON assertions skipped (--check still enforced)"
		return 0
	fi
	python3 - "$1" "$2" "$RUNS" <<'EOF' || fail "JSON assertions (above) for: $3"
import json, os, sys
doc = json.load(open(sys.argv[1]))
ranks, runs_built = int(sys.argv[2]), sys.argv[3].split(",")
bad = []
def want(cond, what):
    if not cond:
        bad.append(what)
w = doc["workload"]
want(doc["ok"] is True, "ok is not true")
want(doc.get("check", {}).get("ok") is True, "check.ok is not true: %s" % doc.get("check"))
want(doc["config"]["ranks"] == ranks, "config.ranks %s" % doc["config"]["ranks"])
runs = {r["name"]: r for r in doc["runs"]}
expect = {"kernel shared": "kernel" in runs_built and "kernel" == doc["cli_variant"],
          "plain shared": "plain" in runs_built, "private": True}
for name, should_run in expect.items():
    r = runs.get(name)
    want(r is not None, "no run named %r" % name)
    if r is None:
        continue
    want(r["ran"] == should_run, "%s: ran=%s, want %s (%s)" % (name, r["ran"], should_run, r.get("skipped")))
    if not r["ran"]:
        continue
    lib = "plain" if name == "plain shared" else doc["cli_variant"]
    want(r["library"] == lib, "%s: library %s, want %s" % (name, r["library"], lib))
    want(r["ok"] is True, "%s: not ok: %s" % (name, r.get("error")))
    want(r["bad_shards"] == 0, "%s: %d bad shards" % (name, r["bad_shards"]))
    want(r["verified_shards"] == ranks * w["shard_loads_per_rank"],
         "%s: verified %d shards, want %d" % (name, r["verified_shards"], ranks * w["shard_loads_per_rank"]))
    want(r["delivered_bytes"] == ranks * w["shard_loads_per_rank"] * doc["config"]["shard_bytes"],
         "%s: delivered %d bytes" % (name, r["delivered_bytes"]))
    want(r["backend_writes"] == 0, "%s: %d backend writes during loads" % (name, r["backend_writes"]))
    per = 1 if r["share_buffer"] else ranks
    want(r["backend_reads"] == per * w["unique_shards"],
         "%s: %d backend reads, want %d (unique shards %d x %d)" % (name, r["backend_reads"], per * w["unique_shards"], w["unique_shards"], per))
    want(r["backend_read_bytes"] == per * w["unique_bytes"],
         "%s: %d backend bytes, want %d" % (name, r["backend_read_bytes"], per * w["unique_bytes"]))
    want(r["hits"] + r["misses"] <= r["gets"], "%s: hits + misses > gets" % name)
    want(r["wall_s"] > 0 and r["task_latency_ms"]["p99"] >= r["task_latency_ms"]["p50"],
         "%s: wall/latency numbers" % name)
shared = [r for r in doc["runs"] if r["ran"] and r["share_buffer"]]
for k, v in doc["ratios"].items():
    want(abs(v["backend_bytes_vs_private"] - 1.0 / ranks) < 1e-5, "ratio %s: %s" % (k, v))
want(len(doc["ratios"]) == len(shared), "ratios %s for %d shared runs" % (list(doc["ratios"]), len(shared)))
root = doc["config"].get("root")
want(root is None or not os.path.exists(root), "the store %s was not removed" % root)
for b in bad:
    print("  " + b)
sys.exit(1 if bad else 0)
EOF
}

# ---- --help, bad input ----
run --help
[ "$rc" = 0 ] || fail "--help: exit $rc"
grep -q "^usage: kvshare bench" <<<"$out" || fail "--help: no usage line"
grep -q -- "--latency-us" <<<"$out" || fail "--help does not describe --latency-us"

usage_error --bogus
usage_error -x
usage_error --ranks 0
usage_error --ranks 65
usage_error --ranks 3x
usage_error --blocks ""
usage_error --shard-size 10q
usage_error --shard-size 512
usage_error --qd -1
usage_error --latency-us 99999999
usage_error --backend nfs
usage_error --workload zipf
usage_error --copy-engine tpu
usage_error --root "$WORK/nonexistent"
usage_error "${TINY[@]}" --capacity 1k
usage_error --qd
usage_error stray-argument

# ---- the three-way run, --json --check ----
run "${TINY[@]}" --check --json
if [ "$rc" != 0 ]; then
	fail "tiny --check --json: exit $rc: $err"
else
	printf '%s\n' "$out" >"$WORK/tiny.json"
	check_json "$WORK/tiny.json" 3 "tiny --check --json"
fi

# ---- a few more requests (prefix sharing, 4 ranks) ----
run --ranks 4 --blocks 40 --shards 3 --shard-size 8k --qd 1 --latency-us 500 --seed 7 --check --json
if [ "$rc" != 0 ]; then
	fail "4 ranks --check --json: exit $rc: $err"
else
	printf '%s\n' "$out" >"$WORK/four.json"
	check_json "$WORK/four.json" 4 "4 ranks --check --json"
fi

# ---- table mode: latency backend, scan workload, 2 ranks ----
run --ranks 2 --blocks 6 --shards 3 --shard-size 8k --backend latency --latency-us 500 --workload scan
[ "$rc" = 0 ] || fail "table mode: exit $rc: $err"
for row in "private "; do
	grep -q "^$row" <<<"$out" || fail "table mode: no '$row' row in: $out"
done
[[ $RUNS == *plain* ]] && { grep -q "^plain shared  *plain " <<<"$out" || fail "table mode: no plain shared row loading the plain library: $out"; }
grep -q "^verified: " <<<"$out" || fail "table mode: no 'verified:' line: $out"
grep -q "FAILED" <<<"$out" && fail "table mode: a run failed: $out"

# ---- a tiny Mooncake trace: 3 requests, 5 distinct blocks ----
cat >"$WORK/trace.jsonl" <<'EOF'
{"timestamp": 0, "input_length": 1024, "output_length": 8, "hash_ids": [11, 12]}
{"timestamp": 5, "input_length": 1536, "output_length": 8, "hash_ids": [11, 12, 13]}
{"timestamp": 9, "input_length": 1024, "output_length": 8, "hash_ids": [21, 22]}
EOF
run --trace "$WORK/trace.jsonl" --ranks 2 --shards 2 --shard-size 4k --check --json
if [ "$rc" != 0 ]; then
	fail "trace: exit $rc: $err"
else
	printf '%s\n' "$out" >"$WORK/trace.json"
	check_json "$WORK/trace.json" 2 "trace"
	if command -v python3 >/dev/null; then
		python3 -c 'import json,sys; w=json.load(open(sys.argv[1]))["workload"]; sys.exit(0 if (w["unique_blocks"], w["requests"], w["block_loads_per_rank"]) == (5, 3, 7) else 1)' \
			"$WORK/trace.json" || fail "trace: want 5 distinct blocks, 3 requests, 7 block loads per rank"
	fi
fi

# a malformed line: one line naming the file and line 2, non-zero exit
printf '%s\n' '{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]}' \
	'{"timestamp": 1, "hash_ids": [oops' >"$WORK/bad.jsonl"
run --trace "$WORK/bad.jsonl" "${TINY[@]}"
[ "$rc" != 0 ] || fail "malformed trace: exit 0"
[ -z "$out" ] || fail "malformed trace: printed on stdout: $out"
[ "$(printf '%s\n' "$err" | wc -l)" = 1 ] && grep -q "bad.jsonl:2" <<<"$err" ||
	fail "malformed trace: want one line naming bad.jsonl:2, got: $err"
run --trace "$WORK/missing.jsonl" "${TINY[@]}"
[ "$rc" != 0 ] && grep -q "missing.jsonl" <<<"$err" || fail "missing trace: exit $rc: $err"

# ---- --root and --keep ----
mkdir -p "$WORK/root"
run --ranks 2 --blocks 4 --shards 2 --shard-size 8k --root "$WORK/root" --keep
[ "$rc" = 0 ] || fail "--root --keep: exit $rc: $err"
kept=$(ls -d "$WORK"/root/kvshare-bench.* 2>/dev/null | head -1)
[ -n "$kept" ] && [ -n "$(find "$kept" -type f | head -1)" ] || fail "--keep: no store kept under $WORK/root"
grep -q "kept in $kept" <<<"$err" || fail "--keep: the kept store is not named on stderr: $err"
rm -rf "$WORK/root"/kvshare-bench.*
run --ranks 2 --blocks 4 --shards 2 --shard-size 8k --root "$WORK/root"
[ "$rc" = 0 ] || fail "--root: exit $rc: $err"
[ -z "$(ls "$WORK/root")" ] || fail "--root without --keep left: $(ls "$WORK/root")"

if [ "$fails" != 0 ]; then
	echo "tools_bench: $fails failure(s)"
	exit 1
fi
echo "tools_bench: all passed"
exit 0
