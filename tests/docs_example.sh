#!/usr/bin/env bash
# tests/docs_example.sh README CC INCLUDE_DIR LIBRARY [SANITIZE] — the C program of
# README.md, compiled and run as the README shows it (CTest <variant>.docs_example).
#
# Takes the ```c block between the lines `<!-- readme_example.c -->` and
# `<!-- end readme_example.c -->` of README (exactly one pair, one fenced block
# between), compiles it with CC -std=c11 -Wall -Wextra -Werror against
# INCLUDE_DIR/kvshare.h and LIBRARY (a built libkvshare.so.1, found at run time
# through its RUNPATH; SANITIZE asan|tsan adds that sanitizer's flags, as the
# library was built with them), runs it with a 60 s deadline and requires exit 0
# and its "bytes equal" line.  Exit 0 pass, 1 fail (the README block is missing or
# malformed, does not compile, or the program fails), 77 skip (no compiler, no
# library or header: said on stdout).
set -uo pipefail
readme=$1 cc=$2 inc=$3 lib=$4 san=${5:-}

skip() { echo "docs_example: skipped: $*"; exit 77; }
fail() { echo "docs_example: FAIL: $*"; exit 1; }
command -v "$cc" >/dev/null 2>&1 || skip "no C compiler '$cc'"
[ -r "$inc/kvshare.h" ] || skip "no $inc/kvshare.h"
[ -r "$lib" ] || skip "no library $lib (build it first)"
[ -r "$readme" ] || fail "no $readme"

work=$(mktemp -d /tmp/kvshare-docs-example.XXXXXX) || fail "mktemp"
trap 'rm -rf "$work"' EXIT

# The block: the lines strictly between the markers must be one ```c fence.
awk -v out="$work/example.c" '
	$0 == "<!-- readme_example.c -->"     { begins++; inside = 1; next }
	$0 == "<!-- end readme_example.c -->" { ends++; inside = 0; next }
	inside && !fenced && $0 == "```c"      { fenced = 1; opened++; next }
	inside && fenced && $0 == "```"        { fenced = 0; closed++; next }
	inside && fenced                       { print > out; lines++ }
	inside && !fenced && $0 != ""          { stray++ }
	END {
		if (begins != 1 || ends != 1 || opened != 1 || closed != 1 || stray || !lines) {
			printf "markers %d/%d, fences %d/%d, stray lines %d, code lines %d\n",
			       begins, ends, opened, closed, stray, lines
			exit 1
		}
	}' "$readme" || fail "$readme needs one \`\`\`c block between '<!-- readme_example.c -->' and '<!-- end readme_example.c -->'"
echo "docs_example: $(wc -l <"$work/example.c") lines of C from $readme"

flags=()
case "$san" in
asan) flags=(-fsanitize=address,undefined) ;;
tsan) flags=(-fsanitize=thread) ;;
esac
libdir=$(cd "$(dirname "$lib")" && pwd)
"$cc" -std=c11 -Wall -Wextra -Werror "${flags[@]}" -I"$inc" -o "$work/example" \
	"$work/example.c" "$libdir/$(basename "$lib")" -Wl,-rpath,"$libdir" ||
	fail "the README's example does not compile"

out=$(cd "$work" && timeout 60 ./example 2>&1)
rc=$?
printf '%s\n' "$out"
[ $rc -eq 0 ] || fail "the README's example exited $rc"
case "$out" in
*"loaded back: bytes equal"*) ;;
*) fail "the README's example did not print its 'bytes equal' line" ;;
esac
echo "docs_example: PASS"
