"""Machine description shared by every benchmark's Markdown header."""

from __future__ import annotations

import os
import platform


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo where available)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def mem_total_gib() -> str:
    """Total RAM, e.g. '23.5 GiB RAM'."""
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1]) / 2**20:.1f} GiB RAM"
    except OSError:
        pass
    return "RAM unknown"


def load_average() -> str:
    """The 1/5/15-minute load averages (other jobs on the machine inflate wall times)."""
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"
