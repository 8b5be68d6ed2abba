#!/usr/bin/env bash
# The GPU check, prepared for a machine with a CUDA GPU (issues 4 and 11): the inference service on
# CUDA in fp16 against the embedded tansu broker and the SQLite store, next to raw model.encode in
# fp16 on the same chunks, at batch sizes 64-512. Nothing here is needed to pass the tests.
#
#   bash benchmarks/gpu.sh [VENV_BIN]        # default .venv/bin; figures also go to $OUT or .docstream/
#
# Needs a venv with docstream installed (make setup) and torch with CUDA (the pinned PyPI wheel has it).
set -euo pipefail
bin=${1:-.venv/bin}
out=${OUT:-.docstream}
mkdir -p "$out"
"$bin/python" - <<'PY'
import torch
assert torch.cuda.is_available(), "no CUDA device visible to torch"
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name(0)}")
PY
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
# fp16 is what the service uses on CUDA (inference.device=auto|cuda); raw encode runs the same embedder
timeout 540 "$bin/python" benchmarks/inference.py --device cuda --broker tansu --store sqlite \
  --batch-sizes 64,128,256,512 --chunks 8192 --words 170 --json "$out/gpu-inference.json"
