#!/usr/bin/env bash
# The Infinity embedding server (infinity-emb, PyPI) that the endpoint tests and benchmarks run against
# (tests/fixtures/infinity.py, docs/local-stack.md "The embedding server (Infinity)").
#
#   deploy/local/install-infinity.sh [MAIN_VENV]     MAIN_VENV: the project venv (default <repo>/.venv)
#
# It gets a virtualenv of its own, <repo>/.venv-infinity (env DOCSTREAM_INFINITY_VENV), because its pins
# clash with ours (numpy<2, sentence-transformers<4, typer<0.13, click<8.2). It never downloads a second
# torch: it borrows the project venv's torch (and triton, the nvidia/cuda wheels) through a folder of
# links on its path. Its dependencies are exactly deploy/local/infinity-constraints.txt (what pip resolved
# once, torch aside), installed by the project venv's uv with no resolution (--no-deps): uv does not
# read .pth files, so a resolver would not see the borrowed torch and would install a second one.
# Idempotent and quick once installed: a stamp file records what was installed; a new version
# re-installs from scratch.
set -euo pipefail

INFINITY_VERSION=0.0.78
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
main=${1:-$repo/.venv}
dest=${DOCSTREAM_INFINITY_VENV:-$repo/.venv-infinity}
if [ ! -x "$main/bin/python" ] || [ ! -x "$main/bin/uv" ]; then
  echo "no project venv with uv at $main (run 'make setup' first, or pass its folder)" >&2
  exit 1
fi
torch_version=$("$main/bin/python" -c 'import importlib.metadata as m; print(m.version("torch"))')
pins=$repo/deploy/local/infinity-constraints.txt  # what pip resolved once: the server never changes by itself
want="infinity-emb==$INFINITY_VERSION torch==$torch_version pins=$(sha256sum "$pins" | cut -c1-12)"
stamp=$dest/.docstream-installed
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$dest/bin/infinity_emb" ]; then
  exit 0
fi

if [ -e "$dest" ] && [ ! -f "$dest/pyvenv.cfg" ]; then
  echo "$dest exists and is not a virtualenv: not touching it" >&2
  exit 1
fi
echo "installing $want into $dest (once; borrows torch from $main)"
rm -rf "$dest"  # a venv of ours, or nothing: the links inside are removed, never followed
# The project venv's interpreter makes the new venv on the same base Python, so torch's extensions load.
"$main/bin/python" -m venv "$dest"
site_main=$("$main/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
site=$("$dest/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
links=$dest/project-torch
mkdir -p "$links"
shopt -s nullglob
for path in "$site_main"/torch* "$site_main"/functorch "$site_main"/triton* "$site_main"/nvidia* "$site_main"/cuda*; do
  ln -sfn "$path" "$links/"
done
echo "$links" > "$site/docstream-project-torch.pth"
# pip sees the linked torch as installed; the constraint makes it fail rather than replace it (replacing
# would delete files through the links, in the project venv).
# --compile-bytecode: where PYTHONDONTWRITEBYTECODE is set, the server would compile them at every start
"$main/bin/uv" pip install -q --compile-bytecode --no-deps --python "$dest/bin/python" -r "$pins" \
  "infinity-emb==$INFINITY_VERSION"
"$dest/bin/python" -m pip check >/dev/null || { "$dest/bin/python" -m pip check >&2; exit 1; }
"$dest/bin/python" -c 'import torch, infinity_emb' >/dev/null
echo "$want" > "$stamp"
