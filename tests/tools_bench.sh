#!/usr/bin/env bash
# tests/tools_bench.sh KVSHARE RUNS — `kvshare bench` driven end to end, as a user
# runs it, with tiny sizes:
#   - the three-way run (kernel shared, plain shared by re-execution, private),
#     each configuration --repeat times: exit 0, and in --json for EVERY run:
#     its bytes verified, each shared run read every unique shard exactly once
#     from the backend (backend_reads == unique_shards), the private run once
#     per rank, no backend writes during loads; the library each configuration
#     loaded (kernel / plain), as many runs as --repeat, medians within the
#     runs' range; --check agrees;
#   - the backing rule: the kernel library's shared and private caches on the
#     same memory (hugetlbfs or /dev/shm), also with a capacity whose one cache
#     fits the hugepage pool but a cache per rank does not (skipped, saying so,
#     without a pool);
#   - the table mode with the latency backend and the scan workload: medians
#     and min-max rows;
#   - Mooncake traces: a tiny one and one from `kvshare trace gen`, taken whole
#     without --blocks (the caches sized from them, said in one line), capped
#     by --blocks; one too large for the machine refused naming --blocks;
#   - --backend redis against a redis-server of its own on a unix socket (--check;
#     skipped, saying so, without redis-server), and an endpoint nobody serves:
#     one line naming it; --redis-cluster against a 3-master cluster of its own
#     on loopback (perf/redis_cluster.sh; skipped without redis-cli): --check,
#     the JSON says cluster, every master holds keys of the run;
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
REDIS_PID=
RCL_PIDS= # the cluster's (perf/redis_cluster.sh)
cleanup() {
	[ -n "$REDIS_PID" ] && kill "$REDIS_PID" 2>/dev/null && wait "$REDIS_PID" 2>/dev/null
	[ -n "$RCL_PIDS" ] && kill $RCL_PIDS 2>/dev/null && wait $RCL_PIDS 2>/dev/null
	rm -rf "$WORK"
}
trap cleanup EXIT
fails=0
TINY=(--ranks 3 --blocks 8 --shards 2 --shard-size 16k --repeat 2)

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
repeat = doc["config"]["repeat"]
want(doc["ok"] is True, "ok is not true")
want(doc.get("check", {}).get("ok") is True, "check.ok is not true: %s" % doc.get("check"))
want(doc["config"]["ranks"] == ranks, "config.ranks %s" % doc["config"]["ranks"])
confs = {c["name"]: c for c in doc["configurations"]}
expect = {"kernel shared": "kernel" in runs_built and "kernel" == doc["cli_variant"],
          "plain shared": "plain" in runs_built, "private": True}
for name, should_run in expect.items():
    c = confs.get(name)
    want(c is not None, "no configuration named %r" % name)
    if c is None:
        continue
    want(c["ran"] == should_run, "%s: ran=%s, want %s (%s)" % (name, c["ran"], should_run, c.get("skipped")))
    if not c["ran"]:
        continue
    lib = "plain" if name == "plain shared" else doc["cli_variant"]
    want(c["library"] == lib, "%s: library %s, want %s" % (name, c["library"], lib))
    want(c["ok"] is True, "%s: not ok: %s" % (name, c.get("error")))
    want(len(c["runs"]) == repeat, "%s: %d runs, want --repeat %d" % (name, len(c["runs"]), repeat))
    for k, st in c["summary"].items():
        want(st["min"] <= st["median"] <= st["max"], "%s: %s median outside its range: %s" % (name, k, st))
    for n, r in enumerate(c["runs"], 1):
        what = "%s run %d" % (name, n)
        want(r["ok"] is True, "%s: not ok" % what)
        want(r["bad_shards"] == 0, "%s: %d bad shards" % (what, r["bad_shards"]))
        want(r["verified_shards"] == ranks * w["shard_loads_per_rank"],
             "%s: verified %d shards, want %d" % (what, r["verified_shards"], ranks * w["shard_loads_per_rank"]))
        want(r["delivered_bytes"] == ranks * w["shard_loads_per_rank"] * doc["config"]["shard_bytes"],
             "%s: delivered %d bytes" % (what, r["delivered_bytes"]))
        want(r["backend_writes"] == 0, "%s: %d backend writes during loads" % (what, r["backend_writes"]))
        per = 1 if c["share_buffer"] else ranks
        want(r["backend_reads"] == per * w["unique_shards"],
             "%s: %d backend reads, want %d (unique shards %d x %d)" % (what, r["backend_reads"], per * w["unique_shards"], w["unique_shards"], per))
        want(r["backend_read_bytes"] == per * w["unique_bytes"],
             "%s: %d backend bytes, want %d" % (what, r["backend_read_bytes"], per * w["unique_bytes"]))
        # every shard load is one get: a hit, a join (a read in flight) or a miss,
        # and every miss is one backend read
        want(r["hits"] + r["joins"] + r["misses"] == r["gets"] == r["verified_shards"],
             "%s: hits %d + joins %d + misses %d != gets %d / verified %d" % (
                 what, r["hits"], r["joins"], r["misses"], r["gets"], r["verified_shards"]))
        want(r["misses"] == r["backend_reads"],
             "%s: %d misses, %d backend reads" % (what, r["misses"], r["backend_reads"]))
        want(r["wall_s"] > 0 and r["task_latency_ms"]["p99"] >= r["task_latency_ms"]["p50"],
             "%s: wall/latency numbers" % what)
        want(r["backing"] in ("hugetlb", "shm"), "%s: backing %s" % (what, r["backing"]))
# the backing rule: the kernel library's shared and private caches on the same
# memory in every run; private asks for it explicitly
lib_runs = [(c["name"], r) for c in doc["configurations"] if c["ran"] and c["name"] != "plain shared"
            for r in c["runs"]]
backings = set(r["backing"] for _, r in lib_runs)
want(len(backings) <= 1, "backing rule: the kernel library's runs on %s: %s" % (
    backings, [(n, r["hugetlb"], r["backing"]) for n, r in lib_runs]))
for n, r in lib_runs:
    if n == "private":
        want(r["hugetlb"] == ("required" if r["backing"] == "hugetlb" else "off"),
             "private: hugetlb=%s for backing %s" % (r["hugetlb"], r["backing"]))
want(doc["backing"].startswith("backing: "), "no backing line: %s" % doc["backing"])
shared = [c for c in doc["configurations"] if c["ran"] and c["share_buffer"]]
for k, v in doc["ratios"].items():
    want(abs(v["backend_bytes_vs_private"] - 1.0 / ranks) < 1e-5, "ratio %s: %s" % (k, v))
    sp = v["speedup_vs_private"]
    want(len(v["speedup_per_run"]) == repeat and sp["min"] <= sp["median"] <= sp["max"],
         "ratio %s: speedups %s" % (k, v))
want(len(doc["ratios"]) == len(shared), "ratios %s for %d shared configurations" % (list(doc["ratios"]), len(shared)))
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
usage_error --repeat 0
usage_error --repeat 21
usage_error --backend redis
usage_error --redis-endpoint /tmp/redis.sock
usage_error --backend latency --drop-cache
# a trace whose caches cannot fit: 900 distinct blocks of 1 GiB (about 3.3 TiB
# with 2 private caches: more than this machine has; --blocks is the fix), and
# of 2 x 1 GiB (over the 1 TiB cap)
printf '{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [%s]}\n' \
	"$(seq -s, 1 900)" >"$WORK/big.jsonl"
for shards in 1 2; do
	usage_error --trace "$WORK/big.jsonl" --ranks 2 --shards $shards --shard-size 1g
	grep -q -- "pass --blocks N" <<<"$err" || fail "trace too large ($shards GiB blocks): no --blocks in: $err"
done

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
# trace_shape FILE BLOCKS REQUESTS LOADS SIZED: the workload of a trace run's JSON
# (SIZED: 1 when the caches were sized from the trace)
trace_shape() {
	command -v python3 >/dev/null || return 0
	python3 -c 'import json,sys; w=json.load(open(sys.argv[1]))["workload"]; got=(w["unique_blocks"], w["requests"], w["block_loads_per_rank"], int(w.get("sized_from_trace") is not None)); want=tuple(int(a) for a in sys.argv[2:]); got == want or print("got %s, want %s" % (got, want)); sys.exit(got != want)' \
		"$@" || fail "trace workload of $1 (blocks, requests, loads, sized)"
}
# without --blocks: the whole trace, the caches sized from it
run --trace "$WORK/trace.jsonl" --ranks 2 --shards 2 --shard-size 4k --repeat 1 --check --json
if [ "$rc" != 0 ]; then
	fail "trace: exit $rc: $err"
else
	printf '%s\n' "$out" >"$WORK/trace.json"
	check_json "$WORK/trace.json" 2 "trace"
	trace_shape "$WORK/trace.json" 5 3 7 1
fi
# --blocks caps it: requests are taken while their distinct blocks fit
run --trace "$WORK/trace.jsonl" --blocks 3 --ranks 2 --shards 2 --shard-size 4k --repeat 1 --check --json
if [ "$rc" != 0 ]; then
	fail "trace --blocks 3: exit $rc: $err"
else
	printf '%s\n' "$out" >"$WORK/trace3.json"
	check_json "$WORK/trace3.json" 2 "trace --blocks 3"
	trace_shape "$WORK/trace3.json" 3 2 5 0
fi
# a generated trace, whole, in table mode: one line says how the caches were sized
if "$BIN" trace gen --requests 40 --seed 3 --out "$WORK/gen.jsonl" >/dev/null 2>"$WORK/gen.err"; then
	nreq=$(grep -c . "$WORK/gen.jsonl")
	run --trace "$WORK/gen.jsonl" --ranks 2 --shards 1 --shard-size 4k --repeat 1 --backend latency --latency-us 100
	[ "$rc" = 0 ] || fail "generated trace: exit $rc: $err"
	grep -q "^trace: $nreq requests, [0-9]* distinct blocks: caches sized from the trace" <<<"$out" ||
		fail "generated trace: no 'trace: $nreq requests, N distinct blocks: caches sized' line: $out"
	grep -q "(all $nreq requests)" <<<"$out" || fail "generated trace: not all $nreq requests taken: $out"
else
	fail "kvshare trace gen: $(cat "$WORK/gen.err")"
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

# ---- the backing rule with a hugepage pool that holds one cache, not one per rank ----
hp_free=$(awk '/^HugePages_Free:/ {print $2}' /proc/meminfo 2>/dev/null)
hp_kib=$(awk '/^Hugepagesize:/ {print $2}' /proc/meminfo 2>/dev/null)
if [[ $RUNS != *kernel* ]]; then
	echo "SKIP: backing rule with a small pool: no kernel library (the plain one has no hugetlbfs)"
elif ! grep -qs " hugetlbfs " /proc/mounts || [ -z "$hp_free" ] || [ "$hp_free" -lt 16 ]; then
	echo "SKIP: backing rule with a small pool: no hugetlbfs mount or fewer than 16 free huge pages"
else
	# 60% of the free pool per cache: one fits, two do not (another process may
	# take pages meanwhile: the rule must hold whichever backing results)
	cap=$((hp_free * hp_kib * 6 / 10))k
	run --ranks 2 --blocks 8 --shards 2 --shard-size 16k --capacity "$cap" --repeat 1 --check --json
	if [ "$rc" != 0 ]; then
		fail "small pool (--capacity $cap): exit $rc: $err"
	else
		printf '%s\n' "$out" >"$WORK/pool.json"
		check_json "$WORK/pool.json" 2 "small pool (--capacity $cap)"
		command -v python3 >/dev/null && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); b=d["backing"]; p=[c for c in d["configurations"] if c["name"] == "private"][0]["runs"][0]["backing"]; ok = (p == "shm" and "every run on shm" in b) or (p == "hugetlb" and "on hugetlb" in b); ok or print("private on %s, backing line: %s" % (p, b)); sys.exit(0 if ok else 1)' \
			"$WORK/pool.json" || fail "small pool: the backing line does not say what the runs got"
	fi
fi

# ---- --backend redis: a redis-server of our own on a unix socket ----
if ! command -v redis-server >/dev/null; then
	echo "SKIP: --backend redis: redis-server is not installed (Debian: apt-get install redis-server)"
else
	mkdir -p "$WORK/redis"
	sock="$WORK/redis/redis.sock"
	redis-server --port 0 --unixsocket "$sock" --unixsocketperm 700 --dir "$WORK/redis" \
		--save '' --appendonly no --daemonize no --logfile "$WORK/redis/log" &
	REDIS_PID=$!
	for _ in $(seq 1000); do # until it listens (bounded: 10 s)
		[ -S "$sock" ] && break
		kill -0 "$REDIS_PID" 2>/dev/null || break
		sleep 0.01
	done
	if [ ! -S "$sock" ]; then
		fail "redis-server did not listen on $sock: $(tail -3 "$WORK/redis/log" 2>/dev/null)"
	else
		run --backend redis --redis-endpoint "$sock" "${TINY[@]}" --check --json
		if [ "$rc" != 0 ]; then
			fail "redis --check --json: exit $rc: $err"
		else
			printf '%s\n' "$out" >"$WORK/redis.json"
			check_json "$WORK/redis.json" 3 "redis --check --json"
		fi
	fi
	# nobody serves this one: one line naming it, exit 1
	run --backend redis --redis-endpoint "$WORK/redis/none.sock" "${TINY[@]}"
	[ "$rc" = 1 ] || fail "unreachable redis: exit $rc, want 1 (stderr: $err)"
	[ "$(printf '%s\n' "$err" | wc -l)" = 1 ] && grep -q "none.sock" <<<"$err" ||
		fail "unreachable redis: want one line naming the endpoint, got: $err"
fi

# ---- --backend redis --redis-cluster: a 3-master cluster of our own on loopback ----
usage_error --redis-cluster
if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
	echo "SKIP: --redis-cluster: redis-server or redis-cli is not installed (Debian: apt-get install redis-server)"
else
	. "$(dirname "$0")/../perf/redis_cluster.sh"
	mkdir -p "$WORK/cluster"
	if ! rcl_up "$WORK/cluster" 3; then
		fail "--redis-cluster: the cluster did not come up (above)"
	else
		run --backend redis --redis-cluster --redis-endpoint "${RCL_SEEDS%%;*}" "${TINY[@]}" \
			--check --json
		if [ "$rc" != 0 ]; then
			fail "redis cluster --check --json: exit $rc: $err"
		else
			printf '%s\n' "$out" >"$WORK/cluster.json"
			check_json "$WORK/cluster.json" 3 "redis cluster --check --json"
			python3 -c 'import json, sys; sys.exit(not json.load(open(sys.argv[1]))["config"]["redis"]["cluster"])' \
				"$WORK/cluster.json" 2>/dev/null || ! command -v python3 >/dev/null ||
				fail "redis cluster --json: config.redis.cluster is not true"
			keys=0
			for p in ${RCL_SEEDS//;/ }; do
				n=$(redis-cli -p "${p##*:}" dbsize)
				[ "$n" -gt 0 ] || fail "redis cluster: master $p holds no key of the run"
				keys=$((keys + n))
			done
			[ "$keys" -gt 0 ] || fail "redis cluster: no keys stored"
		fi
	fi
fi

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
