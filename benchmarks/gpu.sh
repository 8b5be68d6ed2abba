#!/usr/bin/env bash
# The GPU check, one short run (at most 8 minutes) on a machine with a CUDA GPU: prints the machine, then
#  1. the inference service on CUDA (runtime chosen at start-up: fp16 on CUDA) against the embedded
#     Kafka broker and SQLite, next to raw model.encode on the same chunks with the same runtime,
#     at batch sizes 128, 256 and 512: chunks/s of both and service / raw (target >= 0.9);
#  2. the plumbing alone on that box: the same service with a zero-cost embedder (chunks/s and
#     process CPU ms per chunk, by thread), i.e. how many chunks/s the pipeline can feed a GPU;
#  and, for each part, the GPU's utilisation and memory as nvidia-smi samples them every 250 ms
#  (mean and peak; the samples go to $OUT/gpu-utilisation-*.csv).
# Nothing here is needed to pass the tests; the code path part 1 runs is tested on the CPU
# (tests/unit/lib/models/test_embedding.py: the fp16 runtime; the integration tests: the pipeline). The
# real stack (Kafka + Cassandra) is not started here. The embedded broker is a Kafka JVM: it needs Java 17+
# and the Kafka jars that `make setup` fetches from Maven Central (deploy/local/stack's cache), which a GPU
# box may not reach: copy them there and name their folder in DOCSTREAM_KAFKA_JARS.
#
#   bash benchmarks/gpu.sh [VENV_BIN]        # default .venv/bin; figures also go to $OUT or .docstream/
#   DOCSTREAM_GPU_DRY_RUN=1 bash benchmarks/gpu.sh   # the same steps on the CPU, a few chunks (the tests run it)
#
# Needs a venv with docstream installed (make setup) and torch with CUDA (the pinned PyPI wheel has it).
set -euo pipefail
bin=${1:-.venv/bin}
out=${OUT:-.docstream}
mkdir -p "$out"
if [ -n "${DOCSTREAM_GPU_DRY_RUN:-}" ]; then
  device=(--device cpu)
  model_run=(--batch-sizes 16 --chunks 48)
  plumbing_run=(--batch-sizes 64 --chunks 400)
  echo "dry run: the CPU, a few chunks"
else
  device=(--device cuda)
  model_run=(--batch-sizes 128,256,512 --chunks 8192)
  plumbing_run=(--batch-sizes 64,256 --chunks 20000)
  "$bin/python" - <<'PY'
import torch
assert torch.cuda.is_available(), "no CUDA device visible to torch"
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name(0)}")
PY
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
fi

sampler=""
start_sampling() {  # $1: the part's name; samples utilisation.gpu (%) and memory.used (MiB)
  : > "$out/gpu-utilisation-$1.csv"
  if [ -z "${DOCSTREAM_GPU_DRY_RUN:-}" ] && command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader,nounits -lms 250 \
      > "$out/gpu-utilisation-$1.csv" 2>/dev/null &
    sampler=$!
  fi
}
stop_sampling() {  # $1: the part's name
  if [ -n "$sampler" ]; then kill "$sampler" 2>/dev/null || true; wait "$sampler" 2>/dev/null || true; fi
  sampler=""
  awk -F', *' -v part="$1" 'NF >= 2 { n++; u += $1; if ($1 > umax) umax = $1; if ($2 > mmax) mmax = $2 }
    END { if (n) printf "GPU during %s: utilisation mean %.0f%%, peak %d%%; memory peak %d MiB (%d samples)\n",
                         part, u / n, umax, mmax, n;
          else printf "GPU during %s: no nvidia-smi samples\n", part }' "$out/gpu-utilisation-$1.csv"
}
trap 'if [ -n "$sampler" ]; then kill "$sampler" 2>/dev/null || true; fi' EXIT

start_sampling model
timeout 270 "$bin/python" benchmarks/inference.py "${device[@]}" --broker embedded --store sqlite \
  "${model_run[@]}" --words 170 --json "$out/gpu-inference.json"
stop_sampling model
start_sampling plumbing
timeout 180 "$bin/python" benchmarks/inference.py --zero-cost --broker embedded --store sqlite \
  "${plumbing_run[@]}" --words 170 --json "$out/gpu-plumbing.json"
stop_sampling plumbing
