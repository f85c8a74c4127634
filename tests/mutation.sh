#!/usr/bin/env bash
# tests/mutation.sh SRC_DIR — prove the core, wait, store-dump and Redis Cluster
# suites can fail.
#
# Copies SRC_DIR's tree (tracked and untracked-but-not-ignored files, as they are
# in the working tree) to a scratch dir, configures the kernel variant and builds
# the suites' test binaries once, then for each mutant below: applies it (one
# exact substitution; the script fails if the text is not found exactly once, so
# a refactor cannot silently neuter a mutant), rebuilds them incrementally, runs
# the tests (or the cases) that should catch it and requires that run to go red,
# then restores the file.  One line per mutant:
#   mutant <name>: caught by <failing tests>      or      mutant <name>: SURVIVED
# Exit 0 when every mutant was caught, 1 when any survived, 2 on a setup error.
set -euo pipefail

SRC=${1:?usage: mutation.sh SRC_DIR}
SRC=$(cd "$SRC" && pwd)
JOBS=${MUTATION_JOBS:-2}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kvs-mutation.XXXXXX")
KEEP=${MUTATION_KEEP:-0}
TIMEOUT=${MUTATION_TEST_TIMEOUT:-60} # per test (the core ones take ~1 s, store_dump ~10 s): a mutant that hangs one is caught by it
BUILD=$WORK/build
cleanup() { declare -F reap_strays >/dev/null && reap_strays; [ "$KEEP" = 1 ] || rm -rf "$WORK"; }
trap cleanup EXIT

die() { echo "mutation: $*" >&2; exit 2; }

# --- copy the tree ----------------------------------------------------------
TREE=$WORK/src
mkdir -p "$TREE"
if git -C "$SRC" rev-parse --git-dir >/dev/null 2>&1; then
	git -C "$SRC" ls-files -z --cached --others --exclude-standard |
		while IFS= read -r -d '' f; do
			[ -f "$SRC/$f" ] && printf '%s\0' "$f"
		done | tar -C "$SRC" --null -T - -cf - | tar -C "$TREE" -xf -
else
	tar -C "$SRC" --exclude='./build*' --exclude=./.git -cf - . | tar -C "$TREE" -xf -
fi

# The suites mutants are judged by: only their binaries are built (and relinked
# after each mutant), not the whole tree.
SUITES="core_attach core_slot core_race core_record store_dump io_redis_cluster"
SUITE="^kernel\.($(echo $SUITES | tr ' ' '|'))\$"
TARGETS=$(for t in $SUITES; do printf 'test_%s_kernel ' "$t"; done)

LOG=$WORK/log
echo "mutation: configuring and building in $BUILD"
cmake -S "$TREE" -B "$BUILD" -DKVS_VARIANT=kernel -DKVS_CUDA=OFF -DKVS_WERROR=OFF >"$LOG" 2>&1 ||
	{ tail -30 "$LOG"; die "configure failed"; }
# shellcheck disable=SC2086 # a list of targets
cmake --build "$BUILD" -j "$JOBS" --target $TARGETS >"$LOG" 2>&1 || { tail -30 "$LOG"; die "build failed"; }

# Processes a mutant left behind (a hung test's children outlive ctest's
# timeout): every process whose executable lies in this run's build dir, by pid.
reap_strays() {
	local p exe
	for p in /proc/[0-9]*; do
		exe=$(readlink "$p/exe" 2>/dev/null) || continue
		case $exe in "$BUILD"/*) kill -9 "${p#/proc/}" 2>/dev/null || true ;; esac
	done
}

# Segments a mutant leaves behind (no-unlink-at-close does by design; a killed
# test's too): the test caches' files ("kvshare.t.kernel.<tag>.<pid>.*", in
# /dev/shm and the hugetlbfs mounts) whose creating test process is gone.
remove_leftovers() {
	local f base pid
	for f in /dev/shm/kvshare.t.kernel.* $(awk '$3 == "hugetlbfs" { print $2 "/kvshare.t.kernel.*" }' /proc/mounts); do
		[ -e "$f" ] || continue
		base=${f##*/}
		pid=$(printf '%s\n' "$base" | sed -n 's/^kvshare\.t\.kernel\.[^.]*\.\([0-9][0-9]*\)\..*/\1/p')
		if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
			rm -f -- "$f"
		fi
	done
}

# run_tests WHAT -> prints the names of failing tests ("" when all passed);
# returns 0 when green, 1 when red.  WHAT is a ctest regex, or "binary:case
# case ..." for cases of one test binary: a suite whose other cases a mutant
# hangs would cost their timeouts (store_dump's writes_spread waits 120 s).
run_tests() {
	local out rc=0 bin cases
	if [[ $1 == *:* ]]; then
		bin=${1%%:*}
		cases=${1#*:}
		# shellcheck disable=SC2086 # a list of cases
		out=$(cd "$BUILD/kernel/tests" && timeout "$TIMEOUT" "./$bin" $cases 2>&1) || rc=$?
		[ $rc -eq 0 ] || out="$out
  Test #0: kernel.$bin ($cases) ***Failed"
	else
		out=$(cd "$BUILD" && ctest -R "$1" -E '^kernel\.mutation$' --timeout "$TIMEOUT" -j "$JOBS" --output-on-failure 2>&1) || rc=$?
	fi
	reap_strays
	remove_leftovers
	echo "$out" >"$WORK/last-ctest.log"
	if [ $rc -ne 0 ]; then
		# "  12/20 Test  #3: kernel.core_slot ........***Failed" -> kernel.core_slot
		echo "$out" | sed -n 's/.*Test *#[0-9]*: \([^ ]*\) .*\*\*\*.*/\1/p' | sort -u | paste -sd ' ' -
		return 1
	fi
	return 0
}

# mutate FILE OLD NEW: replace the exact text OLD (must occur exactly once).
mutate() {
	python3 - "$TREE/$1" "$2" "$3" <<'EOF'
import sys
path, old, new = sys.argv[1], sys.argv[2], sys.argv[3]
text = open(path).read()
n = text.count(old)
if n != 1:
    sys.stderr.write("mutation: %s: expected text found %d times (want 1):\n%s\n" % (path, n, old))
    sys.exit(1)
out = text.replace(old, new)
if out == text:
    sys.stderr.write("mutation: %s: substitution changed nothing\n" % path)
    sys.exit(1)
open(path, "w").write(out)
EOF
}

# The baseline runs every test a mutant is judged by; each mutant then runs
# the tests that catch it fastest (a test a mutant hangs costs its timeout).
echo "mutation: baseline run of $SUITE (must be green)"
if ! failed=$(run_tests "$SUITE"); then
	tail -120 "$WORK/last-ctest.log"
	die "baseline is red ($failed); fix the tree first"
fi

survived=0
# mutant NAME FILE REGEX OLD NEW
mutant() {
	local name=$1 file=$2 regex=$3 old=$4 new=$5 failed
	cp "$TREE/$file" "$WORK/orig"
	mutate "$file" "$old" "$new" || die "mutant $name cannot be applied (did the code change? update tests/mutation.sh)"
	# shellcheck disable=SC2086 # a list of targets
	if ! cmake --build "$BUILD" -j "$JOBS" --target $TARGETS >"$LOG" 2>&1; then
		cp "$WORK/orig" "$TREE/$file"
		tail -20 "$LOG"
		die "mutant $name does not compile"
	fi
	if failed=$(run_tests "$regex"); then
		echo "mutant $name: SURVIVED (ran $regex)"
		survived=1
	else
		echo "mutant $name: caught by ${failed:-<ctest failed, see log>}"
	fi
	cp "$WORK/orig" "$TREE/$file"
	touch "$TREE/$file"
}

# a. header validation reports the wrong error code for a layout mismatch
mutant header-layout-code core/header.c '^kernel\.core_attach$' \
	'BAD(-KVS_ELAYOUT, "%s: layout_version' \
	'BAD(-KVS_ECONFIG, "%s: layout_version'

# b. a pinned LOADING slot hands out a second owner
mutant second-owner core/slot.c '^kernel\.core_slot$' \
	'owner = (ref == 0 && (!ready_like(st) ||' \
	'owner = ((!ready_like(st) ||'

# c. publish never wakes futex sleepers
mutant publish-no-wake wait/publish.c '^kernel\.core_race$' \
	'	 * exchange above would already have faulted on. */
	if (old & KVS_WAIT_WAITERS)' \
	'	 * exchange above would already have faulted on. */
	if (0 && (old & KVS_WAIT_WAITERS))'

# d. a FAILED publish loses its error code
mutant lost-error-code core/slot.c '^kernel\.core_slot$' \
	'		/* relaxed: the publish below (release) orders it for the waiters */
		atomic_store_explicit(&c->slots[i].error, err, memory_order_relaxed);' \
	'		/* relaxed: the publish below (release) orders it for the waiters */
		atomic_store_explicit(&c->slots[i].error, 0, memory_order_relaxed);'

# e. the last detacher does not unlink the segments
mutant no-unlink-at-close core/segment.c '^kernel\.core_attach$' \
	'			kvs_core_segs_unlink(c->hdr, c->cfg.unique_id, &c->log);
			ctl_name(name, sizeof(name), c->cfg.unique_id);
			shm_unlink(name);' \
	'			(void)name;'

# f. slot handles are not checked against the pin and generation
mutant no-slot-check core/slot.c '^kernel\.core_slot$' \
	'	    slot->generation)
		return -ESTALE;
	*pinv = v;' \
	'	    slot->generation)
		(void)0;
	*pinv = v;'

# g. CLOCK evicts a DIRTY slot (a dump's bytes not in the backend yet: the
#    record of what is to be written)
mutant clock-evicts-dirty core/clock.c '^kernel\.core_record$' \
	'	if (st == KVS_SHM_SLOT_DIRTY)
		goto out;' \
	'	if (0)
		goto out;'

# h. a durable dump that did not write its block completes when its shard is cached
mutant durable-at-cached store/dump.c 'store_dump:partial_block split_shards' \
	'	if (s->cfg.dump_wait == KVS_DUMP_WAIT_CACHED) {
		acked_add(s, d, sh);' \
	'	if (1) {
		acked_add(s, d, sh);'

# i..s. the redis backend on a Redis Cluster (io/redis_cluster.c and its callers;
#    each case starts a cluster of its own).  Without redis-server and redis-cli
#    its cases skip (77), which would read as caught: the mutants are left out,
#    saying so.
if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
	echo "mutation: Redis Cluster mutants left out: redis-server or redis-cli not installed"
else
# i. slots computed with another CRC: every command redirected
mutant cluster-crc io/redis_cluster.c 'io_redis_cluster:roundtrip' \
	'(uint16_t)((crc << 1) ^ 0x1021)' \
	'(uint16_t)((crc << 1) ^ 0x1022)'

# j. -MOVED followed but the map left stale
mutant moved-map-stale io/redis_cluster.c 'io_redis_cluster:ask' \
	'			r->slot_node[cmd->slot] = (uint8_t)node;' \
	'			(void)node;'

# k. -ASK followed without ASKING
mutant ask-no-asking io/redis_cluster.c 'io_redis_cluster:ask' \
	'			cmd_asking(cmd, true);
			cmd->ask_pending = true;' \
	'			(void)0;'

# l. -MOVED not followed at all
mutant moved-not-followed io/redis_reply.c 'io_redis_cluster:reshard' \
	'	if (n > 6 && memcmp(s, "MOVED ", 6) == 0)
		return REDIR_MOVED;' \
	''

# m. -TRYAGAIN not retried
mutant tryagain-not-retried io/redis_reply.c 'io_redis_cluster:ask' \
	'(n >= 8 && memcmp(s, "TRYAGAIN", 8) == 0)' \
	'(n >= 8 && memcmp(s, "TRYAGAIX", 8) == 0)'

# n. a lost socket's commands fail instead of being sent again
mutant lost-not-retried io/redis_conn.c 'io_redis_cluster:conn_lost' \
	'			c->head->redirect = REDIR_RETRY; /* another try, after a map refresh */' \
	'			(void)0;'

# o. a cluster node taken for a standalone server
mutant no-cluster-detection io/redis.c 'io_redis_cluster:detect' \
	'		if (info.result == 1) {' \
	'		if (info.result == 2) {'

# p. open gives up at the first seed that does not answer
mutant first-seed-only io/redis_cluster.c 'io_redis_cluster:seed_down' \
	'				     kvs_strerror(rc));
			continue;' \
	'				     kvs_strerror(rc));
			return rc;'

# q. a slot no master serves reported as a generic I/O error
mutant uncovered-errno io/redis_cluster.c 'io_redis_cluster:uncovered' \
	'		*err = -EHOSTUNREACH;' \
	'		*err = -EIO;'

# r. a write completes without WAIT for the replica
mutant no-wait-replicas io/redis.c 'io_redis_cluster:wait_replica' \
	'		if (r->wait_replicas) {
			char n[24], ms[24];' \
	'		if (0) {
			char n[24], ms[24];'

# s. a submit to a master that is down fails at once instead of waiting for
#    the failover within its deadline
mutant down-master-fails-at-once io/redis.c 'io_redis_cluster:failover' \
	'		cmd->redirect = REDIR_RETRY;
		cmd->last_err = err;
		if (!cluster_park(r, cmd))
			cmd_finish(r, cmd);' \
	'		return err;'
fi

if [ $survived -ne 0 ]; then
	echo "mutation: some mutants SURVIVED"
	exit 1
fi
echo "mutation: all mutants caught"
