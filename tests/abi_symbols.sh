#!/bin/sh
# tests/abi_symbols.sh PLAIN.so KERNEL.so SYMBOLS.txt HEADER.h — libkvshare.so.1's
# ABI, both builds:
#   1. SONAME libkvshare.so.1;
#   2. the exported (defined, dynamic) symbols are exactly SYMBOLS.txt
#      (tests/abi_symbols.txt, "name@@KVSHARE_1" per line): one more is an
#      accidental export, one less a removal, one unversioned a missing version
#      script -- each fails; the two builds then export the same set;
#   3. SYMBOLS.txt names exactly the functions HEADER.h (include/kvshare.h)
#      declares KVS_API (one declaration per line: "KVS_API <type> name(..."), so
#      a declared function missing from libkvshare.map fails here instead of
#      silently not being exported;
#   4. abidiff (libabigail) reports no ABI difference between the two builds.
# Exit 0 pass (abidiff missing: 1-3 passed, the closing line names the skip),
# 1 fail.
set -u
plain=$1 kernel=$2 list=$3 header=$4
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
export LC_ALL=C
fail=0

for f in "$plain" "$kernel"; do
	soname=$(readelf -d "$f" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
	if [ "$soname" != "libkvshare.so.1" ]; then
		echo "FAIL: $f has SONAME '$soname', want libkvshare.so.1"
		exit 1
	fi
done

# The committed list, without comments and blank lines.
grep -v -e '^#' -e '^[[:space:]]*$' "$list" | sort >"$tmp/want"
if [ ! -s "$tmp/want" ]; then
	echo "FAIL: $list lists no symbol"
	exit 1
fi

# Defined dynamic symbols with their version ("name@@KVSHARE_1"), less the
# version definitions themselves (absolute symbols named like the node).
exports() {
	nm -D --defined-only --with-symbol-versions "$1" |
		awk '!($(NF-1) == "A" && $NF ~ /^KVSHARE_[0-9.]+$/) { print $NF }' | sort
}

for v in plain kernel; do
	eval "lib=\$$v"
	exports "$lib" >"$tmp/$v"
	if [ ! -s "$tmp/$v" ]; then
		echo "FAIL: $v: no exported symbol read from $lib (nm failed?)"
		exit 1
	fi
	if cmp -s "$tmp/want" "$tmp/$v"; then
		echo "ok: $v exports exactly the $(wc -l <"$tmp/want") symbols of $list"
		continue
	fi
	fail=1
	echo "FAIL: $v ($lib) exports differ from $list:"
	comm -13 "$tmp/want" "$tmp/$v" | sed 's/^/  exported, not listed (accidental export? unversioned?): /'
	comm -23 "$tmp/want" "$tmp/$v" | sed 's/^/  listed, not exported (a removal breaks the ABI): /'
done
if ! cmp -s "$tmp/plain" "$tmp/kernel"; then
	fail=1
	echo "FAIL: the two builds export different symbols (< plain, > kernel):"
	diff "$tmp/plain" "$tmp/kernel"
fi

# The header's KVS_API functions against the list's names.
grep '^KVS_API' "$header" | sed 's/(.*//; s/.*[ *]//' | sort >"$tmp/header"
sed 's/@.*//' "$tmp/want" | sort >"$tmp/want_names"
if cmp -s "$tmp/header" "$tmp/want_names"; then
	echo "ok: $list names exactly the $(wc -l <"$tmp/header") KVS_API functions of $header"
else
	fail=1
	echo "FAIL: $header's KVS_API functions differ from $list:"
	comm -23 "$tmp/header" "$tmp/want_names" |
		sed 's/^/  declared KVS_API, not listed (add it to libkvshare.map and the list): /'
	comm -13 "$tmp/header" "$tmp/want_names" | sed 's/^/  listed, not declared KVS_API: /'
fi
if [ $fail -ne 0 ]; then
	echo "FAIL: the exported symbols are not the committed ABI"
	exit 1
fi

if ! command -v abidiff >/dev/null 2>&1; then
	echo "SKIP: abidiff not installed (apt-get install abigail-tools)"
	echo "3 passed, 0 failed, 1 skipped (skipped: abidiff)"
	exit 0
fi
abidiff --no-added-syms "$plain" "$kernel" >"$tmp/abidiff" 2>&1
rc=$?
cat "$tmp/abidiff"
if [ $rc -ne 0 ]; then
	echo "FAIL: abidiff exit $rc"
	exit 1
fi
echo "ok: abidiff reports no ABI difference"
echo "4 passed, 0 failed, 0 skipped"
