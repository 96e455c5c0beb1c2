"""What the store's trust checks (issue 22) cost, against what they replace.

On one split of N x D float32 features (default 100,000 x 256, ~100 MB) this measures, in
CPU seconds (time.process_time; the machine is shared, so wall time is noisy), for a fresh
process state each time:

- `check_committed` when the file's stat matches `.featstore.stat` (every `score` / `eval`
  / `report` call and every split open: one lstat and a small JSON read),
- the same check when the stat changed (a copied store): the file's sha256,
- `sha256_file` alone: what keying the score cache by a freshly computed sha256 would cost on
  every call,
- `nonfinite_record` (the streaming NaN/inf count made once at commit),
- `split_file_problem` (the structure and link check made once per split open).

Run: python -m benchmarks.bench_trust [--rows 100000] [--dim 256]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np

from benchmarks.machine import cpu_model, load_average, mem_total_gib
from featstore import Store
from featstore.store import store as store_mod
from featstore.store.fileio import sha256_file
from featstore.store.store import split_file_problem
from featstore.store.values import nonfinite_record


def cpu(fn, repeat: int = 3) -> float:
    """Best-of-`repeat` CPU seconds of fn()."""
    best = float("inf")
    for _ in range(repeat):
        store_mod._verified.clear()
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=256)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.rows, args.dim)).astype(np.float32)
    w = rng.normal(size=(10, args.dim)).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s"
        st = Store.from_arrays(path, head=(w, np.zeros(10, np.float32)),
                               splits={"ood/far/x": {"features": x}})
        st = Store.open(path)
        split_path = path / "splits" / "ood__far__x.h5"
        size_mb = split_path.stat().st_size / 2**20
        entry = st.manifest["splits"]["ood/far/x"]
        rows = {
            "check_committed, stat recorded (each score/eval call)":
                cpu(lambda: st.check_committed("ood/far/x")),
            "sha256_file (a cache key hashed per call)": cpu(lambda: sha256_file(split_path)),
        }
        stat_file = path / ".featstore.stat"
        saved = stat_file.read_bytes()

        def changed_stat() -> None:
            stat_file.write_text("{}")
            st.check_committed("ood/far/x")

        rows["check_committed, stat changed (copied store: hashes once)"] = cpu(changed_stat)
        stat_file.write_bytes(saved)
        with h5py.File(split_path, "r") as fh:
            rows["nonfinite_record (once, at commit)"] = cpu(lambda: nonfinite_record(fh))
            rows["split_file_problem (once per split open)"] = cpu(
                lambda: split_file_problem(fh, entry, st.manifest))
    print(f"# trust checks on one {args.rows:,} x {args.dim} float32 split ({size_mb:.0f} MiB)")
    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs, {mem_total_gib()}; "
          f"load average {load_average()}")
    print("| check | CPU s (best of 3) |")
    print("|---|---|")
    for name, seconds in rows.items():
        print(f"| {name} | {seconds:.4f} |")


if __name__ == "__main__":
    main()
