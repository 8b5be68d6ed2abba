"""What the repository tracks: source, docs and small fixtures, never a tool's leftovers.

A benchmark run from the root once left onnxruntime's failed shape-inference model (``sym_shape_infer_temp.onnx``
and its ~90 MB weights file) in the working tree, and a ``git add -A`` took it in. Every clone pays for such a
file, so the largest tracked file is bounded here.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MAX_TRACKED_BYTES = 1 << 20
"""The largest file the repository may track (the largest today, a dashboard screenshot, is ~150 KB)."""


def _tracked() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [ROOT / name for name in listed.decode("utf-8").split("\0") if name]


def test_no_tracked_file_is_larger_than_a_mebibyte() -> None:
    files = _tracked()
    assert len(files) > 100, "the listing holds the repository's files"
    large = {str(path.relative_to(ROOT)): path.stat().st_size for path in files
             if path.is_file() and path.stat().st_size > MAX_TRACKED_BYTES}
    assert large == {}
