"""Block ids that mean the same everywhere (kvshare.stable_id): equal across
processes whatever their PYTHONHASHSEED (Python's hash() of a str is not: the
reason block_id's docs warn against it), separated by namespace, unambiguous
in how parts split, refused for types it does not frame; and fixed for good
(known answers: ids name stored blocks, so a change would orphan every
store)."""
import os
import subprocess
import sys

import pytest

import kvshare

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.join(HERE, "..", "..", "python")
PROG = ("import kvshare; print(kvshare.stable_id('blk', 7, b'\\x00', namespace='m').hex(), "
        "hash('blk'))")


def _in_process(seed):
    env = dict(os.environ, PYTHONHASHSEED=str(seed), PYTHONPATH=PKG)
    out = subprocess.run([sys.executable, "-c", PROG], env=env, check=True,
                         capture_output=True, text=True, stdin=subprocess.DEVNULL).stdout
    sid, h = out.split()
    return sid, int(h)


def test_stable_across_processes():
    (a, ha), (b, hb) = _in_process(1), _in_process(2)
    assert a == b == kvshare.stable_id("blk", 7, b"\x00", namespace="m").hex()
    assert ha != hb  # what hash() would have given two ranks


def test_namespace_and_framing():
    ids = {kvshare.stable_id("ab", "c"), kvshare.stable_id("a", "bc"),
           kvshare.stable_id("abc"), kvshare.stable_id(b"abc"), kvshare.stable_id(1),
           kvshare.stable_id(-1), kvshare.stable_id("abc", namespace=b"model-a"),
           kvshare.stable_id("abc", namespace=b"model-b"),
           kvshare.stable_id("abc", namespace="x" * 100)}
    assert len(ids) == 9
    assert all(len(i) == 16 for i in ids)
    assert kvshare.stable_id("abc", namespace="m") == kvshare.stable_id("abc", namespace=b"m")
    for bad in (1.5, None, True, ["a"]):
        with pytest.raises(TypeError):
            kvshare.stable_id(bad)


def test_known_answers():
    assert kvshare.stable_id("model", 42, b"\x00\x01", namespace=b"fp").hex() == \
        "15db3667276d72b960805b61e481c00f"
    assert kvshare.stable_id(1, namespace="x").hex() == "b2da3b7bfc4acf23a43ab53bf770db3a"
    assert kvshare.stable_id(-1).hex() == "098f4a7b31e4ae2a71c9a81d9099f86f"
