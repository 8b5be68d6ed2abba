"""Sharing the service on real Kafka + Cassandra (docs/operations.md "Sharing the service"): a backfill with an
interactive job and a batch job beside it, then a kill -9 of inference while both lanes hold work; two tenants in
one lane; a gradual admission of a job larger than its tenant's quota.

`docstream chunker`, `docstream inference` and `docstream reducer` run as processes (at least once). Each
model batch sleeps ``DELAY_MS`` more (fault injection), so that a backlog of a few thousand chunks lasts on any
CPU. Nothing here asserts a wall-clock time: what a job waited is counted in other chunks embedded before its own
last one (the order of the ChunkResult records' ``embedded_at``), which is the same on a slow machine and a fast
one; the seconds are printed. A state the pipeline may already have passed (the batch job waiting, shown by
``docstream status``) is asserted only while it still holds: a job that started never waits again.

The bound of an interactive job, in chunks of others embedded from the moment its last chunk exists to the moment
that chunk is embedded: its chunks are taken from Q0 ahead of every batch chunk but the batch lane's share, and
cut into the next batch ahead of older batch chunks in the batcher's pool; they wait at most for the batches past
the pool: one closed and waiting for room, ``queue_batches`` in the queue to the model, one in the model,
``queue_batches`` in the queue to the writer and one being written: ``(2 * queue_batches + 3) * max_batch_size``.
While its own chunks run, the batch lane keeps its share, in tokens: ``batch_share / (1 - batch_share)`` batch
tokens per interactive token, counted in the most batch chunks that many tokens can hold (the smallest first: a
backfill of short chunks gets more of them), one chunk ahead, and one batch more for the rounding. (The
chunker's part is not in it: the interactive intake topic holds the job's documents, which wait behind at most the
chunker's prefetch, ``queued.min.messages`` 8 a partition.)
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from docstream.avro import AvroSerde
from docstream.jobs.standing import QueueStanding
from docstream.records import ChunkCreated, ChunkResult, DocumentCompleted
from docstream.settings import CassandraSettings, Settings
from docstream.store import ResultStore
from docstream.store.base import JobRow, QueuedJobRow
from docstream.tenants.admission import day_of
from docstream.topics import Topics
from docstream_ingest.job_view import standings
from tests.fixtures.documents import make_pdf
from tests.fixtures.kafka import read_topic
from tests.fixtures.services import Pipeline, running_pipeline

# alone: the backfill's share while an interactive job runs held in every run on its own, and once fell to 15.9 %
# (bound 18 %) beside three test workers on 2 cores (docs/reliability.md "Open failures")
pytestmark = [pytest.mark.integration, pytest.mark.alone, pytest.mark.timeout(900)]

FULL = os.environ.get("DOCSTREAM_CHAOS_FULL") == "1"
"""`make chaos`: the issue's scale (a backfill of 2,000 chunks and more, the small jobs 10 s later); `make test` runs
a shorter version (about 1,300 chunks, the small jobs as soon as the backfill started), which needs less of a 2-core
machine beside the other tests."""
BACKFILL_PAGES, SMALL_JOBS_AFTER_S, TENANT_PAGES = ([2] * 17, 10, [10, 10]) if FULL else ([2] * 11, 0, [8, 8])
"""Each tenant's backlog in the equal-share test is several times what the batcher's length pool may reorder after
the fair rule (``inference.length_pool_batches`` 8 batches, about 1,700 tokens of one tenant's): with 4-page
documents (about 6,500 tokens a tenant) that reorder alone was up to a fifth of the window."""
DELAY_MS = 100
BATCH = Settings().inference.max_batch_size
QUEUE = Settings().inference.queue_batches
SHARE = Settings().fairness.batch_share
CHUNK_TOKENS = 16  # about 47 chunks a page: the scheduling is what is tested, and short chunks cost little CPU
SERVICES = ("chunker", "inference", "reducer")


@dataclass(frozen=True)
class Job:
    job_id: str
    tenant: str
    priority: str


def _pdfs(root: Path, name: str, pages: list[int], seed: int) -> list[Path]:
    folder = root / name
    folder.mkdir()
    paths = []
    for i, count in enumerate(pages):
        path = folder / f"{name}-{i}.pdf"
        path.write_bytes(make_pdf(count, seed=seed + i).data)
        paths.append(path)
    return paths


def _submit(pipeline: Pipeline, paths: list[Path], tenant: str, priority: str) -> Job:
    job = Job(f"{tenant}-{priority}-{uuid.uuid4().hex[:8]}", tenant, priority)
    pipeline.submit(paths, job.job_id, "--tenant", tenant, "--priority", priority,
                    "--chunk-max-tokens", str(CHUNK_TOKENS))
    return job


def _any_embedded(store: ResultStore, job: Job) -> bool:
    row = store.get_job(job.job_id)
    return row is not None and (row.completed + row.partial + row.failed) > 0


def _standings(store: ResultStore, jobs: Sequence[JobRow], pipeline: Pipeline) -> dict[str, QueueStanding]:
    """Where ``jobs`` stand now, with the pipeline's settings as ``docstream status`` reads them: its topic prefix,
    the default fairness."""
    settings = Settings().with_overrides(kafka={"topic_prefix": pipeline.prefix})
    return standings(store, jobs, datetime.now(UTC), kafka=settings.kafka, inference=settings.inference,
                     fairness=settings.fairness)


def _standing_behind(store: ResultStore, pipeline: Pipeline, waiting: Job, ahead: Job, *others: Job
                     ) -> tuple[dict[str, QueueStanding], QueuedJobRow] | None:
    """Where the jobs stand (docs/operations.md "Where a job stands"), once the reducer wrote the tokens ``ahead``
    has waiting and while ``waiting`` has not started; None before."""
    topics = Topics(pipeline.prefix)
    row = next((r for r in store.list_queue(topics.lane(ahead.priority)) if r.job_id == ahead.job_id), None)
    jobs = [store.get_job(job.job_id) for job in (waiting, *others)]
    found = _standings(store, [job for job in jobs if job is not None], pipeline)
    if row is None or not row.waiting_tokens or waiting.job_id not in found or found[waiting.job_id].started:
        return None
    return found, row


def _estimated(store: ResultStore, pipeline: Pipeline, job: Job
               ) -> tuple[datetime, QueueStanding | None] | None:
    """When and where ``job`` stood once it has a start estimate; (now, its standing) once it started; (now, None)
    once it ended (a fast model may end it before inference writes its first rate); else None."""
    row = store.get_job(job.job_id)
    assert row is not None
    standing = _standings(store, [row], pipeline).get(job.job_id)
    if standing is None and row.status != "running":
        return datetime.now(UTC), None
    if standing is None or not (standing.started or standing.estimated_start is not None):
        return None
    return datetime.now(UTC), standing


def _served(embedded: list[ChunkResult], job: Job, since: datetime, tokens: int) -> tuple[float | None, float]:
    """Seconds from ``since`` until the model embedded ``tokens`` tokens of other jobs (None: never), and the
    longest pause between two chunks meanwhile."""
    total, last, gap = 0, since, 0.0
    for e in sorted((e for e in embedded if e.embedded_at >= since and e.job_id != job.job_id),
                    key=lambda e: e.embedded_at):
        gap = max(gap, (e.embedded_at - last).total_seconds())
        last = e.embedded_at
        total += e.token_count
        if total >= tokens:
            return (e.embedded_at - since).total_seconds(), gap
    return None, gap


def _seconds(value: float | None) -> str:
    return "not known yet" if value is None else f"{value:.1f} s"


def _all_chunked(store: ResultStore, job: Job, documents: int) -> bool:
    """The ``documents`` documents of ``job`` are chunked or further on."""
    rows = list(store.iter_job_documents(job.job_id))
    return len(rows) == documents and all(row.status not in ("submitted", "chunking") for row in rows)


def _chunked(store: ResultStore, *jobs: Job) -> bool:
    """Every document of ``jobs`` is chunked (its chunks are on the lane's topic)."""
    rows = [row for job in jobs for row in store.iter_job_documents(job.job_id)]
    return len(rows) == len(jobs) * len(TENANT_PAGES) and all(row.status == "chunked" for row in rows)


def _done(store: ResultStore, *jobs: Job) -> bool:
    rows = [store.get_job(job.job_id) for job in jobs]
    return all(row is not None and row.status == "completed" for row in rows)


def _results(bootstrap: str, pipeline: Pipeline) -> list[ChunkResult]:
    records = read_topic(bootstrap, pipeline.topics.results, serde=AvroSerde(Settings().kafka), timeout_s=90).records
    return [r for r in records if isinstance(r, ChunkResult)]


@dataclass(frozen=True)
class Made:
    """A ChunkCreated and where it is on its lane's topic."""

    chunk: ChunkCreated
    topic: str
    partition: int
    offset: int


def _created(bootstrap: str, pipeline: Pipeline) -> list[Made]:
    serde = AvroSerde(Settings().kafka)
    made = []
    for topic in pipeline.topics.lanes():
        for received in read_topic(bootstrap, topic, serde=serde, timeout_s=90).received:
            if isinstance(received.record, ChunkCreated):
                made.append(Made(received.record, topic, int(received.message.partition() or 0),
                                 int(received.message.offset() or 0)))
    return made


def _first_embedded(embedded: Iterable[ChunkResult]) -> dict[tuple[str, int], datetime]:
    """When each chunk was first embedded (a kill -9 runs some again)."""
    first: dict[tuple[str, int], datetime] = {}
    for e in embedded:
        key = (e.doc_id, e.chunk_index)
        first[key] = min(first.get(key, e.embedded_at), e.embedded_at)
    return first


def _ahead_in_its_partitions(job: Job, made: list[Made], embedded: list[ChunkResult]) -> int:
    """The most chunks of other jobs ahead of ``job``'s last chunk in one of its partitions and not embedded yet
    when ``job``'s first chunk was made: what first in, first out makes it wait for at least."""
    start = min(m.chunk.created_at for m in made if m.chunk.job_id == job.job_id)
    done_at = _first_embedded(embedded)
    most = 0
    for partition in {(m.topic, m.partition) for m in made if m.chunk.job_id == job.job_id}:
        last = max(m.offset for m in made if m.chunk.job_id == job.job_id and (m.topic, m.partition) == partition)
        most = max(most, sum(1 for m in made if (m.topic, m.partition) == partition and m.offset < last
                             and m.chunk.job_id != job.job_id
                             and done_at.get((m.chunk.doc_id, m.chunk.chunk_index), start) >= start))
    return most


def _completed_once(bootstrap: str, pipeline: Pipeline, store: ResultStore, *jobs: Job) -> None:
    """Every document of ``jobs`` has one DocumentCompleted (read_committed), completed, and all its chunk rows."""
    docs = {row.doc_id for job in jobs for row in store.iter_job_documents(job.job_id)}
    records = read_topic(bootstrap, pipeline.topics.completed, serde=AvroSerde(Settings().kafka), timeout_s=90).records
    completed = [r for r in records if isinstance(r, DocumentCompleted) and r.doc_id in docs]
    per_doc = Counter(r.doc_id for r in completed)
    assert set(per_doc) == docs and set(per_doc.values()) == {1}, per_doc
    assert {r.status for r in completed} == {"completed"}
    model = Settings().inference.model_id
    for record in completed:
        assert store.count_chunks(record.doc_id, model) == record.chunk_count, record.doc_id


@dataclass(frozen=True)
class Waited:
    """What one job's chunks waited for: the chunks of others embedded from its first chunk's creation to its
    last chunk's embedding, and those seconds."""

    others: int
    seconds: float
    chunks: int


def _waited(job: Job, created: list[Made], embedded: list[ChunkResult], *, since_last: bool = False) -> Waited:
    """From the job's first chunk's creation (or its last's, ``since_last``) to its last chunk's embedding."""
    made = [m.chunk.created_at for m in created if m.chunk.job_id == job.job_id]
    start = max(made) if since_last else min(made)
    end = max(e.embedded_at for e in embedded if e.job_id == job.job_id)
    others = {(e.doc_id, e.chunk_index) for e in embedded if e.job_id != job.job_id and start <= e.embedded_at <= end}
    own = {(e.doc_id, e.chunk_index) for e in embedded if e.job_id == job.job_id}
    return Waited(len(others), (end - start).total_seconds(), len(own))


def _chunk_tokens(embedded: list[ChunkResult], *jobs: Job) -> list[int]:
    """The tokens of each chunk of ``jobs`` (a chunk embedded twice counted once)."""
    ids = {job.job_id for job in jobs}
    return list({(e.doc_id, e.chunk_index): e.token_count for e in embedded if e.job_id in ids}.values())


def _chunks_within(tokens: float, sizes: Iterable[int]) -> int:
    """The most chunks of these token ``sizes`` that ``tokens`` can hold: the smallest first."""
    count, total = 0, 0
    for size in sorted(sizes):
        if total + size > tokens:
            break
        count, total = count + 1, total + size
    return count


def _waiting_at(job: Job, at: datetime, created: list[Made], embedded: list[ChunkResult]) -> int:
    """Chunks of ``job`` created by ``at`` and not embedded yet then."""
    done_by = _first_embedded(e for e in embedded if e.job_id == job.job_id)
    return sum(1 for m in created if m.chunk.job_id == job.job_id and m.chunk.created_at <= at
               and done_by.get((m.chunk.doc_id, m.chunk.chunk_index), at) >= at)


def _print_timeline(job: Job, created: list[Made], embedded: list[ChunkResult]) -> None:
    """The batches (by embedded_at) from the job's first chunk's creation to its last's embedding: how many of the
    job's chunks each held, of how many."""
    made = sorted(m.chunk.created_at for m in created if m.chunk.job_id == job.job_id)
    end = max(e.embedded_at for e in embedded if e.job_id == job.job_id)
    batches: dict[datetime, list[int]] = {}
    for e in embedded:
        if made[0] <= e.embedded_at <= end:
            counts = batches.setdefault(e.embedded_at, [0, 0])
            counts[0] += e.job_id == job.job_id
            counts[1] += 1
    shown = " ".join(f"{at.time().isoformat(timespec='milliseconds')}:{own}/{n}"
                     for at, (own, n) in sorted(batches.items()))
    print(f"\n{job.job_id}: chunks made from {made[0].time()} to {made[-1].time()}; batches: {shown}")


@pytest.fixture(scope="module")
def pipeline(kafka_bootstrap: str, cassandra_settings: CassandraSettings,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    root = tmp_path_factory.mktemp("lanes")
    # at least once (the default): a chunk is readable once produced, not at the chunker's next transaction commit
    with running_pipeline(kafka_bootstrap, cassandra_settings, root, "lanes",
                          DOCSTREAM_FAULTS__INFERENCE_DELAY_MS=str(DELAY_MS),
                          DOCSTREAM_FAIRNESS__TENANTS=json.dumps({"g": {"max_documents_in_flight": 2}})) as pipeline:
        yield pipeline


def test_an_interactive_job_passes_a_backfill_that_keeps_its_share_and_nothing_is_lost_to_a_kill_9(
    pipeline: Pipeline, kafka_bootstrap: str, cassandra_store: ResultStore, tmp_path: Path,
) -> None:
    # read_ahead 64, the Q0 of before lanes: a batch job behind a backfill is served as it was then (FIFO), and
    # shows the before beside the after
    pipeline.start(*SERVICES, DOCSTREAM_FAIRNESS__READ_AHEAD="64")
    backfill = _submit(pipeline, _pdfs(tmp_path, "a", BACKFILL_PAGES, 100), "a", "batch")  # over the partitions
    if not FULL:  # the short version: the small jobs come while the backfill runs, not before inference started
        pipeline.until(lambda: pipeline.service("inference").logged("batch_closed") or _any_embedded(
            cassandra_store, backfill), "the backfill to start", 120, poll_s=0.5, alive=SERVICES)
    time.sleep(SMALL_JOBS_AFTER_S)
    after = _submit(pipeline, _pdfs(tmp_path, "b", [1, 1, 1], 200), "b", "interactive")
    before = _submit(pipeline, _pdfs(tmp_path, "c", [1, 1, 1], 300), "c", "batch")
    # where they stand: the batch job behind the backfill's waiting tokens, the interactive job first in its lane
    stand, backfill_row = pipeline.until(lambda: _standing_behind(cassandra_store, pipeline, before, backfill, after),
                                         "the batch job to stand behind the backfill", 60, poll_s=0.2,
                                         alive=SERVICES)
    observed_at, queued = datetime.now(UTC), stand[before.job_id]
    assert queued.lane == "batch" and queued.tokens_ahead is not None
    assert queued.tokens_ahead >= backfill_row.waiting_tokens > 0
    first_in_lane = stand.get(after.job_id)  # None: it already ended
    assert first_in_lane is None or first_in_lane.started or first_in_lane.tokens_ahead == 0
    status = pipeline.cli("status", before.job_id)
    assert status.returncode == 0, status.stdout + status.stderr
    # a fast model may start the batch job while the command runs; one that has not started since waited
    # throughout, and then the command showed it waiting
    row = cassandra_store.get_job(before.job_id)
    still = _standings(cassandra_store, [row] if row is not None else [], pipeline)
    if before.job_id in still and not still[before.job_id].started:
        assert "tokens ahead" in status.stdout, status.stdout
    # the estimated start, once inference has written a rate (every 10 s), if the job still waits then
    timed = pipeline.until(lambda: _estimated(cassandra_store, pipeline, before),
                           "a start estimate, the start or the end", 60, poll_s=0.5, alive=SERVICES)
    pipeline.until(lambda: _done(cassandra_store, after), "the interactive job to complete", 600, poll_s=0.5,
                   alive=SERVICES)
    # kill -9 of inference once another interactive job's chunks exist (the backfill and the batch job may still
    # hold work, or not on a fast machine: nothing below depends on it)
    again = _submit(pipeline, _pdfs(tmp_path, "d", [1, 1, 1], 400), "b", "interactive")
    pipeline.until(lambda: _all_chunked(cassandra_store, again, 3), "the next interactive job to be chunked", 120,
                   poll_s=0.2, alive=SERVICES)
    inference = pipeline.service("inference")
    inference.kill9()
    inference.start(DOCSTREAM_FAIRNESS__READ_AHEAD="64")
    pipeline.until(lambda: _done(cassandra_store, backfill, after, before, again), "every job to complete", 600,
                   poll_s=1.0, alive=SERVICES)

    created, embedded = _created(kafka_bootstrap, pipeline), _results(kafka_bootstrap, pipeline)
    total = sum(1 for m in created if m.chunk.job_id == backfill.job_id)
    assert total >= (2000 if FULL else 1000), f"the backfill made {total} chunks"
    first_b = min(m.chunk.created_at for m in created if m.chunk.job_id == after.job_id)
    waiting = _waiting_at(backfill, first_b, created, embedded)
    interactive, batch = _waited(after, created, embedded), _waited(before, created, embedded)
    last = _waited(after, created, embedded, since_last=True)
    ahead = _ahead_in_its_partitions(before, created, embedded)
    batch_lane = _chunk_tokens(embedded, backfill, before)
    share = _chunks_within(sum(_chunk_tokens(embedded, after)) * SHARE / (1 - SHARE), batch_lane) + 1
    bound = (2 * QUEUE + 3) * BATCH + share + BATCH
    rate = total / (max(e.embedded_at for e in embedded) - min(e.embedded_at for e in embedded)).total_seconds()
    print(f"\nbackfill {total} chunks, {waiting} waiting when the 3-document jobs came {SMALL_JOBS_AFTER_S} s later;"
          f" model {rate:.0f} chunks/s;"
          f" interactive job ({interactive.chunks} chunks): {interactive.others} chunks of others before its last,"
          f" {last.others} after its last was made (bound {bound}), {interactive.seconds:.1f} s; the same job as"
          f" batch ({batch.chunks} chunks): {ahead} ahead of it in its partitions, {batch.others} chunks of others"
          f" before its last, {batch.seconds:.1f} s")
    _print_timeline(after, created, embedded)
    mine = sorted(e.embedded_at for e in embedded if e.job_id == before.job_id)
    print(f"the batch job stood behind {queued.tokens_ahead:,} tokens ({backfill_row.waiting_tokens:,} of the"
          f" backfill's), estimated start {_seconds(queued.start_in_s)} after it was read; its first chunk was"
          f" embedded {(mine[0] - observed_at).total_seconds():.1f} s after, its last"
          f" {(mine[-1] - observed_at).total_seconds():.1f} s after")
    estimated_at, estimate = timed
    if estimate is not None and not estimate.started and estimate.tokens_ahead:
        served, gap = _served(embedded, before, estimated_at, estimate.tokens_ahead)
        print(f"{(estimated_at - observed_at).total_seconds():.1f} s later: {estimate.tokens_ahead:,} tokens ahead,"
              f" estimated start {_seconds(estimate.start_in_s)} after; its first chunk was embedded"
              f" {(mine[0] - estimated_at).total_seconds():.1f} s after, its last"
              f" {(mine[-1] - estimated_at).total_seconds():.1f} s after; the model served that many tokens of"
              f" others in {_seconds(served)}, {gap:.1f} s of it the kill -9 and restart of inference")
    lanes = [row.job_id for topic in Topics(pipeline.prefix).lanes() for row in cassandra_store.list_queue(topic)]
    assert not {backfill.job_id, after.job_id, before.job_id, again.job_id} & set(lanes)  # ended: rows gone
    # the short version's backlog at that moment depends on how long its submits took on a loaded machine
    assert waiting >= (4 if FULL else 1) * bound, "the backfill had a backlog when the small jobs came"
    assert ahead >= bound or not FULL, "the batch job had a backlog ahead of it in its partitions"
    assert last.others <= bound
    # before lanes (and past a 64-chunk read-ahead), a small job waits for the backlog ahead of it in its partitions
    assert batch.others >= ahead - 64 - (2 * QUEUE + 3) * BATCH
    # while the interactive job's chunks ran, the backfill kept at least its guaranteed share
    span = [e for e in embedded if min(x.embedded_at for x in embedded if x.job_id == after.job_id) <= e.embedded_at
            <= max(x.embedded_at for x in embedded if x.job_id == after.job_id)]
    tokens: Counter[str] = Counter()
    for e in span:
        tokens[e.job_id] += e.token_count
    assert tokens[backfill.job_id] >= SHARE * (tokens[backfill.job_id] + tokens[after.job_id]) * 0.9, tokens
    _completed_once(kafka_bootstrap, pipeline, cassandra_store, backfill, after, before, again)
    pipeline.check_alive(*SERVICES)


def test_two_tenants_with_equal_weights_in_one_lane_get_the_model_in_equal_shares(
    pipeline: Pipeline, kafka_bootstrap: str, cassandra_store: ResultStore, tmp_path: Path,
) -> None:
    # both tenants backlogged from the first chunk on: their jobs are chunked while inference is stopped, then
    # inference starts with the default read-ahead (2,048 chunks a lane), which holds both backlogs; submitted
    # while it ran, the second tenant's chunks came into Q0 behind the first's, and the share measured the
    # chunker's order and the start-up as much as the rule
    pipeline.stop("inference")
    for name in ("chunker", "reducer"):
        if not pipeline.service(name).alive():
            pipeline.start(name)
    first = _submit(pipeline, _pdfs(tmp_path, "x", TENANT_PAGES, 400), "x", "batch")
    second = _submit(pipeline, _pdfs(tmp_path, "y", TENANT_PAGES, 500), "y", "batch")
    pipeline.until(lambda: _chunked(cassandra_store, first, second), "both jobs to be chunked", 300,
                   alive=("chunker",), poll_s=0.5)
    pipeline.start("inference")
    pipeline.until(lambda: _done(cassandra_store, first, second), "both jobs to complete", 600, alive=SERVICES,
                   poll_s=1.0)

    embedded = [e for e in _results(kafka_bootstrap, pipeline) if e.job_id in (first.job_id, second.job_id)]
    start = min(e.embedded_at for e in embedded if e.job_id == second.job_id)
    end = min(max(e.embedded_at for e in embedded if e.job_id == job.job_id) for job in (first, second))
    tokens: Counter[str] = Counter()
    for e in embedded:
        if start <= e.embedded_at <= end:
            tokens[e.job_id] += e.token_count
    a, b = tokens[first.job_id], tokens[second.job_id]
    print(f"\nwhile both were backlogged ({(end - start).total_seconds():.1f} s): tenant x {a} tokens, tenant y {b}")
    assert a > 0 and b > 0 and abs(a - b) <= 0.2 * max(a, b), tokens
    _completed_once(kafka_bootstrap, pipeline, cassandra_store, first, second)


def test_a_gradual_admission_completes_a_job_larger_than_its_quota_with_never_more_in_flight(
    pipeline: Pipeline, kafka_bootstrap: str, cassandra_store: ResultStore, tmp_path: Path,
) -> None:
    for name in SERVICES:
        if not pipeline.service(name).alive():
            pipeline.start(name)
    paths = _pdfs(tmp_path, "g", [1] * 6, 600)
    job = Job(f"g-{uuid.uuid4().hex[:8]}", "g", "batch")
    refused = pipeline.cli("submit", *map(str, paths), "--job-id", job.job_id, "--tenant", "g")
    assert refused.returncode == 1 and "quota_exceeded" in refused.stderr, refused.stderr  # 6 > 2: all or nothing
    assert cassandra_store.get_job(job.job_id) is None
    done = pipeline.cli("submit", *map(str, paths), "--job-id", job.job_id, "--tenant", "g", "--admit", "gradually",
                        "--wait", "--timeout", "600", timeout_s=660)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "admitted 2 of 6 documents; waiting on max_documents_in_flight" in done.stderr
    assert "admitted 6 of 6 documents" in done.stderr
    _completed_once(kafka_bootstrap, pipeline, cassandra_store, job)
    today = datetime.now(UTC)
    load = cassandra_store.tenant_load("g", day_of(today))
    assert load.documents_in_flight == 0 and load.enqueued_tokens == 0 and load.tokens_today > 0
