"""Fixtures of the Python binding's tests (tests/python/, run by run.sh).

Every cache these tests make is named py.<variant>.<tag>.<pid>, so runs of the
two variants (and other engineers' tests) never share a segment; posix roots
are pytest's tmp_path directories.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # ranks.py for spawned children

import kvshare  # noqa: E402


@pytest.fixture(scope="session")
def variant():
    return kvshare.variant()


@pytest.fixture
def uid(variant):
    """uid(tag): a cache name of this test run."""
    return lambda tag: f"py.{variant}.{tag}.{os.getpid()}"


@pytest.fixture
def base():
    """base(**keys): the key=value config of a host-memory rank (small shards,
    /dev/shm, host copy engine) with the given keys over it."""
    def make(**keys):
        cfg = {"device_id": 0, "shard_size": 4096, "cache_buffer_capacity_gb": 0.002,
               "hugetlb": "off", "copy_engine": "host", "backend": "none",
               "timeout_ms": 20000}
        cfg.update(keys)
        return cfg
    return make
