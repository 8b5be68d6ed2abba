"""benchmarks/gpu.sh, dry: the GPU check's steps on the CPU with a few chunks, so that the script a GPU machine
runs is known to run before one is lent (``DOCSTREAM_GPU_DRY_RUN``).

Its benchmark runs start their own embedded Kafka broker (not the stack's): tests/run.sh runs this file beside
the chaos scenarios, which stop and restart the stack's Kafka.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.services import bare_env

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def test_the_gpu_check_runs_its_steps_on_the_cpu_and_writes_its_figures(tmp_path: Path) -> None:
    run = subprocess.run(
        ["bash", "benchmarks/gpu.sh", str(Path(sys.executable).parent)], cwd=ROOT, capture_output=True, text=True,
        timeout=400, env=bare_env(DOCSTREAM_GPU_DRY_RUN="1", OUT=str(tmp_path)), check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    model = json.loads((tmp_path / "gpu-inference.json").read_text())
    assert model["device"] == "cpu" and [r["batch_size"] for r in model["results"]] == [16]
    assert model["results"][0]["service_chunks_per_s"] > 0 and model["results"][0]["ratio"] > 0
    plumbing = json.loads((tmp_path / "gpu-plumbing.json").read_text())
    assert plumbing["zero_cost"] and plumbing["results"][0]["service_chunks_per_s"] > 0
    assert "GPU during model: no nvidia-smi samples" in run.stdout
    assert "GPU during plumbing: no nvidia-smi samples" in run.stdout
