"""Benchmark: HDF5 chunking and compression of a split's ``features`` array (DESIGN §2).

Run ``python -m benchmarks.bench_store_layout [--rows 200000] [--dim 512] [--repeat 3]
[--quick]``.

Justifies ``featstore/layout.py``'s choice (row chunks of about ``CHUNK_BYTES`` = 1 MiB, no
compression). Data: synthetic post-ReLU features ``max(N(0, 1), 0)`` (about 50% exact zeros,
like penultimate activations after a ReLU), ``--rows`` x ``--dim``, fixed seed, in float32 and
in float16 (the two feature dtypes featstore stores).

Layouts of ``features`` (each written with h5py ``create_dataset(data=...)``,
``track_times=False``, like ``featstore.layout``):

- contiguous (no chunks);
- row chunks of 64 KiB, 256 KiB, 1 MiB (featstore's choice) and 4 MiB;
- 1 MiB row chunks with the ``lzf`` filter; 1 MiB row chunks with ``gzip`` level 1.

Per layout: file size; write time (create + write + close, then ``fsync``, reported apart);
full read ``ds[()]``; sequential read in slices of 8,192 rows (``Split.iter_chunks``'s default,
how featstore's scorers read); 200 random 256-row slices at fixed random offsets. OS caches
cannot be dropped without root, so every read pattern runs once untimed and then the best of
``--repeat`` warm (page-cache) runs is reported (compressed layouts: the second run): the
figures compare HDF5 chunk indexing, filter and copy costs, not the disk. Writes of uncompressed
layouts are the best of ``--repeat``; one untimed large write comes first.
Files are opened like ``featstore.store.Split`` does (``h5py.File(path, "r")``, default chunk
cache) and each file is deleted once measured. Files live in a temporary directory under
``/tmp``. Output is Markdown.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from featstore.layout import CHUNK_BYTES, chunk_rows

SEQ_ROWS = 8192
RANDOM_SLICES = 200
RANDOM_ROWS = 256
KIB = 1024


@dataclass
class Layout:
    name: str
    chunk_bytes: int | None          # None: contiguous
    compression: str | None = None
    level: int | None = None

    def kwargs(self, shape: tuple[int, int], itemsize: int) -> dict:
        kw: dict = {"track_times": False}
        if self.chunk_bytes is not None:
            rows = max(1, min(shape[0], self.chunk_bytes // (shape[1] * itemsize)))
            kw["chunks"] = (rows, shape[1])
        if self.compression is not None:
            kw["compression"] = self.compression
            if self.level is not None:
                kw["compression_opts"] = self.level
        return kw


LAYOUTS = [
    Layout("contiguous", None),
    Layout("chunks 64 KiB", 64 * KIB),
    Layout("chunks 256 KiB", 256 * KIB),
    Layout("chunks 1 MiB (featstore)", CHUNK_BYTES),
    Layout("chunks 4 MiB", 4 * CHUNK_BYTES),
    Layout("chunks 1 MiB + lzf", CHUNK_BYTES, "lzf"),
    Layout("chunks 1 MiB + gzip 1", CHUNK_BYTES, "gzip", 1),
]


# --------------------------------------------------------------------------- machine
def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def mem_total_gib() -> str:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1]) / 2**20:.1f} GiB RAM"
    except OSError:
        pass
    return "RAM unknown"


def filesystem_of(path: str) -> str:
    """`fstype (device)` of the mount holding `path`, from /proc/mounts."""
    best, desc = "", "unknown filesystem"
    real = os.path.realpath(path)
    try:
        with open("/proc/mounts", encoding="utf-8") as f:
            for line in f:
                dev, mnt, fstype = line.split()[:3]
                if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best):
                    best, desc = mnt, f"{fstype} ({dev} on {mnt})"
    except OSError:
        pass
    return desc


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


# --------------------------------------------------------------------------- measurements
def features(rows: int, dim: int, seed: int) -> np.ndarray:
    """float32 max(N(0,1), 0), generated in blocks to bound temporary memory."""
    rng = np.random.default_rng(seed)
    out = np.empty((rows, dim), dtype=np.float32)
    step = max(1, (1 << 24) // dim)
    for start in range(0, rows, step):
        block = rng.standard_normal((min(step, rows - start), dim), dtype=np.float32)
        np.maximum(block, 0.0, out=out[start:start + len(block)])
    return out


def best_warm(fn: Callable[[], object], repeat: int) -> float:
    """One untimed call (warms the page cache), then the best wall time of `repeat` calls."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


@dataclass
class Result:
    layout: str
    chunk_rows: int | None
    size: int
    write_s: float
    fsync_s: float
    full_s: float
    seq_s: float
    rand_s: float
    repeat: int


def write_file(path: Path, data: np.ndarray, kw: dict) -> float:
    path.unlink(missing_ok=True)
    t0 = time.perf_counter()
    with h5py.File(path, "w") as fh:
        fh.create_dataset("features", data=data, **kw)
    return time.perf_counter() - t0


def measure(layout: Layout, data: np.ndarray, path: Path, offsets: np.ndarray,
            repeat: int) -> Result:
    """Write (best of `repeat`), fsync, check, then warm reads (best of `repeat`)."""
    kw = layout.kwargs(data.shape, data.dtype.itemsize)
    write_s = min(write_file(path, data, kw) for _ in range(repeat))
    t0 = time.perf_counter()
    with open(path, "rb+") as f:
        os.fsync(f.fileno())
    fsync_s = time.perf_counter() - t0
    size = path.stat().st_size
    n = data.shape[0]
    with h5py.File(path, "r") as fh:
        ds = fh["features"]
        chunks = ds.chunks[0] if ds.chunks else None
        if not np.array_equal(ds[()], data):
            raise SystemExit(f"{layout.name}: read back differs from what was written")

        def sequential() -> None:
            for start in range(0, n, SEQ_ROWS):
                ds[start:start + SEQ_ROWS]

        def random_slices() -> None:
            for start in offsets:
                ds[start:start + RANDOM_ROWS]

        full_s = best_warm(lambda: ds[()], repeat)
        seq_s = best_warm(sequential, repeat)
        rand_s = best_warm(random_slices, repeat)
    path.unlink()
    return Result(layout.name, chunks, size, write_s, fsync_s, full_s, seq_s, rand_s, repeat)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=3,
                    help="timed writes/warm reads per uncompressed layout (best kept); "
                         "compressed layouts are timed once")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="20,000 x 512, one repeat (smoke test)")
    args = ap.parse_args(argv)
    rows = 20_000 if args.quick else args.rows
    repeat = 1 if args.quick else args.repeat
    if rows < RANDOM_ROWS or args.dim < 1 or repeat < 1:
        ap.error(f"need --rows >= {RANDOM_ROWS}, --dim >= 1 and --repeat >= 1")
    t_start = time.perf_counter()
    load_before = load_average()
    base = features(rows, args.dim, args.seed)
    zeros = float((base == 0).mean())
    offsets = np.random.default_rng(args.seed + 1).integers(0, rows - RANDOM_ROWS + 1,
                                                            RANDOM_SLICES)
    results: dict[str, list[Result]] = {}
    with tempfile.TemporaryDirectory(prefix="bench_layout_", dir="/tmp") as tmp:
        # Untimed warm-up write: the first large file written pays page-cache growth.
        write_file(Path(tmp) / "warmup.h5", base, {"track_times": False})
        (Path(tmp) / "warmup.h5").unlink()
        for dtype in ("float32", "float16"):
            data = base if dtype == "float32" else base.astype(np.float16)
            results[dtype] = [
                measure(lay, data, Path(tmp) / f"{i}.h5", offsets,
                        1 if lay.compression else repeat)
                for i, lay in enumerate(LAYOUTS)
            ]
            del data
    total = time.perf_counter() - t_start

    cmd = "python -m benchmarks.bench_store_layout" + (" " + " ".join(sys.argv[1:])).rstrip()
    print("### Store layout: chunking and compression of `features`")
    print()
    print(f"- date: {_dt.date.today().isoformat()}")
    print(f"- command: `{cmd}`")
    print(f"- machine: {cpu_model()}, {os.cpu_count()} logical CPUs, {mem_total_gib()}; "
          f"{platform.platform()}; files on /tmp, {filesystem_of('/tmp')}; load average "
          f"(1/5/15 min) before {load_before}, after {load_average()}")
    print(f"- software: Python {platform.python_version()}, NumPy {np.__version__}, h5py "
          f"{h5py.__version__} (HDF5 {h5py.version.hdf5_version}); files opened with h5py "
          f"defaults (1 MiB chunk cache), as `featstore.store.Split` opens them")
    print(f"- data: {rows:,} x {args.dim} max(N(0,1), 0), {100 * zeros:.1f}% zeros, seed "
          f"{args.seed}; float32 {base.nbytes / 2**20:.0f} MiB, float16 "
          f"{base.nbytes / 2**21:.0f} MiB in memory; total benchmark wall time {total:.0f} s")
    print(f"- reads are WARM (page cache; caches cannot be dropped without root): each read "
          f"pattern runs once untimed, then the best of {repeat} runs is reported (compressed "
          f"layouts: the second run). full = `ds[()]`; sequential = slices of {SEQ_ROWS:,} "
          f"rows over all rows (how scorers read); random = {RANDOM_SLICES} slices of "
          f"{RANDOM_ROWS} contiguous rows at fixed random offsets. Write = create + write + "
          f"close into the page cache (best of {repeat}; compressed: once); fsync of the "
          f"written file is its own column. MB/s = MB (10^6 bytes) of the in-memory array per "
          f"second.")
    for dtype, res in results.items():
        raw = base.nbytes // (1 if dtype == "float32" else 2)
        ref = by_name(res)[FEATSTORE]
        print()
        print(f"**{dtype}** ({raw / 2**20:.0f} MiB raw)")
        print()
        print("| layout | chunk rows | file MiB | size / raw | write s | fsync s | full read s "
              "(MB/s) | sequential s (MB/s) | random 200x256 ms | sequential vs 1 MiB |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in res:
            print(f"| {r.layout} | {r.chunk_rows or '-'} | {r.size / 2**20:.0f} | "
                  f"{r.size / raw:.3f} | {r.write_s:.3f} | {r.fsync_s:.3f} | "
                  f"{r.full_s:.3f} ({raw / 1e6 / r.full_s:.0f}) | "
                  f"{r.seq_s:.3f} ({raw / 1e6 / r.seq_s:.0f}) | {1000 * r.rand_s:.1f} | "
                  f"{r.seq_s / ref.seq_s:.2f}x |")
    print()
    print(recommendation(results, args.dim, base.nbytes))
    return 0


FEATSTORE = "chunks 1 MiB (featstore)"


def by_name(res: list[Result]) -> dict[str, Result]:
    return {r.layout: r for r in res}


def recommendation(results: dict[str, list[Result]], dim: int, raw32: int) -> str:
    """The verdict, with every figure taken from this run."""
    lines = ["**Findings (this run).**"]
    for dtype, res in results.items():
        by = by_name(res)
        fs, con = by[FEATSTORE], by["contiguous"]
        k64, k256, m4 = by["chunks 64 KiB"], by["chunks 256 KiB"], by["chunks 4 MiB"]
        lzf, gz = by["chunks 1 MiB + lzf"], by["chunks 1 MiB + gzip 1"]
        lines.append(
            f"- {dtype}: 1 MiB chunks: sequential {fs.seq_s:.3f} s, full {fs.full_s:.3f} s, "
            f"random {1000 * fs.rand_s:.0f} ms. Contiguous reads sequentially "
            f"{fs.seq_s / con.seq_s:.1f}x faster ({1000 * (fs.seq_s - con.seq_s):.0f} ms less "
            f"per pass) and random slices {fs.rand_s / con.rand_s:.1f}x faster. Smaller "
            f"chunks: sequential {k64.seq_s / fs.seq_s:.2f}x (64 KiB) and "
            f"{k256.seq_s / fs.seq_s:.2f}x (256 KiB) the 1 MiB time; 4 MiB: sequential "
            f"{m4.seq_s / fs.seq_s:.2f}x, random {m4.rand_s / fs.rand_s:.1f}x. Compression "
            f"saves {100 * (1 - lzf.size / fs.size):.0f}% (lzf) / "
            f"{100 * (1 - gz.size / fs.size):.0f}% (gzip 1) of the file for "
            f"{lzf.seq_s / fs.seq_s:.0f}x / {gz.seq_s / fs.seq_s:.0f}x the sequential read "
            f"and {lzf.write_s / fs.write_s:.0f}x / {gz.write_s / fs.write_s:.0f}x the write "
            f"time.")
    f32 = by_name(results["float32"])
    f16 = by_name(results["float16"])
    lines.append("")
    lines.append(
        f"**Recommendation: keep row chunks of about 1 MiB ({chunk_rows((dim,), 4, 10**9)} rows "
        f"at D={dim} float32), no compression** (featstore's `CHUNK_BYTES` layout). "
        "Compression is the expensive option: post-ReLU float features carry random mantissa "
        "bits, so only the zeros compress, and every scorer pass would decompress the whole "
        f"array (float32 lzf reads at {raw32 / 1e6 / f32['chunks 1 MiB + lzf'].seq_s:.0f} MB/s "
        f"here, against {raw32 / 1e6 / f32[FEATSTORE].seq_s:.0f} MB/s uncompressed); "
        f"storing float16 halves the file ({f16[FEATSTORE].size / 2**20:.0f} vs "
        f"{f32[FEATSTORE].size / 2**20:.0f} MiB) with no decode cost and is the better way to "
        "shrink a store. Among chunk sizes, 1 MiB is the sweet spot: smaller chunks pay "
        "per-chunk overhead on the sequential scans scorers do, larger ones make small random "
        "row reads read (and cache-miss) whole multi-MiB chunks. Contiguous storage reads "
        "fastest warm, but the margin is tens of milliseconds per pass over hundreds of MiB, "
        "far above any disk's rate either way, and contiguous datasets can be neither "
        "resized nor filtered, which rules out appending batches straight into the split "
        "file (the fix proposed for extraction's part files) and an opt-in compression.")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
