#!/usr/bin/env bash
# tests/vllm/run.sh [test files] [pytest args...] — the vllm.* CTest entries (tests/vllm.cmake):
# pytest over tests/vllm/ in the pinned vLLM venv (python/vllm-env/env.sh makes or
# reuses it; KVS_VLLM_VENV names another), with the package from python/.
# Exit 77 naming the reason when the venv cannot be made (no CPython 3.11, no
# network or package source, ...).
# tests/vllm/run.sh --env: only make (or reuse) the venv, exit 0 or that 77: the
# vllm.env fixture, so that the venv is made once, before the tests that need it.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
if ! venv=$("$root/python/vllm-env/env.sh" 2>"${TMPDIR:-/tmp}/kvshare-vllm-env.err.$$" | tail -n 1) ||
   [ ! -x "$venv/bin/python" ]; then
	echo "SKIP: no vLLM venv: $(tail -n 3 "${TMPDIR:-/tmp}/kvshare-vllm-env.err.$$" | tr '\n' ' ')"
	rm -f "${TMPDIR:-/tmp}/kvshare-vllm-env.err.$$"
	exit 77
fi
cat "${TMPDIR:-/tmp}/kvshare-vllm-env.err.$$"
rm -f "${TMPDIR:-/tmp}/kvshare-vllm-env.err.$$"
[ "${1:-}" = --env ] && exit 0
export PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH}
export PYTHONDONTWRITEBYTECODE=1 HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1
unset PYTHONHASHSEED # the tests set it where they mean to
# the given test files, else every one here (pytest options alone: every one)
if [ $# -eq 0 ] || [ "${1#-}" != "$1" ]; then
	set -- "$here" "$@"
fi
exec "$venv/bin/python" -m pytest -q -rs -p no:cacheprovider "$@" </dev/null
