"""Reducer benchmark: chunk records/s, documents/s and process CPU per record of `docstream reducer`.

    .venv/bin/python benchmarks/reducer.py --stack kafka            # real Kafka + Cassandra, exactly-once
    .venv/bin/python benchmarks/reducer.py --stack kafka --no-eos   # the same, at-least-once
    .venv/bin/python benchmarks/reducer.py --stack embedded         # embedded Kafka + SQLite, exactly-once
    .venv/bin/python benchmarks/reducer.py --stack kafka --profile /tmp/reducer.prof   # cProfile the reducer
    .venv/bin/python benchmarks/reducer.py --stack embedded --in-flight 60   # 60 documents' records interleaved

1. Not timed: a fresh topic prefix, its topics, a job row and one documents/job_documents row per
   document in the store (as the intake and the chunker leave them), then ``--records``
   ChunkResult records (``--docs`` documents of records/docs chunks, ``--dim`` floats each,
   as the inference service produces them: ``docstream_inference.handler.result_record``'s
   fields, the services' producer options) produced to the result topic: one document after the
   other, or ``--in-flight`` documents at a time, round-robin (the documents agent writes an open
   document's state once per batch, so the order matters: docs/reducer.md "Batches").
2. Timed: ``docstream reducer`` is started as its own process (``kafka.transactions`` on unless
   ``--no-eos``) and the completed topic is read (read_committed) until every document's
   DocumentCompleted is out.

Figures: the steady window runs from the first DocumentCompleted to the last one (the process
start, the group join and the table recovery are left out; under exactly-once both ends are
seen at a transaction commit, every ``broker_commit_interval`` = 2.8 s); records/s is the
records read in that window (those of the documents after the first ``--in-flight`` group) over its
length; process CPU ms per record
is the reducer process's CPU time (user + system, psutil) over the same window per record.
"From start" is the whole thing from the process start, for reference. The CPU model and its
flags, and the load average before and after, are printed first and last.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

from docstream.avro import AvroSerde  # noqa: E402
from docstream.kafka.admin import ensure_topics  # noqa: E402
from docstream.kafka.clients import producer_config  # noqa: E402
from docstream.logging import configure_logging  # noqa: E402
from docstream.records import ChunkResult, DocumentCompleted  # noqa: E402
from docstream.service import collect_garbage_less_often  # noqa: E402
from docstream.settings import Settings  # noqa: E402
from docstream.store import DocumentRow, JobDocumentRow, JobRow, ResultStore, SqliteStore  # noqa: E402
from docstream.topics import Topics  # noqa: E402
from docstream_cli.embedded_kafka import EmbeddedKafka  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from machine import cpu_banner, load_average  # noqa: E402

_BIN = Path(sys.executable).parent / "docstream"
_MODEL = "all-MiniLM-L6-v2"
_PROFILED = """
import cProfile, logging, os, sys
from docstream.settings import load_settings
from docstream_reducer.main import main
profile = cProfile.Profile()
code = profile.runcall(main, load_settings(None))
profile.dump_stats(sys.argv[1])
logging.shutdown()
os._exit(code)
"""


def _records(job_id: str, docs: int, per_doc: int, dim: int, in_flight: int = 1) -> list[ChunkResult]:
    """The documents' records in groups of ``in_flight`` documents, each group's records round-robin over its
    documents (1: one document after the other, as one inference consumer of one document gives them)."""
    rng = random.Random(5)
    at = datetime.now(UTC)
    out: list[ChunkResult] = []
    for first in range(0, docs, in_flight):
        group = [_document(job_id, d, per_doc, dim, rng, at) for d in range(first, min(docs, first + in_flight))]
        out += [record for rank in zip(*group, strict=True) for record in rank]
    return out


def _document(job_id: str, d: int, per_doc: int, dim: int, rng: random.Random, at: datetime) -> list[ChunkResult]:
    doc_id = f"{job_id}-d{d:05d}"
    return [ChunkResult(
        job_id=job_id, doc_id=doc_id, chunk_id=f"{doc_id}-{i}", chunk_index=i, chunk_count=per_doc,
        model_id=_MODEL, status="ok", token_count=200 + i % 56, page_start=1 + i // 4, page_end=1 + i // 4,
        embedded_at=at + timedelta(milliseconds=i), embedding=[rng.uniform(-0.2, 0.2) for _ in range(dim)],
        chunker_settings="max=256;overlap=32",
    ) for i in range(per_doc)]


def _seed(store: ResultStore, job_id: str, doc_ids: list[str]) -> None:
    now = datetime.now(UTC)
    store.upsert_job(JobRow(job_id=job_id, tenant="bench", created_at=now, status="running",
                            document_count=len(doc_ids)))
    for doc_id in doc_ids:
        store.upsert_document(DocumentRow(doc_id=doc_id, job_id=job_id, source_uri=f"file:///bench/{doc_id}.pdf",
                                          content_sha256="ab" * 32, status="chunked", updated_at=now,
                                          filename=f"{doc_id}.pdf", page_count=12))
        store.upsert_job_document(JobDocumentRow(job_id=job_id, doc_id=doc_id, status="chunked", updated_at=now,
                                                 filename=f"{doc_id}.pdf"))


def _produce(settings: Settings, topic: str, records: list[ChunkResult], serde: AvroSerde) -> None:
    producer = Producer(producer_config(settings.kafka, client_id="bench-reducer"))
    for record in records:
        value = serde.serialize(record, topic)
        while True:
            try:
                producer.produce(topic, key=record.doc_id.encode(), value=value)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("records not delivered")


def _env(settings: Settings, args: argparse.Namespace, prefix: str, workdir: Path, eos: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCSTREAM_")}
    env.update({
        "DOCSTREAM_KAFKA__BOOTSTRAP_SERVERS": settings.kafka.bootstrap_servers,
        "DOCSTREAM_KAFKA__TOPIC_PREFIX": prefix,
        "DOCSTREAM_KAFKA__PARTITIONS": str(args.partitions),
        "DOCSTREAM_KAFKA__TRANSACTIONS": "true" if eos else "false",
        "DOCSTREAM_REDUCER__APP_ID": f"{prefix}-reducer",
        "DOCSTREAM_REDUCER__DATA_DIR": str(workdir / "reducer-data"),
        "DOCSTREAM_LOG__FORMAT": "json",
        "DOCSTREAM_LOG__LEVEL": "INFO",
    })
    if args.stack == "kafka":
        host, _, port = args.cassandra.rpartition(":")
        env.update({"DOCSTREAM_STORE__BACKEND": "cassandra", "DOCSTREAM_CASSANDRA__CONTACT_POINTS": json.dumps([host]),
                    "DOCSTREAM_CASSANDRA__PORT": port, "DOCSTREAM_CASSANDRA__KEYSPACE": args.keyspace})
    else:
        env.update({"DOCSTREAM_STORE__BACKEND": "sqlite", "DOCSTREAM_STORE__SQLITE_PATH": str(workdir / "bench.db")})
    return env


@contextlib.contextmanager
def _stack(args: argparse.Namespace, workdir: Path) -> Iterator[tuple[Settings, ResultStore]]:
    kafka = {"bootstrap_servers": args.bootstrap, "partitions": args.partitions}
    with contextlib.ExitStack() as stack:
        store: ResultStore
        if args.stack == "embedded":
            broker = stack.enter_context(EmbeddedKafka(workdir / "broker"))
            kafka["bootstrap_servers"] = broker.bootstrap_servers
            settings = Settings().with_overrides(kafka=kafka)
            store = SqliteStore(workdir / "bench.db")
        else:
            from docstream.store.cassandra import CassandraStore

            host, _, port = args.cassandra.rpartition(":")
            settings = Settings().with_overrides(
                kafka=kafka, cassandra={"contact_points": [host], "port": int(port), "keyspace": args.keyspace})
            store = CassandraStore(settings.cassandra)
        store.migrate()
        try:
            yield settings, store
        finally:
            store.close()


class _Completed:
    """Reads the completed topic from the start (read_committed, no group) and notes when each doc shows up."""

    def __init__(self, settings: Settings, topic: str, serde: AvroSerde) -> None:
        self._consumer = Consumer({"bootstrap.servers": settings.kafka.bootstrap_servers,
                                   "group.id": f"bench-{uuid.uuid4().hex}", "enable.auto.commit": False,
                                   "isolation.level": "read_committed"})
        self._consumer.assign([TopicPartition(topic, p, -2) for p in range(settings.kafka.partitions)])
        self._topic = topic
        self._serde = serde
        self.first: dict[str, float] = {}
        self.duplicates = 0

    def poll(self, timeout_s: float) -> int:
        got = 0
        for msg in self._consumer.consume(num_messages=1000, timeout=timeout_s):
            if msg.error() is not None or msg.value() is None:
                continue
            record = self._serde.deserialize(msg.value(), self._topic)
            if isinstance(record, DocumentCompleted):
                if record.doc_id in self.first:
                    self.duplicates += 1
                else:
                    self.first[record.doc_id] = time.perf_counter()
                    got += 1
        return got

    def close(self) -> None:
        self._consumer.close()


def _cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def run(args: argparse.Namespace, *, eos: bool) -> dict[str, Any]:
    """One benchmark run on a fresh prefix; the figures as a dict."""
    per_doc = args.records // args.docs
    workdir = Path(tempfile.mkdtemp(prefix="bench-reducer-"))
    try:
        with _stack(args, workdir) as (settings, store):
            prefix = f"benchr-{uuid.uuid4().hex[:10]}"
            topics = Topics(prefix)
            settings = settings.with_overrides(kafka={"topic_prefix": prefix})
            ensure_topics(settings.kafka, topics)
            serde = AvroSerde(settings.kafka)
            job_id = f"{prefix}-job"
            records = _records(job_id, args.docs, per_doc, args.dim, args.in_flight)
            _seed(store, job_id, sorted({r.doc_id for r in records}))
            store.close()  # SQLite: the reducer process writes the file alone
            _produce(settings, topics.results, records, serde)
            env = _env(settings, args, prefix, workdir, eos)
            completed = _Completed(settings, topics.completed, serde)
            command = [str(_BIN), "reducer"]
            if args.profile is not None:
                command = [sys.executable, "-c", _PROFILED, str(args.profile)]  # the main thread's view
            log = (workdir / "reducer.log").open("wb")
            started = time.perf_counter()
            child = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=workdir,
                                     start_new_session=True)
            proc = psutil.Process(child.pid)
            cpu_first = cpu_last = 0.0
            deadline = time.monotonic() + args.timeout
            try:
                while len(completed.first) < args.docs:
                    if child.poll() is not None:
                        raise RuntimeError(f"the reducer exited {child.returncode}: {_tail(workdir)}")
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{len(completed.first)}/{args.docs} documents in time: {_tail(workdir)}")
                    before = len(completed.first)
                    if completed.poll(0.05) and before == 0:
                        cpu_first = _cpu(proc)
                cpu_last = _cpu(proc)
                ended = time.perf_counter()
                completed.poll(1.0)  # duplicates arriving just after
            finally:
                completed.close()
                child.send_signal(signal.SIGTERM)
                try:
                    child.wait(90)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait(10)
                log.close()
            cpu_total = cpu_last
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    first, last = min(completed.first.values()), max(completed.first.values())
    window = last - first
    # the records read after the first completion: those of the documents after the first group, and the rest of
    # the first group's last round (one document after the other: the documents completed after the first)
    window_records = (args.docs - args.in_flight) * per_doc + args.in_flight - 1
    return {
        "stack": args.stack, "exactly_once": eos, "records": args.docs * per_doc, "documents": args.docs,
        "chunks_per_document": per_doc, "dim": args.dim, "partitions": args.partitions,
        "documents_in_flight": args.in_flight,
        "window_s": round(window, 2),
        "records_per_s": round(window_records / window, 1),
        "documents_per_s": round((args.docs - 1) / window, 1),
        "cpu_ms_per_record": round((cpu_last - cpu_first) * 1000 / window_records, 3),
        "from_start_s": round(ended - started, 2),
        "from_start_records_per_s": round(args.docs * per_doc / (ended - started), 1),
        "start_to_first_s": round(first - started, 2),
        "cpu_s_total": round(cpu_total, 2),
        "duplicates": completed.duplicates,
    }


def _tail(workdir: Path, lines: int = 15) -> str:
    path = workdir / "reducer.log"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stack", choices=["kafka", "embedded"], default="kafka",
                        help="kafka: real Kafka + Cassandra; embedded: the embedded Kafka broker + SQLite")
    parser.add_argument("--no-eos", action="store_true", help="at-least-once instead of exactly-once")
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--docs", type=int, default=400)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--in-flight", type=int, default=1,
                        help="documents whose records are interleaved (round-robin in groups of this many); 1: one "
                             "document after the other")
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=1, help="runs, one after the other")
    parser.add_argument("--bootstrap", default="127.0.0.1:19092")
    parser.add_argument("--cassandra", default="127.0.0.1:19042")
    parser.add_argument("--keyspace", default="docstream_bench")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--profile", type=Path, help="run the reducer under cProfile, stats written here")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    eos = not args.no_eos
    configure_logging(level="WARNING", fmt="console")
    collect_garbage_less_often()  # as in a service's process (run_service)
    print(cpu_banner())
    print(f"{'stack':<18} {'EOS':>4} {'records':>8} {'docs':>5} {'in flight':>9} {'window s':>9} {'records/s':>10} "
          f"{'docs/s':>7} {'CPU ms/rec':>11} {'from start s':>13} {'dupes':>6}")
    results = []
    for _ in range(args.rounds):
        row = run(args, eos=eos)
        results.append(row)
        name = "Kafka + Cassandra" if args.stack == "kafka" else "embedded + SQLite"
        print(f"{name:<18} {'on' if eos else 'off':>4} {row['records']:>8} {row['documents']:>5} "
              f"{row['documents_in_flight']:>9} "
              f"{row['window_s']:>9.2f} {row['records_per_s']:>10.1f} {row['documents_per_s']:>7.1f} "
              f"{row['cpu_ms_per_record']:>11.3f} {row['from_start_s']:>13.2f} {row['duplicates']:>6}", flush=True)
    if any(row["window_s"] < 10 for row in results):
        print("note: a window under 10 s is coarse (under exactly-once both ends are seen at transaction commits, "
              "every 2.8 s): give more --records")
    print(f"load average after: {load_average()}")
    if args.profile is not None:
        print(f"cProfile stats: {args.profile} (python -m pstats)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
