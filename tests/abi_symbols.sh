#!/bin/sh
# tests/abi_symbols.sh PLAIN.so KERNEL.so — the two builds of libkvshare.so.1
# export the same dynamic symbols and abidiff (libabigail) reports no ABI change.
# Exit 0 pass, 1 fail, 77 skip (no abidiff).
set -u
plain=$1 kernel=$2
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

for f in "$plain" "$kernel"; do
	soname=$(readelf -d "$f" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
	if [ "$soname" != "libkvshare.so.1" ]; then
		echo "FAIL: $f has SONAME '$soname', want libkvshare.so.1"
		exit 1
	fi
done

nm -D --defined-only "$plain" | awk '{print $NF}' | sort >"$tmp/plain"
nm -D --defined-only "$kernel" | awk '{print $NF}' | sort >"$tmp/kernel"
if ! cmp -s "$tmp/plain" "$tmp/kernel"; then
	echo "FAIL: exported symbols differ (< plain, > kernel):"
	diff "$tmp/plain" "$tmp/kernel"
	exit 1
fi
n=$(wc -l <"$tmp/plain")
if ! grep -q '^kvs_version$' "$tmp/plain"; then
	echo "FAIL: kvs_version not exported"
	exit 1
fi
echo "ok: $n identical exported symbols"

if ! command -v abidiff >/dev/null 2>&1; then
	echo "SKIP: abidiff not installed (apt-get install abigail-tools); symbol sets match"
	exit 77
fi
abidiff --no-added-syms "$plain" "$kernel" >"$tmp/abidiff" 2>&1
rc=$?
cat "$tmp/abidiff"
if [ $rc -ne 0 ]; then
	echo "FAIL: abidiff exit $rc"
	exit 1
fi
echo "ok: abidiff reports no ABI difference"
echo "2 passed, 0 failed"
