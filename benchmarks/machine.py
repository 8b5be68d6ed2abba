"""What every benchmark prints first: the CPU model and the flags it ran on, and the load."""

from __future__ import annotations

import os
from pathlib import Path

_FLAGS_OF_INTEREST = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8", "avx_vnni")


def cpu_line() -> str:
    """One line: CPU model, usable cores, the vector/matrix flags present, and the 1-minute load average."""
    model, flags = "unknown CPU", set[str]()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model == "unknown CPU":
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    present = [f for f in _FLAGS_OF_INTEREST if f in flags] or ["none of " + ",".join(_FLAGS_OF_INTEREST)]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"CPU: {model}, {cores} cores; flags: {' '.join(present)}; load {os.getloadavg()[0]:.2f}"
