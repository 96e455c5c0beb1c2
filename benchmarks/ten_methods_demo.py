"""The ten-method table of the remote-sensing benchmark on the demo data through the experiment
runner (`featstore demo --methods all` preset) at chosen epochs, with wall and CPU seconds and
the load average before and after (benchmarks/results/ten-methods.md).

    nice -n 10 python -m benchmarks.ten_methods_demo OUT EPOCHS FINETUNE_EPOCHS

Prints the runner's log, then one JSON line {wall_s, cpu_s, load_start, load_end}; the table
is OUT/methods/results.md (and results.json)."""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> None:
    from featstore.workflows.demo.ten_methods import run_ten_methods

    out, epochs, finetune_epochs = Path(argv[0]), int(argv[1]), int(argv[2])
    load_start = Path("/proc/loadavg").read_text().strip()
    t0, c0 = time.perf_counter(), time.process_time()
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    run_ten_methods(out, "all", epochs=epochs, finetune_epochs=finetune_epochs)
    print(json.dumps({"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
                      "load_start": load_start,
                      "load_end": Path("/proc/loadavg").read_text().strip()}))


if __name__ == "__main__":
    main(sys.argv[1:])
