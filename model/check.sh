#!/usr/bin/env bash
# model/check.sh — make model-check: Spin on the protocols modelled in model/:
# dump.pml (the dump protocol of docs/store.md, "Dumps") and pin.pml (a READY
# hit pinned without the bucket lock: core/pin.c, "Lock-free pins").  Each configuration of a model's opening comment is
# searched exhaustively (safety: assertions, invalid end states) and must find
# no error; then each mutant (one step of the protocol taken out or changed)
# must be refuted: a counterexample found, else the model checks nothing that
# mutant breaks.  Prints one line per run:
#   model_check model=<m> config=<flags> states=<n> errors=<n> seconds=<s> result=<pass|FAIL>
#   model_check model=<m> mutant=<name> config=<flags> errors=<n> result=<caught|MISSED>
# Exit 0 when every configuration passes and every mutant is caught; 1
# otherwise; 77 (with the reason) when spin or a C compiler is missing.
set -uo pipefail
cd "$(dirname "$0")"
for t in spin cc; do
	if ! command -v "$t" >/dev/null; then
		echo "SKIP: model_check: $t not installed (apt-get install spin gcc)"
		exit 77
	fi
done
work=$(mktemp -d "${TMPDIR:-/tmp}/kvs-model.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp dump.pml pin.pml "$work/"
cd "$work" || exit 1
bad=0

# run <model> <flags...>: pan's output in $work/out; its error count on stdout
run() {
	local model=$1
	shift
	# shellcheck disable=SC2068 # the flags are words
	spin -a $@ "$model" >spin.log 2>&1 || { cat spin.log; return 1; }
	cc -O2 -w -DSAFETY -DCOLLAPSE -DMEMLIM=4096 -o pan pan.c >cc.log 2>&1 || { cat cc.log; return 1; }
	./pan -m400000 >out 2>&1
	if grep -q 'Search not completed' out && ! grep -q 'errors: [1-9]' out; then
		echo "model_check: search not completed (memory): $(grep -E 'states, stored' out)" >&2
		return 1
	fi
	sed -n 's/.*errors: \([0-9]*\).*/\1/p' out
}

# configs <model> <flags>...: each must pass
configs() {
	local model=$1 cfg
	shift
	for cfg in "$@"; do
		t0=$(date +%s.%N)
		# shellcheck disable=SC2086 # the flags are words
		errors=$(run "$model" $cfg) || errors=x
		secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
		states=$(awk '/states, stored/ { print $1 }' out)
		if [ "$errors" = 0 ]; then
			r=pass
		else
			r=FAIL
			bad=1
			grep -E 'assertion violated|invalid end state|errors:' out | head -5
			# shellcheck disable=SC2086
			spin -t -p $cfg "$model" 2>&1 | tail -40
		fi
		echo "model_check model=$model config=\"$cfg\" states=${states:-?} errors=$errors seconds=$secs result=$r"
	done
}

# mutants <model> <name:flags>...: each must be refuted
mutants() {
	local model=$1 m name cfg
	shift
	for m in "$@"; do
		name=${m%%:*} cfg=${m#*:}
		# shellcheck disable=SC2086
		errors=$(run "$model" -D"$name" $cfg) || errors=x
		if [ "$errors" != x ] && [ "$errors" -gt 0 ]; then
			r=caught
		else
			r=MISSED
			bad=1
		fi
		echo "model_check model=$model mutant=$name config=\"$cfg\" errors=$errors result=$r"
	done
}

full="-DLATE -DWATCHING -DKILLS=2"
peers="-DKILLS=0"
configs dump.pml "$full" "$peers"
mutants dump.pml "MUTANT_ACK_IN_DROP:$peers" "MUTANT_DROP_UNCHECKED:$peers" \
	"MUTANT_NO_VERIFY:$full" "MUTANT_REMOVE_DIRTY:$full"

killed="-DKILLS=1"
side="-DNPIN=2 -DKILLS=0"
configs pin.pml "$killed" "$side"
mutants pin.pml "MUTANT_BIT_FIRST:$killed" "MUTANT_ENTRY_CLEARED_FIRST:$killed" \
	"MUTANT_NO_RECHECK:$killed" "MUTANT_IGNORE_EV:$killed" "MUTANT_EVICT_BLIND:$killed"
exit $bad
