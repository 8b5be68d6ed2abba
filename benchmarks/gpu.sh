#!/usr/bin/env bash
# The GPU check, one short run on a machine with a CUDA GPU (issue 15): prints the machine, then
#  1. the inference service on CUDA (runtime chosen at start-up, fp16 on CUDA) against the embedded
#     Kafka broker and SQLite, next to raw model.encode on the same chunks with the same runtime,
#     at batch sizes 64-512: service / raw (target >= 0.9);
#  2. the plumbing alone on that box: the same service with a zero-cost embedder (chunks/s and
#     process CPU ms per chunk, by thread), i.e. how many chunks/s the pipeline can feed a GPU.
# Nothing here is needed to pass the tests. The real stack (Kafka + Cassandra) is not started here. The
# embedded broker is a Kafka JVM: it needs Java 17+ and the Kafka jars that `make setup` fetches from Maven
# Central (deploy/local/stack's cache), which a GPU box may not reach: copy them there and name their
# folder in DOCSTREAM_KAFKA_JARS.
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
timeout 300 "$bin/python" benchmarks/inference.py --device cuda --broker embedded --store sqlite \
  --batch-sizes 64,128,256,512 --chunks 8192 --words 170 --json "$out/gpu-inference.json"
timeout 200 "$bin/python" benchmarks/inference.py --zero-cost --broker embedded --store sqlite \
  --batch-sizes 64,256 --chunks 20000 --words 170 --json "$out/gpu-plumbing.json"
