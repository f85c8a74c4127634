#!/usr/bin/env bash
# tests/skips.sh BUILD_DIR — after ctest: every test and sub-case that skipped,
# with its reason, read from BUILD_DIR/Testing/Temporary/LastTest.log (ctest's
# full record of the run; its own summary names whole skipped tests only, with
# no reason, and sub-case skips not at all).
#
# What it reads: "N/M Testing: <test>" opens a test's record; the harness
# (tests/harness.h) prints "SKIP: <reason>" then "skip  <variant>/<case> (...)"
# for a sub-case; scripts print "SKIP: <reason>" and exit 77; pytest prints
# "SKIPPED [n] <file>:<line>: <reason>"; ctest ends a skipped test's record with
# "Test Skipped" or (ctest 3.25) a pass line after exit code 77.  A "SKIP:" line
# that no sub-case line follows is the test's own: the whole test (exit 77; a
# pass line is all ctest 3.25 writes after it) or a part a script skipped.
set -euo pipefail
log="${1:?usage: tests/skips.sh BUILD_DIR}/Testing/Temporary/LastTest.log"
[ -r "$log" ] || exit 0

awk '
function own() { # the pending "SKIP:" reason, claimed by no sub-case line
	if (reason != "") {
		out[++n] = sprintf("  %s: %s", test, reason)
		listed = 1
	}
	reason = ""
}
function flush() {
	own()
	if (test != "" && whole && !cases && !listed)
		out[++n] = sprintf("  %s: (no reason printed)", test)
}
/^[0-9]+\/[0-9]+ Testing: / { flush(); test = $3; reason = ""; whole = 0; cases = 0; listed = 0; next }
/^SKIP: / { own(); reason = substr($0, 7); next }
/^skip  [^ ]+\/[^ ]+ / {
	split($2, p, "/"); cases++
	out[++n] = sprintf("  %s/%s: %s", test, p[2], reason != "" ? reason : "(no reason printed)")
	reason = ""; next
}
/^SKIPPED \[[0-9]+\] / { sub(/^SKIPPED \[[0-9]+\] /, ""); cases++; out[++n] = sprintf("  %s: %s", test, $0); next }
/^Test Skipped|Skipped\.$|^Other$/ { whole = 1; next }
/^ *Test Failed|^Test Passed/ { next }
END {
	flush()
	if (n == 0) { print "skipped: nothing"; exit }
	printf "skipped (%d; what this machine lacks, or what the build left out):\n", n
	for (i = 1; i <= n; i++) print out[i]
}' "$log"
