"""The reducer's Faust app: topics, tables, agents and the timer around agents.py (docs/reducer.md)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import faust
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from faust.types import TP

from docstream.avro import AvroSerde
from docstream.errors import ConfigError, DocstreamError, RetryableError
from docstream.kafka.admin import TopicSpec
from docstream.kafka.clients import admin_config
from docstream.logging import get_logger
from docstream.metrics import Metrics
from docstream.settings import KafkaSettings, ReducerSettings
from docstream.topics import Topics
from docstream_reducer import faust_shim
from docstream_reducer.agents import SERVICE, CompletedRelay, DocumentReducer, Incoming, JobReducer, StoreCalls
from docstream_reducer.faust_shim import ReducerWorker, exit_watchdog  # re-exported: main.py's names
from docstream_reducer.probe import spans_with_records
from docstream_reducer.watch import PartitionWatch, Stall, stall_actions
from docstream_reducer.webhook import WebhookNotifier

__all__ = [
    "TABLES",
    "FaustSink",
    "PartitionWatch",
    "Reducer",
    "ReducerWorker",
    "Stall",
    "build_reducer",
    "by_job_topic",
    "check_partitions",
    "exit_watchdog",
    "faust_settings",
    "internal_topic_specs",
    "resolve_producer_idempotence",
]

_log = get_logger(__name__)


def by_job_topic(reducer: ReducerSettings) -> str:
    """The reducer's internal topic of terminal documents keyed by job_id."""
    return f"{reducer.app_id}-documents-by-job-repartition"


TABLES = ("documents", "jobs", "job-documents")
"""The reducer's Faust tables; each has a compacted changelog topic ``<app_id>-<table>-changelog``."""


def internal_topic_specs(kafka: KafkaSettings, reducer: ReducerSettings) -> list[TopicSpec]:
    """Faust's own topics of this reducer, created before the worker starts.

    Faust creates them itself while it starts, but its partition assignor may run first: a
    topic missing at that moment is left out of the assignment ("Ignoring missing topic"),
    and nothing assigns it later. Seen with the repartition topic: the job agent never got a
    partition, and every job stayed `running` although its documents completed.

    Each takes records as large as the reducer's producer sends (``max.message.bytes`` of
    ``kafka.max_message_bytes``, as docstream's other topics): under the broker's default (1 MiB)
    one large table value would be refused, and the reducer would stop at it on every restart.
    """
    app_id = reducer.app_id
    size = _changelog_config(kafka)
    by_job = TopicSpec(by_job_topic(reducer), kafka.partitions, kafka.replication_factor,
                       {"retention.ms": str(kafka.results_retention_ms), **size})
    changelogs = [TopicSpec(f"{app_id}-{table}-changelog", kafka.partitions, kafka.replication_factor,
                            {"cleanup.policy": "compact", **size}) for table in TABLES]
    return [by_job, *changelogs]


def _changelog_config(kafka: KafkaSettings) -> dict[str, str]:
    """Topic configs every internal topic gets beside its own: the record size the producer is allowed."""
    return {"max.message.bytes": str(kafka.max_message_bytes)}


def _credentials(kafka: KafkaSettings) -> Any:
    context = ssl.create_default_context(cafile=kafka.ssl_ca_location) if "SSL" in kafka.security_protocol else None
    if kafka.security_protocol.startswith("SASL"):
        password = kafka.sasl_password.get_secret_value() if kafka.sasl_password is not None else None
        return faust.SASLCredentials(username=kafka.sasl_username, password=password, ssl_context=context,
                                     mechanism=kafka.sasl_mechanism or "PLAIN")
    if context is not None:
        return faust.SSLCredentials(context)
    return None


def faust_settings(kafka: KafkaSettings, reducer: ReducerSettings) -> dict[str, Any]:
    """Keyword arguments of ``faust.App`` for these settings.

    Exactly-once when ``kafka.transactions``, tables in memory rebuilt from their changelog
    topics, Faust's own web server off (the docstream metrics endpoint serves /metrics,
    /healthz, /readyz).
    """
    conf: dict[str, Any] = {
        "broker": [f"kafka://{server.strip()}" for server in kafka.bootstrap_servers.split(",") if server.strip()],
        "store": "memory://",
        "datadir": str(reducer.data_dir),
        "processing_guarantee": "exactly_once" if kafka.transactions else "at_least_once",
        "topic_partitions": kafka.partitions,
        "topic_replication_factor": kafka.replication_factor,
        "broker_session_timeout": kafka.session_timeout_ms / 1000,
        "broker_heartbeat_interval": kafka.heartbeat_interval_ms / 1000,
        "broker_max_poll_interval": kafka.max_poll_interval_ms / 1000,
        "producer_max_request_size": kafka.max_message_bytes,
        "consumer_max_fetch_size": kafka.max_message_bytes,
        "consumer_auto_offset_reset": "earliest",
        "broker_commit_interval": reducer.commit_interval_s,
        "key_serializer": "raw",
        "value_serializer": "raw",
        "web_enabled": False,
        "autodiscover": False,
        "worker_redirect_stdouts": False,
    }
    credentials = _credentials(kafka)
    if credentials is not None:
        conf["broker_credentials"] = credentials
    return conf


def _cluster_metadata(kafka: KafkaSettings, timeout_s: float) -> Any:
    """The broker's metadata (its topics) through a short-lived admin client.

    Raises:
        RetryableError: the broker did not answer.
    """
    try:
        return AdminClient(admin_config(kafka)).list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise RetryableError(f"no cluster metadata: {exc}", code="kafka_timeout") from exc


def resolve_producer_idempotence(kafka: KafkaSettings, reducer: ReducerSettings) -> bool:
    """Whether the reducer's producer is idempotent, logged as ``reducer_producer_idempotence``.

    Exactly-once producers are transactional, hence idempotent, whatever the setting says; at-least-once
    ones follow ``reducer.idempotent_producer``: ``auto`` and ``on`` are idempotent, ``off`` is not.
    """
    mode = reducer.idempotent_producer
    idempotent = kafka.transactions or mode != "off"
    _log.info("reducer_producer_idempotence", idempotent=idempotent, mode=mode, transactions=kafka.transactions)
    return idempotent


def check_partitions(kafka: KafkaSettings, *, timeout_s: float = 15.0) -> None:
    """Refuse exactly-once unless both result topics and the completed and mapped topics have the same partition
    count.

    A DocumentCompleted goes to its input's partition number so that it joins that partition's
    transaction; with different counts that is impossible. Both result topics (``Topics.result_topics``: the
    documents agent reads the legacy one too, for one release) are inputs.

    Raises:
        ConfigError: the counts differ while ``kafka.transactions`` is on.
        RetryableError: the broker did not answer.
    """
    if not kafka.transactions:
        return
    topics = Topics(kafka.topic_prefix)
    metadata = _cluster_metadata(kafka, timeout_s)
    counts = {name: len(metadata.topics[name].partitions) if name in metadata.topics else 0
              for name in (*topics.result_topics(), topics.completed, topics.mapped)}
    if len(set(counts.values())) != 1:
        raise ConfigError(f"exactly-once needs equal partition counts, got {counts}", code="partitions_mismatch")


class FaustSink:
    """Produces through the app's producers and waits for each acknowledgement.

    ``transactional=True`` goes through Faust's transaction manager under exactly-once (the record
    joins the transaction of its partition); everything else through the plain producer.
    """

    def __init__(self, app: faust.App) -> None:
        self._app = app

    async def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        *,
        partition: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
        transactional: bool = False,
    ) -> None:
        """Produce one record; returns once the broker acknowledged it."""
        producer: Any = await self._app.maybe_start_producer() if transactional else self._app.producer
        pending = await producer.send(topic, key, value, partition, None, headers)
        await pending


def _incoming(event: Any) -> Incoming:
    message = event.message
    return Incoming(topic=message.topic, partition=message.partition, offset=message.offset,
                    timestamp_ms=int(message.timestamp * 1000), key=message.key, value=message.value)


@dataclass
class Reducer:
    """The built app and its parts (main.py runs ``app`` under a faust Worker)."""

    app: faust.App
    documents: DocumentReducer
    jobs: JobReducer
    ready: Callable[[], bool]


def build_reducer(
    kafka: KafkaSettings,
    reducer: ReducerSettings,
    *,
    custom_tasks: Mapping[str, str],
    store: StoreCalls,
    serde: AvroSerde,
    webhooks: WebhookNotifier | None,
    metrics: Metrics,
    clock: Callable[[], float],
    on_stuck: Callable[[Stall], None] | None = None,
    idempotent_producer: bool,
    limited: Callable[[str], bool] | None = None,
) -> Reducer:
    """Build the Faust app: three agents, three tables, the status timer and the partition watch.

    Args:
        kafka: the brokers, topics and delivery (``transactions``: exactly-once).
        reducer: the app id, its data folder and timings.
        custom_tasks: the user tasks by name (``tasks.custom``), whose folds the documents agent loads.
        on_stuck: called when a stalled partition did not move after a re-fetch either (the
            process restarts itself: main.py); None keeps re-fetching.
        idempotent_producer: at-least-once sends are idempotent (``resolve_producer_idempotence``).
        limited: whether a tenant has quotas (``FairnessSettings.limited``): its ended documents leave its
            admission ledger (docs/operations.md "Quotas and admission"); None: no tenant has.
    """
    topics = Topics(kafka.topic_prefix)
    app = faust.App(reducer.app_id, **faust_settings(kafka, reducer))
    faust_shim.apply(app, transaction_timeout_s=reducer.transaction_timeout_s,
                     idempotent=idempotent_producer, span_probe=partial(spans_with_records, kafka))
    partitions = kafka.partitions
    table_args: dict[str, Any] = {
        "partitions": partitions,
        "schema": faust.Schema(key_serializer="json", value_serializer="json"),
        "extra_topic_configs": _changelog_config(kafka),  # where Faust creates a changelog itself
    }
    documents_table, jobs_table, job_documents_table = (app.Table(name, **table_args) for name in TABLES)

    # both result topics, for one release: inference of the version before still writes the legacy one during a
    # rolling upgrade, and what is on it at the upgrade is reduced too (docs/messaging.md "Renamed: ChunkEmbedded
    # → ChunkResult"). One agent, one topic group: a document's records of both land in one partition number.
    results = app.topic(*topics.result_topics(), key_serializer="raw", value_serializer="raw")
    completed = app.topic(topics.completed, key_serializer="raw", value_serializer="raw")
    chunked = app.topic(topics.chunked, key_serializer="raw", value_serializer="raw")
    by_job = app.topic(by_job_topic(reducer), key_serializer="raw", value_serializer="raw", internal=True,
                       partitions=partitions, retention=kafka.results_retention_ms / 1000)
    sink = FaustSink(app)
    documents = DocumentReducer(documents_table, serde, store, sink, topics.completed,
                                document_step_topic=topics.mapped, metrics=metrics,
                                exactly_once=kafka.transactions, custom_tasks=dict(custom_tasks),
                                max_message_bytes=kafka.max_message_bytes)
    relay = CompletedRelay(serde, sink, by_job.get_topic_name(), metrics=metrics)
    jobs = JobReducer(jobs_table, job_documents_table, serde, store, sink, topics.jobs,
                      by_job_topic=by_job.get_topic_name(), throttle_s=reducer.job_status_interval_s,
                      clock=clock, webhooks=webhooks, metrics=metrics, limited=limited, topics=topics)
    started = {"ready": False}

    stall_s = reducer.stall_timeout_s
    watch = PartitionWatch(stall_s, clock)

    async def _failed(name: str, msg: Incoming, exc: Exception) -> None:
        """The agent loop's end: log once, stop the worker (no commit past the record)."""
        _log.error("reducer_agent_failed", agent=name, topic=msg.topic, partition=msg.partition,
                   offset=msg.offset, error_code=getattr(exc, "code", "unhandled_error"),
                   error=str(exc)[:500], exc_info=exc)
        await app.crash(exc)

    def _taken(msg: Incoming) -> None:
        metrics.records_in.labels(SERVICE, msg.topic).inc()
        watch.handled(msg.topic, msg.partition, msg.offset)
        watch.started(id(msg))

    def _agent(handle: Callable[[Incoming], Any], name: str) -> Callable[[Any], Any]:
        async def run(stream: Any) -> None:
            async for event in stream.events():
                msg = _incoming(event)
                _taken(msg)
                try:
                    await handle(msg)
                except Exception as exc:
                    await _failed(name, msg, exc)
                    raise
                finally:
                    watch.finished(id(msg))

        run.__name__ = run.__qualname__ = name
        return run

    async def _documents(stream: Any) -> None:
        """The documents agent: batches of records (``reducer.max_batch_size``, ``max_latency_ms``), each
        acknowledged once the whole batch is folded and its states written (docs/reducer.md "Batches")."""
        async for events in stream.noack_take(reducer.max_batch_size, within=reducer.max_latency_ms / 1000):
            msgs = [_incoming(event) for event in events]
            at = [0]

            def entering(index: int, events: Sequence[Any] = events, at: list[int] = at) -> None:
                at[0] = index
                faust_shim.make_current(events[index])

            for msg in msgs:
                _taken(msg)
            try:
                await documents.handle_batch(msgs, entering)
            except Exception as exc:  # nothing of the batch is acknowledged
                await _failed("documents", msgs[at[0]], exc)
                raise
            finally:
                for msg in msgs:
                    watch.finished(id(msg))
            for event in events:
                await stream.ack(event)

    app.agent(results, name="documents")(_documents)
    app.agent(completed, name="completed-relay")(_agent(relay.handle, "completed-relay"))
    app.agent(chunked, name="chunked-relay")(_agent(relay.handle, "chunked-relay"))
    app.agent(by_job, name="jobs")(_agent(jobs.handle, "jobs"))

    @documents_table.on_recover
    async def _markers_recovered() -> None:
        _log.info("reducer_state_recovered", markers=documents.rebuild_markers(), documents=len(documents_table),
                  jobs=len(jobs_table))
        started["ready"] = True

    async def _flush() -> None:
        await jobs.flush()

    app.timer(reducer.job_status_interval_s, name="job-status-flush")(_flush)
    sources = {*topics.result_topics(), topics.completed, topics.chunked, by_job.get_topic_name()}

    async def _watch_partitions() -> None:
        consumer: Any = app.consumer
        if app.rebalancing or app.in_recovery or not started["ready"]:
            watch.reset()  # faust pauses the sources meanwhile
            return
        tps = [tp for tp in consumer.assignment() if tp.topic in sources]
        ends = await consumer.highwaters(*tps) if tps else {}
        committed = faust_shim.committed_offsets(consumer, tps)
        stalls = watch.stalled(
            {(tp.topic, tp.partition): end for tp, end in ends.items() if end is not None},
            {(tp.topic, tp.partition): offset for tp, offset in committed.items()},
        )
        if stalls:
            await _act_on(consumer, stalls)

    refetched: dict[tuple[str, int], int] = {}  # partition → the stall period of its last re-fetch

    async def _act_on(consumer: Any, stalls: list[Stall]) -> None:
        spans = [(s.topic, s.partition, s.committed, s.end) for s in stalls]
        try:
            holds = await asyncio.get_running_loop().run_in_executor(
                None, partial(spans_with_records, kafka, spans))
        except DocstreamError as exc:
            _log.warning("partition_probe_failed", error_code=exc.code, error=exc.message)
            return
        for action in stall_actions(stalls, holds, refetched, can_restart=on_stuck is not None):
            stall = action.stall
            tp = TP(stall.topic, stall.partition)
            if action.decision == "quiet":
                watch.quiet(stall.topic, stall.partition, stall.end)
                continue
            fields = {"topic": stall.topic, "partition": stall.partition, "committed": stall.committed,
                      "end": stall.end, "stalled_s": stall.periods * stall_s,
                      "faust": faust_shim.partition_state(consumer, tp)}
            if action.decision == "restart" and on_stuck is not None:
                _log.error("partition_stuck", action="restart", **fields)
                on_stuck(stall)
                return
            _log.warning("partition_stalled_refetching", **fields)
            refetched[(stall.topic, stall.partition)] = stall.periods
            await consumer.seek(tp, stall.committed)
            consumer.resume_partitions({tp})

    app.timer(stall_s / 4, name="partition-watch")(_watch_partitions)

    async def _log_assignment(_app: Any, /, *args: Any, signal: Any, **_: Any) -> None:
        assigned: set[TP] = args[0] if args else set()
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(tp for tp in assigned if tp.topic in sources):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        _log.info("partitions_assigned", partitions=by_topic)

    app.on_partitions_assigned.connect(_log_assignment)  # every rebalance leaves its line in the log
    return Reducer(app=app, documents=documents, jobs=jobs, ready=lambda: started["ready"])
