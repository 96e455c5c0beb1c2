"""Start-up time of the small commands (issue 47): the wall time of `featstore --help`, `info`,
`table` and `run --status` on a finished run, `scorers` and `eval --method msp` on a small
store, each as the user runs it (the console script in a fresh process), beside the floors of
the same interpreter: `python -c pass` and `python -c "import numpy"` (and numpy + h5py, which
every store read needs). Also lists the heavy packages each command imports.

Run ``python -m benchmarks.bench_startup [--repeat 7]``: best and median of the repeats per
command, Markdown on stdout. The store and the run (an experiment over that existing store:
nothing trains) are made in a temporary folder first.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.machine import cpu_model, load_average, mem_total_gib

HEAVY = ("torch", "torchvision", "sklearn", "matplotlib", "faiss", "numba", "scipy", "h5py")
PROBE = (
    "import sys\nfrom cli.app import main\nsys.argv = ['featstore', *sys.argv[1:]]\n"
    "try:\n    main()\nexcept SystemExit:\n    pass\n"
    f"print(','.join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)\n"
)


def make_inputs(folder: Path) -> tuple[Path, Path]:
    """A 3-class store (300 train, 100 val, 100 test, 100 OOD rows, D = 16) and a finished
    run over it (`featstore run` of an experiment on the existing store: MSP and KNN)."""
    from featstore import Store

    rng = np.random.default_rng(0)
    centers = rng.normal(size=(3, 16))

    def id_rows(n: int) -> dict[str, np.ndarray]:
        y = rng.integers(0, 3, n)
        return {"features": (centers[y] + rng.normal(size=(n, 16))).astype(np.float32),
                "labels": y}

    store = folder / "store"
    Store.from_arrays(store, head=(centers.astype(np.float32), np.zeros(3, np.float32)),
                      splits={"id/train": id_rows(300), "id/val": id_rows(100),
                              "id/test": id_rows(100),
                              "ood/far/unknown": {"features": rng.normal(size=(100, 16))
                                                  .astype(np.float32)}})
    exp = folder / "exp.toml"
    exp.write_text('name = "startup"\n[data]\nstores = ["store"]\n'
                   '[[method]]\nname = "MSP"\nscorer = "msp"\n'
                   '[[method]]\nname = "KNN"\nscorer = "knn"\n')
    run = folder / "run"
    subprocess.run([featstore_exe(), "run", str(exp), "--out", str(run), "-q"], check=True)
    return store, run


def featstore_exe() -> str:
    return str(Path(sys.executable).with_name("featstore"))


def wall(cmd: list[str], repeat: int) -> list[float]:
    """Wall seconds of `cmd` run `repeat` times (output discarded)."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - t)
    return times


def imported(args: list[str]) -> str:
    """The heavy packages a command leaves in sys.modules."""
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True,
                          text=True, check=False)
    return done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        store, run = make_inputs(Path(tmp))
        py = sys.executable
        rows: list[tuple[str, list[str], list[str] | None]] = [
            ("python -c pass (floor)", [py, "-c", "pass"], None),
            ("python -c 'import numpy' (floor)", [py, "-c", "import numpy"], None),
            ("python -c 'import numpy, h5py' (floor)", [py, "-c", "import numpy, h5py"], None),
        ]
        for sub in (["--help"], ["info", str(store)], ["table", str(run)],
                    ["run", "--status", str(run)], ["scorers"],
                    ["eval", str(store), "--method", "msp", "--no-cache"]):
            rows.append(("featstore " + " ".join(a if a not in (str(store), str(run))
                                                   else ("STORE" if a == str(store) else "RUN")
                                                   for a in sub),
                         [featstore_exe(), *sub], sub))
        print(f"# Command start-up\n\nmachine: {cpu_model()}, {mem_total_gib()}, Python "
              f"{sys.version.split()[0]}; load before: {load_average()}; best and median of "
              f"{args.repeat} runs\n")
        print("| command | best s | median s | heavy packages imported |\n|---|---:|---:|---|")
        for label, cmd, sub in rows:
            times = wall(cmd, args.repeat)
            print(f"| `{label}` | {min(times):.2f} | {statistics.median(times):.2f} | "
                  f"{imported(sub) if sub is not None else ''} |", flush=True)
        print(f"\nload after: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
