"""Benchmark: the embed task through an OpenAI-compatible endpoint against a plain client of the same server.

In one process and one run, over the same chunks and the same Infinity server (started here on
loopback from .venv-infinity, deploy/local/install-infinity.sh, unless ``--url`` names one):

* plain: what a user's script does: the texts cut into requests of ``--inputs`` inputs, sent with
  ``--in-flight`` requests at a time over one pooled ``httpx.AsyncClient`` (``POST /embeddings``),
  run just before and just after the service run and averaged (the machine's load drifts);
* service: the chunks are produced to a fresh topic first (not timed); then the inference pipeline
  runs the ``embed`` task with ``inference.endpoint`` (same request size, same in-flight bound; a
  micro-batch of inputs x in-flight) consume → requests → store → produce ChunkResult → commit,
  timed from its assignment until every offset is committed;
* local, for reference: the bundled model in this process, ``encode`` over the same texts.

It prints chunks/s of each and the ratio service / plain (target >= 0.9). Real Kafka and Cassandra
from deploy/local by default; ``--broker embedded --store sqlite`` for the embedded stack.

    bash deploy/local/install-infinity.sh .venv            # once: the server's own virtualenv
    .venv/bin/python benchmarks/endpoint.py --chunks 768 --words 90 --rounds 2
    .venv/bin/python benchmarks/endpoint.py --url http://127.0.0.1:7997/v1 --api-key KEY --model all-MiniLM-L6-v2
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
from inference import _chunks, _PeakRss, _service_run, _stack, _texts
from machine import cpu_line

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from docstream.logging import configure_logging
from docstream.models.embedding import load_embedder
from docstream.models.endpoint import EndpointEmbedder
from docstream.tasks.embed import EmbedTask


def plain_client(url: str, model: str, key: str | None, texts: list[str], *, inputs: int, in_flight: int) -> float:
    """A user's script: batched requests, ``in_flight`` at a time, one pooled client; chunks/s."""

    async def run() -> None:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
        async with httpx.AsyncClient(headers=headers, limits=limits, timeout=120) as client:
            slots = asyncio.Semaphore(in_flight)

            async def one(batch: list[str]) -> int:
                async with slots:
                    response = await client.post(f"{url}/embeddings", json={"model": model, "input": batch,
                                                                           "encoding_format": "float"})
                    response.raise_for_status()
                    return len(response.json()["data"])

            counts = await asyncio.gather(*(one(texts[i : i + inputs]) for i in range(0, len(texts), inputs)))
            assert sum(counts) == len(texts)

    started = time.perf_counter()
    asyncio.run(run())
    return len(texts) / (time.perf_counter() - started)


@contextlib.contextmanager
def _server(args: argparse.Namespace) -> Iterator[tuple[str, str | None, str]]:
    if args.url:
        yield args.url, args.api_key, args.model
        return
    from tests.fixtures.infinity import InfinityServer

    with tempfile.TemporaryDirectory() as logs, InfinityServer(Path(logs)) as server:
        yield server.url, server.api_key, server.model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=1024, help="chunks per run")
    parser.add_argument("--words", type=int, default=90, help="words per chunk (~1.3 tokens each)")
    parser.add_argument("--inputs", type=int, default=32, help="inputs per request (both clients)")
    parser.add_argument("--in-flight", type=int, default=4, help="requests in flight (both clients)")
    parser.add_argument("--url", help="an OpenAI base URL already serving; unset: start Infinity here")
    parser.add_argument("--api-key")
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--broker", choices=["kafka", "embedded"], default="kafka",
                        help="kafka: the real Kafka at --bootstrap; embedded: an embedded Kafka broker")
    parser.add_argument("--store", choices=["cassandra", "sqlite"], default="cassandra")
    parser.add_argument("--bootstrap", default="127.0.0.1:19092")
    parser.add_argument("--cassandra", default="127.0.0.1:19042")
    parser.add_argument("--keyspace", default="docstream_bench")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1, help="service runs (each between two plain runs)")
    parser.add_argument("--no-local", action="store_true", help="skip the local in-process reference")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    args.device, args.runtime = "cpu", "auto"
    configure_logging(level="WARNING", fmt="console")
    logging.getLogger("cassandra").setLevel(logging.ERROR)
    texts = _texts(args.chunks, args.words)
    rss = _PeakRss()
    print(cpu_line())
    with _server(args) as (url, key, model), _stack(args) as (base, store):
        settings = base.with_overrides(inference={
            "endpoint": {"url": url, "api_key": key, "model": model, "max_inputs_per_request": args.inputs,
                         "max_in_flight": args.in_flight},
        })
        embedder = load_embedder(settings.inference)
        assert isinstance(embedder, EndpointEmbedder)
        task = EmbedTask(embedder)
        batch = args.inputs * args.in_flight
        print(f"endpoint {url} model {model}; {args.chunks} chunks of {args.words} words; requests of {args.inputs} "
              f"inputs, {args.in_flight} in flight; micro-batch {batch}; broker {args.broker}, store {args.store}")
        plain_client(url, model, key, texts[:64], inputs=args.inputs, in_flight=args.in_flight)  # warm the server
        print(f"{'round':>6} {'plain chunks/s':>15} {'service chunks/s':>17} {'ratio':>6}")
        rows: list[dict[str, Any]] = []
        for number in range(1, args.rounds + 1):
            plain1 = plain_client(url, model, key, texts, inputs=args.inputs, in_flight=args.in_flight)
            service, _ = _service_run(settings, task, store, _chunks(texts, uuid.uuid4().hex[:8]), batch, rss)
            plain2 = plain_client(url, model, key, texts, inputs=args.inputs, in_flight=args.in_flight)
            plain = (plain1 + plain2) / 2
            rows.append({"round": number, "plain_chunks_per_s": round(plain, 1), "service_chunks_per_s":
                         round(service, 1), "ratio": round(service / plain, 3)})
            print(f"{number:>6} {plain:>15.1f} {service:>17.1f} {service / plain:>6.2f}", flush=True)
        local_rate = None
        if not args.no_local:
            local = load_embedder(base.inference)
            local.encode(texts[:32], batch_size=32)
            started = time.perf_counter()
            local.encode(texts, batch_size=args.inputs)
            local_rate = len(texts) / (time.perf_counter() - started)
            print(f"local in-process model ({local.runtime.label}), encode(batch_size={args.inputs}): "
                  f"{local_rate:.1f} chunks/s (reference)")
        embedder.close()
    if args.json:
        args.json.write_text(json.dumps({"chunks": args.chunks, "inputs": args.inputs, "in_flight": args.in_flight,
                                         "rounds": rows, "local_chunks_per_s": local_rate}, indent=2))


if __name__ == "__main__":
    main()
