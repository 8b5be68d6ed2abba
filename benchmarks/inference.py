"""Benchmark: the inference service against the raw model, on the same chunks, batch size by batch size.

For each batch size (default 16, 32, 64, 128), in one process and one run:

* raw: ``SentenceTransformer.encode(texts, batch_size=B)`` with the service's own device,
  precision and normalization (what a script calling the model directly gets), run just
  before and just after the service run and averaged (the machine's load drifts);
* service: the chunks are produced to a fresh topic first (not timed); then the inference
  pipeline (max_batch_size=B) runs consume → model → store → produce ChunkResult → commit,
  timed from its partition assignment until every offset is committed (which happens only
  after every row is written and every ChunkResult is acknowledged).

It prints chunks/s of both, their ratio (target ≥ 0.85), the CPU time per chunk of both
(process CPU seconds over the timed window: a measure that holds up on a machine shared with
other work, where wall-clock throughput swings) and the peak RSS of this process during the
service run. Defaults: real Kafka (127.0.0.1:19092) and Cassandra (127.0.0.1:19042)
from deploy/local; ``--broker embedded`` (the embedded Kafka broker, in a temporary folder) and
``--store sqlite`` use the embedded stack.

    .venv/bin/python benchmarks/inference.py --chunks 512 --words 90
    .venv/bin/python benchmarks/inference.py --device cuda --batch-sizes 32,64,128,256
    .venv/bin/python benchmarks/inference.py --task entities --chunks 256 --words 170 --batch-sizes 16,64

The chunks carry their token ids, as the chunker sends them (``chunker.token_ids``); ``--no-token-ids`` leaves them
out, so the service tokenizes each text (a producer of its own). With a real model, the CPU split by thread
prints the batch stage's share (where tokenizing happens).

``--task entities`` runs the entities service instead, against spaCy's own ``nlp.pipe`` over the same
texts (the default pipeline, the pipeline's own batch size): target ratio >= 0.85.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import random
import resource
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import Consumer, Producer, TopicPartition
from machine import cpu_line

from docstream.avro.serde import AvroSerde
from docstream.kafka.admin import ensure_topics
from docstream.logging import configure_logging
from docstream.models.embedding import PreparedBatch, Runtime, SentenceTransformerEmbedder, load_embedder
from docstream.models.tokenization import load_token_counter
from docstream.records import ChunkCreated
from docstream.service import collect_garbage_less_often
from docstream.settings import Settings
from docstream.store import ResultStore, SqliteStore
from docstream.tasks.base import Task, TaskContext
from docstream.tasks.embed import EmbedTask
from docstream.topics import Topics
from docstream_cli.embedded_kafka import EmbeddedKafka
from docstream_inference.pipeline import InferencePipeline, group_id

_VOCABULARY = (
    "the of and to in is was for on that with as by at from are this be or an which it have not has were "
    "document stream kafka cassandra partition offset consumer producer batch model embedding vector token "
    "chunk latency throughput replica broker schema record commit write read index search cluster node "
    "failure retry backoff jitter queue thread process memory cache network disk storage page text section"
).split()


class ZeroCostEmbedder:
    """A test double of the Embedder role: fixed vectors at no model cost, so the plumbing alone is measured.

    Its vectors are non-zero (the Cassandra store writes the similarity-search row too, as for a real model).
    """

    model_id = "all-MiniLM-L6-v2"
    dimension = 384
    max_tokens = 256
    runtime = Runtime(device="cpu", precision="fp32", threads=1)
    device = "cpu"

    def __init__(self) -> None:
        import numpy as np

        self._np = np
        self._row = np.full(self.dimension, 1 / self.dimension**0.5, dtype=np.float32)

    def prepare(self, texts: Any) -> PreparedBatch:
        return PreparedBatch(texts=tuple(texts), features=None)

    def embed(self, batch: PreparedBatch) -> Any:
        return self._np.broadcast_to(self._row, (len(batch.texts), self.dimension))

    def encode(self, texts: Any, *, batch_size: int) -> Any:
        return self.embed(self.prepare(texts))

    def warm_up(self) -> None:
        return None


def _texts(count: int, words: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    texts = []
    for i in range(count):
        body = " ".join(rng.choice(_VOCABULARY) for _ in range(words))
        texts.append(f"Section {i}. {body.capitalize()}.")
    return texts


TOKEN_IDS = True
"""Whether the chunks carry their token ids, as the chunker sends them (``chunker.token_ids``; ``--no-token-ids``)."""


def _chunks(texts: list[str], run: str, per_doc: int = 50, task: str = "embed") -> list[ChunkCreated]:
    at = datetime.now(UTC)
    tasks = [] if task == "embed" else [{"name": task, "labels": []}]  # the job asks for the task
    counter = load_token_counter(None, "all-MiniLM-L6-v2")
    ids = counter.token_ids(texts) if TOKEN_IDS else [b""] * len(texts)
    tokenizer = counter.fingerprint if TOKEN_IDS else None
    return [
        ChunkCreated(
            job_id=f"bench-{run}", doc_id=f"bench-{run}-{i // per_doc}", chunk_id=f"{run}-{i}",
            chunk_index=i % per_doc, chunk_count=per_doc, content_sha256="0" * 64, text=text, page_start=1,
            page_end=1, char_start=0, char_end=len(text), token_count=len(text.split()) + 2,
            chunker_settings="bench", created_at=at, tasks=tasks, token_ids=token_ids, tokenizer=tokenizer,
        )
        for i, (text, token_ids) in enumerate(zip(texts, ids, strict=True))
    ]


class _PeakRss:
    """Samples this process's RSS every 20 ms while active."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._proc = psutil.Process()

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        self.peak = self._proc.memory_info().rss
        self._stop.clear()
        thread = threading.Thread(target=self._sample, daemon=True)
        thread.start()
        try:
            yield
        finally:
            self._stop.set()
            thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self._proc.memory_info().rss)


def _produce(settings: Settings, topic: str, chunks: list[ChunkCreated], serde: AvroSerde) -> dict[int, int]:
    producer = Producer({"bootstrap.servers": settings.kafka.bootstrap_servers, "linger.ms": 20})
    ends: dict[int, int] = {}

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            raise RuntimeError(f"produce failed: {err}")
        ends[msg.partition()] = max(ends.get(msg.partition(), 0), msg.offset() + 1)

    for chunk in chunks:
        producer.produce(topic, key=chunk.doc_id, value=serde.serialize(chunk, topic), on_delivery=on_delivery)
        producer.poll(0)
    if producer.flush(60):
        raise RuntimeError("chunks not delivered")
    return ends


def _wait_committed(settings: Settings, topic: str, ends: dict[int, int], timeout_s: float,
                    alive: Callable[[], bool] = lambda: True, *, task: str = "embed") -> None:
    group = group_id(settings.kafka, settings.inference, task)
    consumer = Consumer({"bootstrap.servers": settings.kafka.bootstrap_servers, "group.id": group,
                         "enable.auto.commit": False})
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            parts = consumer.committed([TopicPartition(topic, p) for p in ends], timeout=10)
            if all(tp.offset >= ends[tp.partition] for tp in parts):
                return
            if not alive():
                raise RuntimeError("the pipeline stopped before it committed every chunk (its error is above)")
            time.sleep(0.05)
    finally:
        consumer.close()
    raise TimeoutError("the service did not commit every chunk in time")


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _thread_cpu() -> dict[str, float]:
    """CPU seconds of this process by thread name (Python threads by their name, librdkafka's by /proc comm)."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = {}
    for thread in psutil.Process().threads():
        name = names.get(thread.id)
        if name is None:
            try:
                name = Path(f"/proc/self/task/{thread.id}/comm").read_text().strip()
            except OSError:
                name = "?"
        name = name.split(":")[0] if name.startswith("rdk:") else name
        out[name] = out.get(name, 0.0) + thread.user_time + thread.system_time
    return out


def _thread_split(before: dict[str, float], after: dict[str, float], chunks: int) -> str:
    spent = {name: after[name] - before.get(name, 0.0) for name in after}
    top = sorted(((s, n) for n, s in spent.items() if s * 1000 / chunks >= 0.005), reverse=True)
    return ", ".join(f"{n} {s * 1000 / chunks:.3f}" for s, n in top)


THREAD_SPLITS: list[str] = []


def _service_run(base: Settings, embedder: Any, store: ResultStore, chunks: list[ChunkCreated], batch: int,
                 rss: _PeakRss) -> tuple[float, float]:
    prefix = f"bench-{uuid.uuid4().hex[:10]}-b{batch}"
    settings = base.with_overrides(
        kafka={"topic_prefix": prefix},
        inference={"max_batch_size": batch, "max_batch_tokens": batch * 1024, "max_latency_ms": 200},
    )
    topics = Topics(prefix)
    ensure_topics(settings.kafka, topics)
    serde = AvroSerde(settings.kafka)
    ends = _produce(settings, topics.chunks, chunks, serde)
    task = embedder if isinstance(embedder, Task) else EmbedTask(embedder)  # an Embedder runs as the embed task
    pipeline = InferencePipeline(settings.kafka, settings.inference, settings.retry, task=task, store=store,
                                 serde=serde)
    runner = threading.Thread(target=pipeline.run, name="bench-pipeline")
    with rss.watching():
        runner.start()
        while not pipeline.assignment:
            if not runner.is_alive():
                raise RuntimeError("the pipeline stopped before its assignment")
            time.sleep(0.005)
        started, cpu, threads = time.perf_counter(), _cpu_s(), _thread_cpu()
        _wait_committed(settings, topics.chunks, ends, timeout_s=600, alive=runner.is_alive, task=task.name)
        elapsed, cpu = time.perf_counter() - started, _cpu_s() - cpu
        THREAD_SPLITS.append(_thread_split(threads, _thread_cpu(), len(chunks)))
    pipeline.stop()
    runner.join(120)
    return len(chunks) / elapsed, cpu * 1000 / len(chunks)


def _raw_run(embedder: SentenceTransformerEmbedder, texts: list[str], batch: int) -> tuple[float, float]:
    started, cpu = time.perf_counter(), _cpu_s()
    embedder.encode(texts, batch_size=batch)
    return len(texts) / (time.perf_counter() - started), (_cpu_s() - cpu) * 1000 / len(texts)


@contextlib.contextmanager
def _stack(args: argparse.Namespace) -> Iterator[tuple[Settings, ResultStore]]:
    overrides: dict[str, dict[str, Any]] = {
        "kafka": {"bootstrap_servers": args.bootstrap, "partitions": args.partitions},
        "inference": {"device": args.device, "runtime": args.runtime},
    }
    with contextlib.ExitStack() as stack:
        if args.broker == "embedded":
            broker = stack.enter_context(EmbeddedKafka(Path(stack.enter_context(tempfile.TemporaryDirectory()))))
            overrides["kafka"]["bootstrap_servers"] = broker.bootstrap_servers
        store: ResultStore
        if args.store == "sqlite":
            path = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "bench.db"
            overrides["store"] = {"backend": "sqlite", "sqlite_path": str(path)}
            store = SqliteStore(path)
        else:
            from docstream.store.cassandra import CassandraStore

            host, _, port = args.cassandra.rpartition(":")
            overrides["cassandra"] = {"contact_points": [host], "port": int(port), "keyspace": args.keyspace}
            overrides["store"] = {"backend": "cassandra"}
            store = CassandraStore(Settings().with_overrides(**overrides).cassandra)
        settings = Settings().with_overrides(**overrides)
        store.migrate()
        try:
            yield settings, store
        finally:
            store.close()


def _zero_cost(args: argparse.Namespace, settings: Settings, store: ResultStore, batches: list[int],
               texts: list[str], rss: _PeakRss) -> None:
    """The plumbing alone: the service with ``ZeroCostEmbedder``, chunks/s and process CPU ms per chunk."""
    embedder = ZeroCostEmbedder()
    print(f"zero-cost embedder; {args.chunks} chunks of {args.words} words; broker {args.broker}, store {args.store}")
    print(f"{'batch':>6} {'service chunks/s':>17} {'service CPU ms/chunk':>21} {'peak RSS MiB':>13}")
    results = []
    for batch in batches:
        service, service_cpu = _service_run(settings, embedder, store, _chunks(texts, uuid.uuid4().hex[:8]), batch, rss)
        results.append({"batch_size": batch, "service_chunks_per_s": round(service, 1),
                        "service_cpu_ms_per_chunk": round(service_cpu, 3), "peak_rss_mib": round(rss.peak / 2**20, 1)})
        print(f"{batch:>6} {service:>17.0f} {service_cpu:>21.3f} {rss.peak / 2**20:>13.0f}", flush=True)
        print(f"       CPU ms/chunk by thread: {THREAD_SPLITS[-1]}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"zero_cost": True, "broker": args.broker, "store": args.store,
                                         "chunks": args.chunks, "results": results}, indent=2))


def _entities(args: argparse.Namespace, settings: Settings, store: ResultStore, batches: list[int],
              rss: _PeakRss) -> None:
    """The entities service against spaCy's own ``nlp.pipe`` (its default pipeline) over the same texts."""
    import spacy
    from entities import chunk_texts

    from docstream.tasks.entities import EntitiesTask, SpacyRecognizer

    task = EntitiesTask.load(TaskContext(settings.inference, settings.tasks))
    recognizer = task.recognizer
    assert isinstance(recognizer, SpacyRecognizer)
    full = spacy.load(f"{recognizer.nlp.meta['lang']}_{recognizer.nlp.meta['name']}")
    texts = chunk_texts(args.chunks, args.words)
    task.warm_up()
    list(full.pipe(texts[:8]))

    def raw() -> float:
        started = time.perf_counter()
        for _ in full.pipe(texts, batch_size=full.batch_size):
            pass
        return len(texts) / (time.perf_counter() - started)

    print(f"entities: {task.model_id} (spaCy {spacy.__version__}); {args.chunks} chunks of {args.words} words; "
          f"raw: nlp.pipe(batch_size={full.batch_size}) with {full.pipe_names}; broker {args.broker}, "
          f"store {args.store}")
    print(f"{'batch':>6} {'raw chunks/s':>13} {'service chunks/s':>17} {'ratio':>6} {'service CPU ms/chunk':>21}")
    results = []
    for batch in batches:
        raw1 = raw()
        chunks = _chunks(texts, uuid.uuid4().hex[:8], task="entities")
        service, service_cpu = _service_run(settings, task, store, chunks, batch, rss)
        raw2 = raw()
        rate = (raw1 + raw2) / 2
        results.append({"batch_size": batch, "raw_chunks_per_s": round(rate, 2),
                        "service_chunks_per_s": round(service, 2), "ratio": round(service / rate, 3),
                        "service_cpu_ms_per_chunk": round(service_cpu, 2)})
        print(f"{batch:>6} {rate:>13.1f} {service:>17.1f} {service / rate:>6.2f} {service_cpu:>21.1f}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"task": "entities", "chunks": args.chunks, "results": results}, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=512, help="chunks per run")
    parser.add_argument("--words", type=int, default=90, help="words per chunk (~1.3 tokens each)")
    parser.add_argument("--batch-sizes", default="16,32,64,128")
    parser.add_argument("--broker", choices=["kafka", "embedded"], default="kafka",
                        help="kafka: the real Kafka at --bootstrap; embedded: an embedded Kafka broker")
    parser.add_argument("--store", choices=["cassandra", "sqlite"], default="cassandra")
    parser.add_argument("--bootstrap", default="127.0.0.1:19092")
    parser.add_argument("--cassandra", default="127.0.0.1:19042")
    parser.add_argument("--keyspace", default="docstream_bench")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--runtime", choices=["auto", "fp32", "bf16", "fp16"], default="auto",
                        help="inference.runtime (auto: measured at start, docs/inference.md)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--task", choices=["embed", "entities"], default="embed",
                        help="entities: the entities service against spaCy's own nlp.pipe (default pipeline)")
    parser.add_argument("--no-token-ids", action="store_true",
                        help="chunks without their token ids (a producer of its own): the service tokenizes them")
    parser.add_argument("--zero-cost", action="store_true",
                        help="the plumbing alone: a zero-cost embedder (fixed vectors) instead of the model")
    args = parser.parse_args()
    global TOKEN_IDS
    TOKEN_IDS = not args.no_token_ids
    configure_logging(level="WARNING", fmt="console")
    collect_garbage_less_often()  # as in a service's process (run_service)
    logging.getLogger("cassandra").setLevel(logging.ERROR)  # SAI "experimental" server warnings
    batches = [int(b) for b in args.batch_sizes.split(",")]
    texts = _texts(args.chunks, args.words)
    rss = _PeakRss()
    print(cpu_line())
    with _stack(args) as (settings, store):
        if args.zero_cost:
            _zero_cost(args, settings, store, batches, texts, rss)
            return
        if args.task == "entities":
            _entities(args, settings, store, batches, rss)
            return
        embedder = load_embedder(settings.inference)
        assert isinstance(embedder, SentenceTransformerEmbedder)
        tokens = sum(embedder.prepare([t]).features["attention_mask"].sum().item() for t in texts[:64]) / 64
        runtime = embedder.runtime
        print(f"model {embedder.model_id} on {runtime.device} ({runtime.precision}, {runtime.threads} threads); "
              f"{args.chunks} chunks of ~{tokens:.0f} tokens; broker {args.broker}, store {args.store}")
        print(f"{'batch':>6} {'raw chunks/s':>13} {'service chunks/s':>17} {'ratio':>6} "
              f"{'raw CPU ms/chunk':>17} {'service CPU ms/chunk':>20} {'peak RSS MiB':>13}")
        results = []
        for batch in batches:
            # raw just before and just after the service run, averaged: the machine's load drifts
            raw1, raw_cpu1 = _raw_run(embedder, texts, batch)
            service, service_cpu = _service_run(
                settings, embedder, store, _chunks(texts, uuid.uuid4().hex[:8]), batch, rss)
            raw2, raw_cpu2 = _raw_run(embedder, texts, batch)
            raw, raw_cpu = (raw1 + raw2) / 2, (raw_cpu1 + raw_cpu2) / 2
            row = {"batch_size": batch, "raw_chunks_per_s": round(raw, 2), "service_chunks_per_s": round(service, 2),
                   "ratio": round(service / raw, 3), "raw_cpu_ms_per_chunk": round(raw_cpu, 2),
                   "service_cpu_ms_per_chunk": round(service_cpu, 2), "peak_rss_mib": round(rss.peak / 2**20, 1)}
            results.append(row)
            print(f"{batch:>6} {raw:>13.1f} {service:>17.1f} {service / raw:>6.2f} {raw_cpu:>17.1f} "
                  f"{service_cpu:>20.1f} {rss.peak / 2**20:>13.0f}")
            print(f"       service CPU ms/chunk by thread: {THREAD_SPLITS[-1]}", flush=True)
        max_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"peak RSS of the whole run: {max_rss:.0f} MiB")
    if args.json:
        args.json.write_text(json.dumps({"device": runtime.device, "precision": runtime.precision,
                                         "chunks": args.chunks, "tokens_per_chunk": round(tokens, 1),
                                         "results": results, "peak_rss_mib": round(max_rss, 1)}, indent=2))


if __name__ == "__main__":
    main()
