"""The binding's ctypes declarations against the C compiler's answer.

python/kvshare/_abi.py is python_abi's output (tests/python_abi.c, built by
CMake from include/kvshare.h).  These tests fail when the header and the
committed file part (regenerate it), or when ctypes would lay a declared struct
out differently from the compiler (size or any field's offset).
"""
import ctypes
import errno
import os
import pickle
import subprocess

import pytest

import kvshare
from kvshare import _abi

ABI_FILE = os.path.join(os.path.dirname(_abi.__file__), "_abi.py")


@pytest.fixture(scope="module")
def fresh():
    prog = os.environ.get("KVSHARE_ABI_PROGRAM")
    if not prog:
        pytest.skip("KVSHARE_ABI_PROGRAM not set (run through ctest: tests/python/run.sh)")
    out = subprocess.run([prog], check=True, capture_output=True, text=True).stdout
    ns = {}
    exec(compile(out, prog, "exec"), ns)  # noqa: S102 - our own generator's output
    return out, ns


def test_committed_abi_is_the_headers(fresh):
    out, _ = fresh
    with open(ABI_FILE) as f:
        committed = f.read()
    assert committed == out, (
        "python/kvshare/_abi.py differs from what tests/python_abi.c prints for "
        f"include/kvshare.h: regenerate it ({os.environ['KVSHARE_ABI_PROGRAM']} > {ABI_FILE})")


def test_ctypes_layout_is_the_compilers(fresh):
    _, ns = fresh
    for name, (size, offsets) in ns["LAYOUT"].items():
        cls = getattr(_abi, name)
        assert ctypes.sizeof(cls) == size, f"sizeof(struct {name})"
        assert [f for f, _ in cls._fields_] == list(offsets), f"fields of struct {name}"
        for field, off in offsets.items():
            assert getattr(cls, field).offset == off, f"offsetof({name}.{field})"


def test_variant_is_the_library_asked_for():
    want = os.environ.get("KVSHARE_EXPECT_VARIANT")
    if not want:
        pytest.skip("KVSHARE_EXPECT_VARIANT not set")
    assert kvshare.variant() == want
    assert kvshare.version().count(".") == 2


def test_error_carries_code_name_and_text(uid):
    with pytest.raises(kvshare.KvsError) as ei:
        kvshare.Store({"unique_id": uid("err"), "shard_sise": 4096})
    e = ei.value
    assert (e.code, e.name) == (-errno.EINVAL, "EINVAL")
    assert e.strerror == kvshare.strerror(-errno.EINVAL) == os.strerror(errno.EINVAL)
    assert "shard_sise" in e.detail and "shard_size" in e.detail  # the parser's "did you mean"
    assert "kvs_store_config_parse" in str(e)
    again = pickle.loads(pickle.dumps(e))  # crosses multiprocessing intact
    assert (again.code, again.name, again.detail) == (e.code, e.name, e.detail)


def test_kvshare_codes_have_names():
    for code, name in [(_abi.KVS_ELAYOUT, "KVS_ELAYOUT"), (_abi.KVS_ECONFIG, "KVS_ECONFIG"),
                       (_abi.KVS_EOWNERDEAD, "KVS_EOWNERDEAD"), (_abi.KVS_ENOHUGE, "KVS_ENOHUGE"),
                       (_abi.KVS_ECORRUPT, "KVS_ECORRUPT")]:
        e = kvshare.KvsError(-code, "op")
        assert e.name == name and e.strerror and e.strerror != kvshare.strerror(-1)


def test_open_error_carries_the_librarys_log_line(uid, base):
    # A tensor table that does not sum to the shard: kvs_store_open refuses it
    # and logs the field; the exception says so.
    with pytest.raises(kvshare.KvsError) as ei:
        kvshare.Store(base(unique_id=uid("badgeo"), tensor_size=3000))
    assert ei.value.code == -errno.EINVAL
    assert "tensor_size" in ei.value.detail


def test_open_error_keeps_every_line(uid, base):
    # A missing root: the backend names it, the store says which step failed;
    # detail keeps both lines (it kept only the last: "store: opening the
    # backend: No such file or directory").
    root = "/nonexistent/kvs-py-detail"
    with pytest.raises(kvshare.KvsError) as ei:
        kvshare.Store(base(unique_id=uid("detail"), backend="posix", backend_roots=root))
    assert ei.value.code == -errno.ENOENT
    lines = ei.value.detail.split("\n")
    assert lines[0].startswith(f"backend: root {root}: No such file"), lines
    assert lines[-1] == "store: opening the backend: No such file or directory", lines


def test_submits_keep_the_gil():
    """The calls that never block keep the GIL (PyDLL: _lib's "Threads"), the
    others release it (CDLL): a submit that dropped it would wait to take it
    back while another Python thread ran, up to the switch interval."""
    import importlib

    lib_mod = importlib.import_module("kvshare._lib")
    lib = lib_mod.lib()
    keeps = {name: bool(type(getattr(lib, name))._flags_ & ctypes._FUNCFLAG_PYTHONAPI)
             for name in (*lib_mod._SIGNATURES, *lib_mod._VERSIONED)
             if getattr(lib, name) is not None}
    assert "kvs_store_load_tensors" in keeps  # this build has ABI 1.2
    assert {n for n, keep in keeps.items() if keep} == lib_mod._KEEP_GIL
    assert not keeps["kvs_store_wait"] and not keeps["kvs_store_close"]
