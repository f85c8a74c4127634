#!/usr/bin/env bash
# model/check.sh — make model-check: Spin on model/dump.pml (the dump protocol
# of docs/store.md, "Dumps").  Each configuration of the model's opening comment
# is searched exhaustively (safety: assertions, invalid end states) and must
# find no error; then each mutant (one step of the protocol taken out) must be
# refuted: a counterexample found, else the model checks nothing that mutant
# breaks.  Prints one line per run:
#   model_check config=<flags> states=<n> errors=<n> seconds=<s> result=<pass|FAIL>
#   model_check mutant=<name> config=<flags> errors=<n> result=<caught|MISSED>
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
cp dump.pml "$work/"
cd "$work" || exit 1

full="-DLATE -DWATCHING -DKILLS=2"
peers="-DKILLS=0"
bad=0

# run <flags...>: pan's output in $work/out; its error count on stdout
run() {
	# shellcheck disable=SC2068 # the flags are words
	spin -a $@ dump.pml >spin.log 2>&1 || { cat spin.log; return 1; }
	cc -O2 -w -DSAFETY -DCOLLAPSE -DMEMLIM=4096 -o pan pan.c >cc.log 2>&1 || { cat cc.log; return 1; }
	./pan -m400000 >out 2>&1
	if grep -q 'Search not completed' out && ! grep -q 'errors: [1-9]' out; then
		echo "model_check: search not completed (memory): $(grep -E 'states, stored' out)" >&2
		return 1
	fi
	sed -n 's/.*errors: \([0-9]*\).*/\1/p' out
}

for cfg in "$full" "$peers"; do
	t0=$(date +%s.%N)
	errors=$(run $cfg) || errors=x
	secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
	states=$(awk '/states, stored/ { print $1 }' out)
	if [ "$errors" = 0 ]; then
		r=pass
	else
		r=FAIL
		bad=1
		grep -E 'assertion violated|invalid end state|errors:' out | head -5
		spin -t -p $cfg dump.pml 2>&1 | tail -40
	fi
	echo "model_check config=\"$cfg\" states=${states:-?} errors=$errors seconds=$secs result=$r"
done

for m in "MUTANT_ACK_IN_DROP:$peers" "MUTANT_DROP_UNCHECKED:$peers" \
	 "MUTANT_NO_VERIFY:$full" "MUTANT_REMOVE_DIRTY:$full"; do
	name=${m%%:*} cfg=${m#*:}
	errors=$(run -D"$name" $cfg) || errors=x
	if [ "$errors" != x ] && [ "$errors" -gt 0 ]; then
		r=caught
	else
		r=MISSED
		bad=1
	fi
	echo "model_check mutant=$name config=\"$cfg\" errors=$errors result=$r"
done
exit $bad
