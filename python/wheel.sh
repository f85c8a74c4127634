#!/usr/bin/env bash
# python/wheel.sh LIBKVSHARE OUTDIR — the kvshare wheel with a library inside
# (`make wheel`, CMake target `wheel`): the package from python/ plus
# LIBKVSHARE (a built libkvshare.so.1, the kernel variant by default) as
# kvshare/libkvshare.so.1, which kvshare/_lib.py loads before any other, tagged
# py3-none-linux_<arch> (it holds a native library; CPython 3.9+).  One `pip
# install` of it into an engine's venv brings the binding and the library; the
# library's own dependencies (liburing, libnuma, libhugetlbfs, jansson, hiredis)
# come from the system, as the Debian package's do.  Built with the system's
# setuptools and wheel (Debian: python3-setuptools python3-wheel), offline.
# Prints the wheel's path.
set -euo pipefail
lib=${1:?usage: wheel.sh LIBKVSHARE OUTDIR}
out=${2:?usage: wheel.sh LIBKVSHARE OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
py=${KVS_PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvshare-wheel.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out"
cp -r "$here/kvshare" "$here/pyproject.toml" "$here/README.md" "$tmp/"
find "$tmp" -name __pycache__ -prune -exec rm -rf {} +
cp -L "$lib" "$tmp/kvshare/libkvshare.so.1"
(cd "$tmp" && "$py" -c 'from setuptools import setup; setup()' -q bdist_wheel \
	--python-tag py3 --plat-name "linux_$(uname -m)" -d "$tmp/dist" >"$tmp/log" 2>&1) || {
	tail -n 20 "$tmp/log" >&2
	echo "wheel.sh: bdist_wheel failed ($py needs setuptools >= 61 and wheel)" >&2
	exit 1
}
whl=$(ls "$tmp"/dist/*.whl)
cp "$whl" "$out/"
echo "$out/$(basename "$whl")"
