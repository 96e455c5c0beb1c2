"""`make bench`: run every benchmark in one go and collect their Markdown in
benchmarks/out/latest.md (figures to copy into benchmarks/RESULTS.md with the date).

Each benchmark is a module with `main(argv) -> int` printing a Markdown section; they run in
sequence in this process's interpreter, so all ratios in one section come from one run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARKS = ["bench_metrics", "bench_store_layout", "bench_extract", "bench_scorers",
              "bench_sweep", "bench_gscore"]


def main() -> int:
    out_dir = Path(__file__).parent / "out"
    out_dir.mkdir(exist_ok=True)
    sections, status = [], 0
    for name in BENCHMARKS:
        print(f"== benchmarks.{name}", flush=True)
        proc = subprocess.run([sys.executable, "-m", f"benchmarks.{name}"], capture_output=True,
                              text=True)
        print(proc.stdout, flush=True)
        if proc.returncode:
            print(proc.stderr, file=sys.stderr)
            status = 1
        sections.append(proc.stdout)
    (out_dir / "latest.md").write_text("\n\n".join(sections))
    print(f"wrote {out_dir / 'latest.md'}")
    return status


if __name__ == "__main__":
    sys.exit(main())
