"""Installed size of featstore's runtime dependencies, per install path (issue 47 item 1).

Reads an existing environment, downloads nothing: the dependency closure of featstore's
`[project] dependencies` (pyproject.toml) is walked through each installed distribution's
`Requires-Dist` (markers evaluated for this machine, extras ignored), and each distribution's
size is the sum of the files its RECORD lists (what `pip install` wrote). Distributions of the
GPU stack (names starting `nvidia-`, `cuda-`, `triton`, `faiss-gpu`) are summed apart, so the
CPU path's saving is what they hold; the CPU wheels themselves are measured where given
(`--cpu-wheel PATH`: the unpacked size of a downloaded wheel, e.g. `pip download --no-deps
faiss-cpu`).

    python -m benchmarks.install_footprint [--cpu-wheel faiss_cpu-....whl ...]
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
import zipfile
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
GPU_STACK = re.compile(r"^(nvidia-|cuda-|triton$|faiss-gpu)")


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(requirements: list[str]) -> dict[str, int]:
    """{distribution: installed bytes} of the requirements and everything they require, with
    the extras they ask for (torch's `cuda-toolkit[cublas, ...]` pulls the nvidia wheels)."""
    sizes: dict[str, int] = {}
    expanded: dict[str, set[str]] = {}
    todo = [(Requirement(r), {""}) for r in requirements]
    while todo:
        req, parent_extras = todo.pop()
        if req.marker is not None and not any(req.marker.evaluate({"extra": e})
                                              for e in parent_extras):
            continue
        try:
            dist = distribution(req.name)
        except PackageNotFoundError:
            continue
        name = _key(dist.metadata["Name"])
        extras = {""} | set(req.extras)
        if extras <= expanded.get(name, set()):
            continue
        expanded[name] = expanded.get(name, set()) | extras
        sizes[name] = sum((f.size or 0) for f in dist.files or [])
        todo += [(Requirement(r), extras) for r in dist.requires or []]
    return sizes


def wheel_bytes(path: Path) -> int:
    """Unpacked size of a wheel (the sum of its members)."""
    with zipfile.ZipFile(path) as zf:
        return sum(i.file_size for i in zf.infolist())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-wheel", type=Path, action="append", default=[])
    args = parser.parse_args(argv)
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    sizes = closure(deps)
    gpu = {n: b for n, b in sizes.items() if GPU_STACK.match(n)}
    gb = 1e9
    print(f"python {sys.version.split()[0]}; {len(sizes)} distributions in the closure")
    print(f"default path (the design's packages): {sum(sizes.values()) / gb:.2f} GB")
    print(f"  of which the GPU stack ({len(gpu)} distributions): {sum(gpu.values()) / gb:.2f} GB")
    for name in ("torch", "torchvision", "faiss-gpu", "triton"):
        if name in sizes:
            print(f"  {name}: {sizes[name] / gb:.3f} GB")
    for wheel in args.cpu_wheel:
        print(f"CPU wheel {wheel.name}: {wheel_bytes(wheel) / gb:.3f} GB unpacked")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
