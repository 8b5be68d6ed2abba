"""What every benchmark prints first: the CPU model and the flags it ran on, and the load."""

from __future__ import annotations

import contextlib
import os
import subprocess
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


def load_average() -> str:
    """The 1, 5 and 15 minute load averages."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def cpu_banner() -> str:
    """Two lines: CPU model (lscpu), CPU count and the load averages; then every CPU flag."""
    info = {}
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        for line in subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout.splitlines():
            name, _, value = line.partition(":")
            info[name.strip()] = value.strip()
    return (f"CPU: {info.get('Model name', '?')}, {os.cpu_count()} CPUs, load average {load_average()}\n"
            f"flags: {info.get('Flags', '?')}")
