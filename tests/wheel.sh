#!/usr/bin/env bash
# tests/wheel.sh LIBKVSHARE VARIANT — the CTest `wheel` (CMakeLists.txt): the
# wheel python/wheel.sh makes from this build, installed as a user would,
# into a fresh venv of the system's Python (Debian's refuses `pip install`
# outside one: PEP 668), with nothing pointing at the build tree
# (KVSHARE_LIBRARY, LD_LIBRARY_PATH, PYTHONPATH unset, run from /):
#   - the wheel is platform-tagged and holds kvshare/libkvshare.so.1 and
#     kvshare.vllm;
#   - `pip install --no-index` of it works offline;
#   - import kvshare loads the library inside the installed package (its path
#     in /proc/self/maps), of the build's variant, and a store opened through it
#     dumps and loads a block byte-exact.
# Exit 77 naming what is missing (venv, setuptools/wheel), 1 on failure.
set -uo pipefail
lib=${1:?usage: wheel.sh LIBKVSHARE VARIANT}
variant=${2:?usage: wheel.sh LIBKVSHARE VARIANT}
root=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3
work=$(mktemp -d "${TMPDIR:-/tmp}/kvs-wheel-test.XXXXXX")
trap 'rm -rf "$work"' EXIT

if ! "$py" -c 'import venv, ensurepip, setuptools, wheel' 2>/dev/null; then
	echo "SKIP: $py lacks venv, setuptools or wheel (apt-get install python3-venv python3-setuptools python3-wheel)"
	exit 77
fi
whl=$("$root/python/wheel.sh" "$lib" "$work/dist") || { echo "FAIL: python/wheel.sh"; exit 1; }
echo "wheel: $(basename "$whl")"
case "$(basename "$whl")" in
*-py3-none-linux_*.whl) ;;
*) echo "FAIL: $(basename "$whl") is not platform-tagged"; exit 1 ;;
esac
for f in kvshare/libkvshare.so.1 kvshare/vllm/identity.py; do
	"$py" -c 'import sys, zipfile; sys.exit(sys.argv[2] not in zipfile.ZipFile(sys.argv[1]).namelist())' \
		"$whl" "$f" || { echo "FAIL: the wheel has no $f"; exit 1; }
done
"$py" -m venv "$work/venv" || { echo "FAIL: $py -m venv"; exit 1; }
"$work/venv/bin/python" -m pip install -q --no-index --no-deps --disable-pip-version-check "$whl" ||
	{ echo "FAIL: pip install $whl"; exit 1; }
cd / && env -u KVSHARE_LIBRARY -u LD_LIBRARY_PATH -u PYTHONPATH \
	KVS_WANT_VARIANT="$variant" "$work/venv/bin/python" - <<'PY'
import os, sys
import kvshare

pkg = os.path.dirname(kvshare.__file__)
want = os.path.join(pkg, "libkvshare.so.1")
assert kvshare.variant() == os.environ["KVS_WANT_VARIANT"], kvshare.variant()
maps = [l.split()[-1] for l in open("/proc/self/maps") if "libkvshare.so.1" in l]
assert maps and all(m == want for m in maps), (maps, want)
block = bytes(range(256)) * 256  # 64 KiB
out = bytearray(len(block))
cfg = {"unique_id": f"wheel{os.getpid()}", "device_id": 0, "shard_size": "64k",
       "cache_buffer_capacity_gb": 0.01, "backend": "none", "copy_engine": "host",
       "hugetlb": "off"}
with kvshare.Store(cfg) as s:
    s.dump([7], [bytearray(block)]).wait()
    s.load([7], [out]).wait()
assert bytes(out) == block
print(f"installed kvshare {kvshare.version()} ({kvshare.variant()}) loads {want}; a block round-trips")
PY
