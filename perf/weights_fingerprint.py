#!/usr/bin/env python3
"""perf/weights_fingerprint.py [--files N] [--gib G] [--dir D] -- what the vLLM
connector's weights fingerprint (kvshare.vllm.identity.weights_fingerprint)
costs on a large checkpoint: it reads each weight file's safetensors header and
16 chunks of 64 KiB of its tensor bytes, never the file.

Writes a synthetic safetensors checkpoint (N files of G GiB, one uint8 tensor
each: real bytes on the file system, not a sparse file) under D (default: a
temp dir, removed after), then times the fingerprint
  cold: after posix_fadvise(DONTNEED) of every file (their pages dropped from
        the page cache: each sample is a read from the device), and
  warm: right after (the sampled pages cached),
best of --repeat runs each, and scales the cold time per file to a 70B
checkpoint in bf16 (140 GB in 30 files of 4.7 GB).  One line per case:
  weights_fingerprint case=<cold|warm> files=<n> gib_per_file=<g> ms=<..>
                      ms_per_file=<..> read_mib=<..> total_gib=<..>
  weights_fingerprint model=70b_bf16 files=30 est_cold_ms=<..> est_warm_ms=<..>
Needs only Python (no vLLM): PYTHONPATH=python python3 perf/weights_fingerprint.py
Smoke mode (KVS_PERF_SMOKE=1, the perf.weights_fingerprint CTest entry): 2 files
of 16 MiB, one repeat.
"""
import argparse
import json
import os
import shutil
import tempfile
import time

from kvshare.vllm.identity import weights_fingerprint

CHUNK = 64 << 20


def write_file(path, size, fill):
    header = json.dumps({"w": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}})
    header = header.encode()
    header += b" " * (-len(header) % 8)
    block = bytes([fill]) * CHUNK
    with open(path, "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header)
        left = size
        while left:
            n = min(left, CHUNK)
            f.write(block[:n])
            left -= n
        f.flush()
        os.fsync(f.fileno())


def drop(paths):
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def timed(d, paths, cold, repeat):
    best = None
    for _ in range(repeat):
        if cold:
            drop(paths)
        t0 = time.perf_counter()
        got = weights_fingerprint(d)
        ms = (time.perf_counter() - t0) * 1e3
        best = ms if best is None else min(best, ms)
    return best, got


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=2)
    ap.add_argument("--gib", type=float, default=4.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    if os.environ.get("KVS_PERF_SMOKE") == "1":
        a.files, a.gib, a.repeat = 2, 1 / 64, 1
    d = a.dir or tempfile.mkdtemp(prefix="kvs-weights-")
    os.makedirs(d, exist_ok=True)
    size = int(a.gib * (1 << 30))
    paths = [os.path.join(d, f"model-{i + 1:05d}-of-{a.files:05d}.safetensors")
             for i in range(a.files)]
    try:
        t0 = time.perf_counter()
        for i, p in enumerate(paths):
            write_file(p, size, 0x40 + i)
        print(f"# wrote {a.files} x {a.gib:g} GiB in {time.perf_counter() - t0:.1f} s under {d}")
        per = {}
        for case in ("cold", "warm"):
            ms, got = timed(d, paths, case == "cold", a.repeat)
            per[case] = ms / a.files
            print(f"weights_fingerprint case={case} files={a.files} gib_per_file={a.gib:g} "
                  f"ms={ms:.2f} ms_per_file={per[case]:.2f} read_mib={got['read'] / 2**20:.2f} "
                  f"total_gib={got['bytes'] / 2**30:.2f}")
        print(f"weights_fingerprint model=70b_bf16 files=30 est_cold_ms={30 * per['cold']:.1f} "
              f"est_warm_ms={30 * per['warm']:.1f}")
    finally:
        if a.dir is None:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
