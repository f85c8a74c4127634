#!/usr/bin/env bash
# tests/python/run.sh <variant> <libkvshare.so.1> <python_abi> <sanitizer> <cc>
# The <variant>.python CTest entry (tests/python.cmake): pytest over
# tests/python/ with the package from python/ and the given library
# (KVSHARE_LIBRARY).  The interpreter is $KVS_PYTHON, else the first of `python3`
# on PATH and /usr/bin/python3 that has pytest, torch and numpy (Debian's
# python3-pytest, python3-torch, python3-numpy); none: exit 77 with the reason.
# Sanitizer builds: the compiler's sanitizer runtime is preloaded into python
# (it must be the process's first library); asan with leak checking off (the
# interpreter's own allocations at exit are not kvshare's).
set -u
variant=$1 lib=$2 abi=$3 sanitize=$4 cc=$5
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

need="import pytest, torch, numpy"
py=
why="no python3 found (set KVS_PYTHON)"
for cand in ${KVS_PYTHON:-} python3 /usr/bin/python3; do
	command -v "$cand" >/dev/null 2>&1 || continue
	if err=$("$cand" -c "$need" 2>&1); then
		py=$cand
		break
	fi
	why="$cand: $(printf '%s' "$err" | tail -n 1) (apt-get install python3-pytest python3-torch python3-numpy)"
done
if [ -z "$py" ]; then
	echo "SKIP: $why"
	exit 77
fi

export KVSHARE_LIBRARY=$lib KVSHARE_EXPECT_VARIANT=$variant KVSHARE_ABI_PROGRAM=$abi
export PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH}
export PYTHONDONTWRITEBYTECODE=1
if [ -n "$sanitize" ]; then
	rt=$("$cc" -print-file-name=lib$sanitize.so)
	if [ ! -f "$rt" ]; then
		echo "SKIP: $sanitize build: $cc names no lib$sanitize.so runtime to preload into python"
		exit 77
	fi
	export LD_PRELOAD=$rt
	[ "$sanitize" = asan ] && export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
fi
echo "python: $py ($("$py" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)')), library: $lib"
# -rs: each skip with its reason; stdin from /dev/null, never closed: a closed
# stdin hands descriptor 0 to whatever opens next, and pytest's dup2 onto its
# stdin would replace it (the library keeps its own descriptors above 2, but
# not every one of its backends' does).
exec "$py" -m pytest -q -rs -p no:cacheprovider "$here" </dev/null
