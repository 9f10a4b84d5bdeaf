"""What CPU a benchmark ran on, for its results file: the model name the kernel reports
(`platform.processor()` is empty on Linux), else the machine type."""

from __future__ import annotations

import platform
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")


def cpu_model(cpuinfo: Path = CPUINFO) -> str:
    """E.g. "AMD EPYC" or "Intel(R) Xeon(R) Platinum 8488C"; "x86_64" where unreadable."""
    try:
        lines = cpuinfo.read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            return value.strip()
    return platform.processor() or platform.machine()
