"""Benchmark: a sink's throughput against a plain client of the same engine writing the same rows, in one run.

For each engine (a Milvus Lite server and a PostgreSQL server, both started here), ``--docs`` documents of
``--chunks`` chunks with 384-dim vectors are written to a SQLite store as the pipeline leaves them, and their
DocumentCompleted records to the completed topic of the local stack's Kafka (``make stack-up``). Then, side by
side on the same engine, into two collections:

* **plain**: what a user would write without docstream: read every document's chunk rows from the store and
  upsert them (the same payload) with the engine's own client, ``--batch`` rows per call, timed from the first
  read to the last write;
* **sink**: ``docstream sink run``'s loop (consume, read the store, decide, upsert in batches of ``--batch``,
  delete the source's other versions, commit), timed from its start to the last point written, and from its
  first write to its last (its throughput, without the consumer group's join).

It prints points/s for both and their ratios (sink / plain), ``--repeat`` times per engine (each into fresh
collections), and the median ratios. No model runs: both sides write the same stored vectors.

    .venv/bin/python benchmarks/sink.py --docs 500 --chunks 20
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import cpu_line  # noqa: E402

from docstream.avro import AvroSerde  # noqa: E402
from docstream.kafka.admin import TopicSpec, create_topics  # noqa: E402
from docstream.kafka.clients import ReliableProducer  # noqa: E402
from docstream.logging import configure_logging  # noqa: E402
from docstream.metrics import Metrics  # noqa: E402
from docstream.settings import Settings  # noqa: E402
from docstream.store import ResultStore, SqliteStore  # noqa: E402
from docstream.topics import Topics  # noqa: E402
from docstream_sink.main import build_sink  # noqa: E402
from docstream_sink.points import POINT_NAMESPACE  # noqa: E402
from tests.fixtures.sinks import SeededJob, milvus_lite_server, postgres_server, seed_job  # noqa: E402

SINK = "bench"


def _rows(store: ResultStore, job: SeededJob) -> list[dict[str, object]]:
    """What the plain script writes: every chunk row of the job, read from the store, with the sink's payload."""
    out: list[dict[str, object]] = []
    for doc in job.docs:
        document = store.get_document(doc.doc_id)
        assert document is not None
        for chunk in store.iter_chunks(doc.doc_id, "all-MiniLM-L6-v2"):
            out.append({"id": str(uuid.uuid5(POINT_NAMESPACE, chunk.chunk_id)), "tenant": job.tenant,
                        "source": doc.source_key or doc.doc_id, "doc_id": chunk.doc_id, "vector": chunk.embedding,
                        "payload": {"tenant": job.tenant, "job_id": chunk.job_id, "doc_id": chunk.doc_id,
                                    "source": doc.source_key, "source_uri": document.source_uri,
                                    "filename": document.filename, "chunk_index": chunk.chunk_index,
                                    "chunk_id": chunk.chunk_id, "model_id": chunk.model_id, "text": chunk.text,
                                    "page_start": chunk.page_start, "page_end": chunk.page_end,
                                    "heading": chunk.heading, "text_source": chunk.text_source, "kind": chunk.kind,
                                    "token_count": chunk.token_count, "tasks": {}}})
    return out


def _plain_milvus(uri: str, store: ResultStore, job: SeededJob, batch: int, dimensions: int, name: str) -> float:
    from pymilvus import DataType, MilvusClient

    client = MilvusClient(uri=uri)
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=36)
    schema.add_field("tenant", DataType.VARCHAR, max_length=128)
    schema.add_field("source", DataType.VARCHAR, max_length=4160)
    schema.add_field("doc_id", DataType.VARCHAR, max_length=128)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=dimensions)
    schema.add_field("payload", DataType.JSON)
    index = client.prepare_index_params()
    index.add_index("vector", metric_type="COSINE", index_type="AUTOINDEX")
    client.create_collection(name, schema=schema, index_params=index)
    began = time.perf_counter()
    rows = _rows(store, job)
    for start in range(0, len(rows), batch):
        client.upsert(name, rows[start:start + batch])
    took = time.perf_counter() - began
    client.close()
    return took


def _plain_postgres(uri: str, store: ResultStore, job: SeededJob, batch: int, name: str) -> float:
    import psycopg
    from psycopg.types.json import Jsonb

    with psycopg.connect(uri) as conn:
        conn.execute(f"CREATE TABLE {name} (id uuid PRIMARY KEY, tenant text, source text, doc_id text, "
                     "vector real[], payload jsonb)")
        conn.commit()
        began = time.perf_counter()
        rows = _rows(store, job)
        for start in range(0, len(rows), batch):
            with conn.transaction(), conn.cursor() as cursor:
                cursor.executemany(
                    f"INSERT INTO {name} VALUES (%s, %s, %s, %s, %s::real[], %s) ON CONFLICT (id) DO UPDATE SET "
                    "vector = EXCLUDED.vector, payload = EXCLUDED.payload",
                    [(r["id"], r["tenant"], r["source"], r["doc_id"], r["vector"], Jsonb(r["payload"]))
                     for r in rows[start:start + batch]])
        return time.perf_counter() - began


def _sink(settings: Settings, store: ResultStore, points: int) -> tuple[float, float]:
    """The sink's seconds from its start to its last point, and from its first point to its last."""
    from docstream_sink.engine import open_engine

    engine = open_engine(settings.sinks[SINK])
    metrics = Metrics()
    loop = build_sink(settings, SINK, store=store, engine=engine, metrics=metrics, poll_timeout_s=0.1)
    written = metrics.sink_points.labels(f"sink-{SINK}", "upsert")
    thread = threading.Thread(target=loop.run, daemon=True)
    began = time.perf_counter()
    thread.start()
    first: float | None = None
    while written._value.get() < points:
        if not thread.is_alive():
            raise SystemExit("the sink stopped before writing every point")
        if first is None and written._value.get() > 0:
            first = time.perf_counter()
        time.sleep(0.005)
    ended = time.perf_counter()
    loop.stop()
    thread.join(60)
    engine.close()
    return ended - began, ended - (first or began)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=500)
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--batch", type=int, default=500, help="rows per engine call, both sides")
    parser.add_argument("--engine", choices=["milvus", "postgres", "both"], default="both")
    parser.add_argument("--bootstrap", default="127.0.0.1:19092", help="the local stack's Kafka")
    parser.add_argument("--repeat", type=int, default=3, help="plain then sink, this many times per engine")
    args = parser.parse_args()
    configure_logging(level="WARNING", fmt="console")
    print(cpu_line())
    print(f"{args.docs} documents x {args.chunks} chunks, 384-dim vectors, batches of {args.batch}")
    engines = ["milvus", "postgres"] if args.engine == "both" else [args.engine]
    with tempfile.TemporaryDirectory(prefix="docstream-bench-sink-") as tmp:
        folder = Path(tmp)
        store = SqliteStore(folder / "store.db")
        store.migrate()
        rng = random.Random(1)
        job = seed_job(store, "bench-job", "bench", [
            (f"bench-d{i}", f"file:///bench/d{i}.pdf",
             [f"document {i} paragraph {j}: " + " ".join(rng.choice(["alpha", "beta", "gamma", "delta"])
                                                         for _ in range(40)) for j in range(args.chunks)])
            for i in range(args.docs)], rng=rng)
        points = args.docs * args.chunks
        for kind in engines:
            server = milvus_lite_server(folder) if kind == "milvus" else postgres_server()
            ratios: list[tuple[float, float]] = []
            with server as uri:
                for run in range(1, args.repeat + 1):
                    prefix = f"bench-sink-{uuid.uuid4().hex[:8]}"
                    settings = Settings().with_overrides(
                        kafka={"bootstrap_servers": args.bootstrap, "topic_prefix": prefix},
                        store={"backend": "sqlite", "sqlite_path": str(folder / "store.db")},
                        sinks={SINK: {"kind": kind, "uri": uri, "collection": f"sink{run}", "batch_size": args.batch}})
                    topic = Topics(prefix).completed
                    create_topics(settings.kafka, [TopicSpec(t, 3, 1, {}) for t in (topic, Topics(prefix).submitted)],
                                  timeout_s=30)
                    serde, producer = AvroSerde(settings.kafka), ReliableProducer(settings.kafka, client_id="bench")
                    for record in job.completed:
                        producer.produce(topic, record.doc_id, serde.serialize(record, topic))
                    producer.flush(60)
                    producer.close()
                    plain = (_plain_milvus(uri, store, job, args.batch, 384, f"plain{run}") if kind == "milvus"
                             else _plain_postgres(uri, store, job, args.batch, f"plain{run}"))
                    total, steady = _sink(settings, store, points)
                    ratios.append((plain / total, plain / steady))
                    print(f"{kind} run {run}: plain {points / plain:,.0f} points/s ({plain:.2f} s); sink "
                          f"{points / total:,.0f} points/s from its start ({total:.2f} s, group join included: "
                          f"{plain / total:.2f}x), {points / steady:,.0f} points/s from its first write "
                          f"({steady:.2f} s): {plain / steady:.2f}x")
            print(f"{kind}: sink/plain median of {args.repeat} runs: {statistics.median(r[1] for r in ratios):.2f}x "
                  f"from the first write, {statistics.median(r[0] for r in ratios):.2f}x from the sink's start")
        store.close()


if __name__ == "__main__":
    main()
