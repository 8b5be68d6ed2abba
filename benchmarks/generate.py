"""Benchmark: the generate task through a chat server against a plain client of the same server.

In one process and one run, over the same chunks, the same prompts and the same server (SmolLM2-135M-Instruct on
llama.cpp, started here on loopback from .venv-llm, deploy/local/install-llm.sh, unless ``--url`` names one):

* plain: what a user's script does: one ``POST /chat/completions`` per chunk with the messages docstream sends
  (``prompt_messages``: the chunk, then the summarize instruction), ``--in-flight`` at a time over one pooled
  ``httpx.AsyncClient``; run just before and just after the service run and averaged (the machine's load drifts);
* service: the chunks are produced to a fresh topic first (not timed); then the inference pipeline runs the
  ``generate`` task (same ``max_tokens``, stop sequences and in-flight bound; a micro-batch of ``--in-flight``
  chunks) consume → requests → store → produce ChunkResult → commit, timed from its assignment until every
  offset is committed.

It prints chunks/s and completion tokens/s (the server's ``usage``) of each, and the ratio service / plain
(target >= 0.9). The embedded stack (an embedded Kafka broker, SQLite) by default; ``--broker kafka --store
cassandra`` for deploy/local's.

    bash deploy/local/install-llm.sh .venv            # once: the server's own virtualenv
    .venv/bin/python benchmarks/generate.py --chunks 24 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from inference import _chunks, _PeakRss, _service_run, _stack
from machine import cpu_line

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from docstream.logging import configure_logging
from docstream.store import ResultStore
from docstream.tasks.base import Prompt, TaskContext, TaskRequest
from docstream.tasks.chat_protocol import chat_body, prompt_messages
from docstream.tasks.generate import GenerateTask

STOP = ["\n\n", "\nUser:"]
PARAGRAPHS = [  # prose a small model summarizes and stops on (random words make it run on to max_tokens)
    "The Kafka broker stores records in partitions. Each partition is an ordered log that only grows at its end. "
    "Consumers read partitions in order and commit offsets after processing them, so a crash replays only the "
    "records that were not committed.",
    "The invoice from ACME Corporation lists three items and a total of 120 euros, due on 3 March. Payment goes "
    "by bank transfer to the account at the bottom of the page. Late payment adds a fee of two percent a month.",
    "The city council met on Tuesday and voted to repair the old bridge over the river. The work starts in May, "
    "costs four million euros and closes the bridge to cars for six months; buses and bicycles may still cross.",
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen. It happens in the chloroplasts "
    "of plant cells, where chlorophyll absorbs red and blue light and reflects green light.",
]


def plain_client(url: str, model: str, texts: list[str], *, in_flight: int, max_tokens: int) -> tuple[float, float]:
    """A user's script: a request per chunk, ``in_flight`` at a time, one pooled client; chunks/s, tokens/s."""

    async def run() -> int:
        limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
        async with httpx.AsyncClient(limits=limits, timeout=300) as client:
            slots = asyncio.Semaphore(in_flight)

            async def one(text: str) -> int:
                body = chat_body(model, prompt_messages(Prompt("summarize"), text, system_prompt=""),
                                 temperature=0.0, seed=0, max_tokens=max_tokens, stop=STOP)
                async with slots:
                    response = await client.post(f"{url}/chat/completions", json=body)
                    response.raise_for_status()
                    return int(response.json()["usage"]["completion_tokens"])

            return sum(await asyncio.gather(*(one(text) for text in texts)))

    started = time.perf_counter()
    tokens = asyncio.run(run())
    elapsed = time.perf_counter() - started
    return len(texts) / elapsed, tokens / elapsed


def _completion_tokens(store: ResultStore, chunks: list[Any], model_id: str) -> int:
    total = 0
    for doc in sorted({c.doc_id for c in chunks}):
        for row in store.iter_chunks(doc, model_id):
            total += int(json.loads(row.output or "{}").get("completion_tokens", 0))
    return total


@contextlib.contextmanager
def _server(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    if args.url:
        yield args.url, args.model
        return
    from tests.fixtures.llm import LlmServer

    with tempfile.TemporaryDirectory() as logs, LlmServer(Path(logs)) as server:
        yield server.url, server.model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=48, help="chunks per run")
    parser.add_argument("--in-flight", type=int, default=4, help="requests in flight (both clients)")
    parser.add_argument("--max-tokens", type=int, default=128, help="an answer's max_tokens (both clients)")
    parser.add_argument("--url", help="an OpenAI base URL already serving; unset: start the test chat server")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--broker", choices=["kafka", "embedded"], default="embedded",
                        help="kafka: the real Kafka at --bootstrap; embedded: an embedded Kafka broker")
    parser.add_argument("--store", choices=["cassandra", "sqlite"], default="sqlite")
    parser.add_argument("--bootstrap", default="127.0.0.1:19092")
    parser.add_argument("--cassandra", default="127.0.0.1:19042")
    parser.add_argument("--keyspace", default="docstream_bench")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=1, help="service runs (each between two plain runs)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    args.device, args.runtime = "cpu", "fp32"
    configure_logging(level="WARNING", fmt="console")
    logging.getLogger("cassandra").setLevel(logging.ERROR)
    texts = [f"Part {i + 1}. {PARAGRAPHS[i % len(PARAGRAPHS)]}" for i in range(args.chunks)]
    rss = _PeakRss()
    print(cpu_line())
    with _server(args) as (url, model), _stack(args) as (base, store):
        settings = base.with_overrides(tasks={"generate": {
            "endpoint": {"url": url, "model": model, "max_in_flight": args.in_flight},
            "max_tokens": args.max_tokens, "stop": STOP}}, inference={"warmup": False})
        task = GenerateTask.load(TaskContext(settings.inference, settings.tasks))
        model_id = task.model_id_for(TaskRequest("generate"))
        print(f"chat server {url} model {model}; {args.chunks} chunks of prose; summarize, max_tokens "
              f"{args.max_tokens}; {args.in_flight} in flight; broker {args.broker}, store {args.store}")
        plain_client(url, model, texts[:2], in_flight=args.in_flight, max_tokens=args.max_tokens)  # warm up
        print(f"{'round':>6} {'plain chunks/s':>15} {'service chunks/s':>17} {'ratio':>6} {'plain tok/s':>12} "
              f"{'service tok/s':>14}")
        rows: list[dict[str, Any]] = []
        for number in range(1, args.rounds + 1):
            plain1, tokens1 = plain_client(url, model, texts, in_flight=args.in_flight, max_tokens=args.max_tokens)
            chunks = _chunks(texts, uuid.uuid4().hex[:8], task="generate")
            service, _ = _service_run(settings, task, store, chunks, args.in_flight, rss)
            service_tokens = _completion_tokens(store, chunks, model_id) * service / len(chunks)
            plain2, tokens2 = plain_client(url, model, texts, in_flight=args.in_flight, max_tokens=args.max_tokens)
            plain, plain_tokens = (plain1 + plain2) / 2, (tokens1 + tokens2) / 2
            rows.append({"round": number, "plain_chunks_per_s": round(plain, 3),
                         "service_chunks_per_s": round(service, 3), "ratio": round(service / plain, 3),
                         "plain_completion_tokens_per_s": round(plain_tokens, 1),
                         "service_completion_tokens_per_s": round(service_tokens, 1)})
            print(f"{number:>6} {plain:>15.3f} {service:>17.3f} {service / plain:>6.2f} {plain_tokens:>12.1f} "
                  f"{service_tokens:>14.1f}", flush=True)
        task.close()
    if args.json:
        args.json.write_text(json.dumps({"chunks": args.chunks, "in_flight": args.in_flight,
                                         "max_tokens": args.max_tokens, "rounds": rows}, indent=2))


if __name__ == "__main__":
    main()
