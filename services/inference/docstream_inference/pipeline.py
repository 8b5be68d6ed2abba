"""InferencePipeline: docstream.chunks.interactive + docstream.chunks → micro-batched model → store →
docstream.chunks.results → commit.

The calling thread owns the Kafka consumer of both lanes' topics: it polls and decodes, feeds Q0 (a ``FairInbox``:
the batch stage takes interactive chunks first, keeps the batch lane's guaranteed share, and serves tenants by
deficit round robin), pauses a lane's partitions while its part of Q0 is full and resumes them once it has drained
to half (``docstream_inference.flow``), serves rebalances, and commits. The other stages run on their own threads
(docstream_inference.stages). Commits come from the AckLedger only: a partition is committed up to its lowest record
whose store write and ChunkResult delivery (and DLQ delivery, for a failed chunk) are not both acknowledged;
membership, rebalances, commits and the lag gauge are the Committer's (docstream.kafka.committer). ``stop()``
(SIGTERM) drains: no more polling, the chunks read ahead and not batched yet are left uncommitted to the next
consumer, the open batch closes, every batch in flight is finished and committed, then ``run`` returns. A revoke
leaves the revoked partitions' unbatched chunks the same way. A fatal fault ends ``run`` with FatalError after
committing only what is done.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import structlog
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from docstream.avro.serde import AvroSerde
from docstream.errors import DocstreamError, FatalError, SchemaError
from docstream.kafka.attempts import run_with_retries
from docstream.kafka.clients import ReliableProducer, kafka_error
from docstream.kafka.committer import Committer, RebalanceHooks
from docstream.kafka.dlq import DlqRouter, error_code_of
from docstream.kafka.offsets import TopicPartitionKey
from docstream.lanes import BATCH, INTERACTIVE, LANES, Lane
from docstream.logging import get_logger
from docstream.metrics import Metrics
from docstream.records import ChunkCreated
from docstream.settings import FairnessSettings, InferenceSettings, KafkaSettings, RetrySettings
from docstream.store.base import ResultStore
from docstream.tasks.base import EMBED, Task, always_reuses_stored, bind_task_metrics
from docstream.topics import Topics
from docstream_inference.batching import Batcher, BatchPolicy
from docstream_inference.flow import Flow, LaneState, fetch_size, flow
from docstream_inference.handler import request_for
from docstream_inference.ledger import DLQ, AckLedger
from docstream_inference.stages import (
    FLUSH,
    Assignments,
    BatchStage,
    BatchStats,
    ConsumedChunk,
    FairInbox,
    ModelBatch,
    ModelStage,
    ResultBatch,
    StageHooks,
    StoredResults,
    ThroughputWriter,
    WriteStage,
)

__all__ = ["SERVICE", "InferencePipeline", "group_id"]

SERVICE = "inference"
_log = get_logger(__name__)
_POLL_S = 0.1
_MAX_FETCH = 500
_ROOM_SLICE_S = 0.02  # a wait for room in Q0 looks for a stop this often (a take from Q0 ends it at once)
_WAITING_EVERY_S = 1.0  # the lanes' waiting-tokens gauges are set this often
_PAUSE_AFTER_S = 0.1  # a lane's Q0 full this long: pause its partitions (a shorter stall just stops fetching)
_FETCH_WAIT_MAX_MS = 100  # at most: a lane resumed waits for the fetch in flight, held by the broker this long


def group_id(kafka: KafkaSettings, inference: InferenceSettings, task: str = EMBED) -> str:
    """The consumer group the inference processes of ``task`` join: ``inference.group_id``, else
    ``<prefix>-inference`` for embed and ``<prefix>-inference-<task>`` for the others (a group per task)."""
    return inference.group_id or Topics(kafka.topic_prefix).inference_group(task)


def reuse_stored(inference: InferenceSettings, task: object) -> bool:
    """Whether the pipeline reads a batch's stored rows before running ``task`` (its class or runner):
    ``inference.reuse_stored``, and always for a task that declares it (``TaskClass.always_reuse_stored``:
    generate, whose every answer is a model call worth far more than one read per batch)."""
    return inference.reuse_stored or always_reuses_stored(task)


class InferencePipeline:
    """The inference service's pipeline; ``run()`` blocks until stopped or failed.

    Args:
        kafka: the cluster, the topic prefix and the consumer's settings.
        inference: batching, queues, the group id and stored-result reuse.
        retry: the attempts and backoff of decodes, writes and produces.
        task: the loaded (warmed-up) task runner (``docstream.tasks.registry.load_task``); the pipeline
            calls its optional ``bind_metrics``. Whoever loaded it closes it (``close_task``) after ``run``.
        store: the result store (migrated).
        serde: Avro serde for ChunkCreated in and ChunkResult out.
        metrics: where to record; default: a private registry.
        producer: a producer to use (not closed here); default: one of its own.
        drain_timeout_s: longest a stop waits for the records in flight.
        revoke_grace_s: longest a revoke waits for the revoked partitions' records in flight.
        commit_interval_s: least time between two periodic (asynchronous) commits.
        clock: monotonic seconds (the batcher's clock).
        rejoin_timeout_s: a consumer outside its group (no member id) this long is replaced by a new
            one, as ConsumeLoop does (docs/messaging.md; default: ``kafka.rejoin_timeout_s``).
        static_assignment: ``assign()`` every partition of the chunks topic instead of joining the
            group, as ConsumeLoop's option of that name: no group join delay and no rebalancing, for a
            process that is the only consumer of the topic (``docstream run``). Offsets are still
            committed to the group, after the writes, and read back from it at the start.
        run_unrequested: run every chunk, also those whose job did not ask for the task
            (``tasks.run_unrequested``: a replay of a new task over old chunks).
        hooks: callbacks into the stages (the chaos tests' faults: ``faults.stage_hooks``); none by default.
        fairness: the lanes' rule and read-ahead, and the tenants' weights (``docstream.lanes``).
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        inference: InferenceSettings,
        retry: RetrySettings,
        *,
        task: Task,
        store: ResultStore,
        serde: AvroSerde,
        metrics: Metrics | None = None,
        producer: ReliableProducer | None = None,
        drain_timeout_s: float = 60.0,
        revoke_grace_s: float = 3.0,
        commit_interval_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        rejoin_timeout_s: float | None = None,
        static_assignment: bool = False,
        run_unrequested: bool = False,
        hooks: StageHooks | None = None,
        fairness: FairnessSettings | None = None,
    ) -> None:
        fairness = fairness or FairnessSettings.model_validate({})
        self._kafka = kafka
        self._inference = inference
        self._retry = retry
        self._run_unrequested = run_unrequested
        self._hooks = hooks or StageHooks()
        self._task = task
        self._group_id = group_id(kafka, inference, task.name)
        self._store = store
        self._serde = serde
        self._metrics = metrics or Metrics()
        bind_task_metrics(task, self._metrics, SERVICE)
        self._own_producer = producer is None
        self._producer = producer
        self._drain_timeout_s = drain_timeout_s
        self._revoke_grace_s = revoke_grace_s
        self._commit_interval_s = commit_interval_s
        self._clock = clock
        self._topics = Topics(kafka.topic_prefix)
        self._lane_of: dict[str, Lane] = {self._topics.chunks_interactive: INTERACTIVE, self._topics.chunks: BATCH}
        self._q0 = FairInbox(max(fairness.read_ahead, inference.queue_batches * inference.max_batch_size),
                             batch_share=fairness.batch_share, quantum=fairness.quantum_tokens,
                             weights=fairness.weights())
        self._held: dict[Lane, deque[ConsumedChunk]] = {lane: deque() for lane in LANES}
        self._positions: dict[TopicPartitionKey, tuple[int, int]] = {}  # (generation, next offset) taken
        self._in_counters: dict[str, Any] = {}  # docstream_records_in_total by topic
        self._ledger = AckLedger()
        self._assignments = Assignments()
        self._history: deque[BatchStats] = deque(maxlen=100_000)
        self._stop = threading.Event()
        self._halt = threading.Event()
        self._error: BaseException | None = None
        self._error_lock = threading.Lock()
        self._paused: set[Lane] = set()
        self._full_since: dict[Lane, float] = {}  # since when a lane's Q0 has been full (a long stall pauses it)
        self._assignment_changed = False
        self._waiting_labels: set[tuple[Lane, str]] = set()
        self._waiting_at = clock() - _WAITING_EVERY_S
        self._ready = False
        self._stages: list[Any] = []
        # a lane resumed is fetched once the fetch in flight (a long poll of the partitions at their end) returns
        consumer_kafka = kafka.model_copy(
            update={"fetch_wait_max_ms": min(kafka.fetch_wait_max_ms, _FETCH_WAIT_MAX_MS)})
        self._committer = Committer(
            consumer_kafka, group_id=self._group_id, topics=list(self._topics.lanes()), service=SERVICE,
            book=self._ledger, metrics=self._metrics, clock=clock, static_assignment=static_assignment,
            rejoin_timeout_s=rejoin_timeout_s, member_id=self._member_id,
            hooks=RebalanceHooks(assigned=self._assigned, revoking=self._finish_revoked,
                                 dropped=self._assignments.revoke, replaced=self._replaced),
        )

    @property
    def consumers_replaced(self) -> int:
        """How many consumers were replaced for staying outside their group."""
        return self._committer.consumers_replaced

    @property
    def task(self) -> Task:
        """The task runner the pipeline runs."""
        return self._task

    @property
    def ready(self) -> bool:
        """Subscribed and running (for /readyz)."""
        return self._ready and self._error is None

    @property
    def assignment(self) -> list[TopicPartitionKey]:
        """The partitions this process holds now."""
        return self._assignments.partitions()

    @property
    def batch_history(self) -> list[BatchStats]:
        """Every batch the batcher closed: size, tokens, close reason and the oldest record's wait."""
        return list(self._history)

    @property
    def ledger(self) -> AckLedger:
        """The acknowledgement ledger (what is done, what is committable)."""
        return self._ledger

    def stop(self) -> None:
        """Drain and finish (SIGTERM); safe from a signal handler or another thread."""
        self._stop.set()

    def run(self) -> None:
        """Consume until ``stop()``; drain; commit; close.

        Raises:
            FatalError: a stage failed (a transient fault outlived its retries, a bug, a fatal client error).
        """
        # not ``or``: an empty ReliableProducer is falsy (__len__), and a given one must be used, not leaked
        producer = self._producer if self._producer is not None else ReliableProducer(self._kafka, client_id=SERVICE)
        self._committer.start()
        writer = self._start_stages(producer)
        try:
            self._ready = True
            _log.info("inference_started", group_id=self._group_id, topics=self._topics.lanes(), task=self._task.name,
                      model_id=self._task.model_id)
            self._consume(writer)
            if self._error is None:
                self._drain()
        except DocstreamError as exc:
            self._fail(exc)
        finally:
            self._ready = False
            self._close(producer)
        if self._error is not None:
            error = self._error
            if isinstance(error, FatalError):
                raise error
            raise FatalError(f"inference stopped: {error}", code=error_code_of(error)) from error

    # -- stages -------------------------------------------------------------------------------

    def _start_stages(self, producer: ReliableProducer) -> WriteStage:
        inference = self._inference
        q1: queue.Queue[ModelBatch] = queue.Queue(maxsize=inference.queue_batches)
        q2: queue.Queue[ResultBatch] = queue.Queue(maxsize=inference.queue_batches)
        policy = BatchPolicy(inference.max_batch_size, inference.max_batch_tokens, inference.max_latency_ms / 1000,
                             inference.length_pool_batches)
        common: dict[str, Any] = {"metrics": self._metrics, "service": SERVICE, "halt": self._halt,
                                  "on_error": self._fail}
        writer = WriteStage(
            inbox=q2, store=self._store, producer=producer, dlq=DlqRouter(producer, SERVICE),
            serialize=self._serde.serialize, results_topic=self._topics.results, ledger=self._ledger,
            assignments=self._assignments, retry=self._retry, after_write=self._hooks.after_write,
            rate=ThroughputWriter(self._store, self._group_id, clock=self._clock), **common,
        )
        model = ModelStage(inbox=q1, outbox=q2, task=self._task, attempts=self._retry.handler_attempts,
                           on_embedded=self._hooks.on_embedded, **common)
        self._stages = [
            BatchStage(inbox=self._q0, outbox=q1, batcher=Batcher(policy, self._clock), task=self._task,
                       assignments=self._assignments, history=self._history,
                       stored=StoredResults(self._store, by_chunk_id=reuse_stored(inference, self._task)),
                       model_idle=lambda: model.idle, **common),
            model,
            writer,
        ]
        for stage in self._stages:
            stage.start()
        return writer

    def _fail(self, error: BaseException) -> None:
        with self._error_lock:
            if self._error is None:
                self._error = error
                _log.error("inference_stage_failed", error_code=error_code_of(error), error=str(error)[:500],
                           error_type=type(error).__name__)
        self._halt.set()

    # -- poll + decode ------------------------------------------------------------------------

    def _consume(self, writer: WriteStage) -> None:
        last_commit = self._clock()
        committer = self._committer
        while not self._stop.is_set() and self._error is None:
            committer.watch_membership()
            consumer = committer.consumer
            self._flow_control(consumer)
            last: dict[TopicPartitionKey, int] = {}
            for msg in self._fetch(consumer):
                self._take(msg, writer)
                if msg.error() is None:
                    last[(str(msg.topic()), int(msg.partition() or 0))] = int(msg.offset() or 0)
            committer.observe_lag(last)
            now = self._clock()
            if now - self._waiting_at >= _WAITING_EVERY_S:
                self._observe_waiting()
                self._waiting_at = now
            # periodically, and at once when everything taken is done (the tail of a burst)
            if now - last_commit >= self._commit_interval_s or not self._ledger.pending_count():
                committer.commit(asynchronous=True)
                last_commit = now

    def _observe_waiting(self) -> None:
        """The gauges of the tokens read ahead per lane and tenant; a tenant with none waiting leaves them."""
        gauge = self._metrics.lane_waiting_tokens
        waiting = self._q0.waiting_tokens()
        for lane, tenant in self._waiting_labels - set(waiting):
            gauge.remove(SERVICE, lane, tenant)
        for (lane, tenant), tokens in waiting.items():
            gauge.labels(SERVICE, lane, tenant).set(tokens)
        self._waiting_labels = set(waiting)

    def _member_id(self, consumer: Consumer) -> str | None:
        """The consumer's group member id; empty or None while it is outside the group."""
        return consumer.memberid()

    def _replaced(self) -> None:
        self._paused.clear()  # a new consumer pauses nothing; flow control decides again
        self._metrics.paused.labels(SERVICE).set(0)
        for lane in LANES:
            self._metrics.lane_paused.labels(SERVICE, lane).set(0)

    def _backlog(self, lane: Lane) -> int:
        return self._q0.size(lane) + len(self._held[lane])

    def _release_held(self) -> None:
        for held in self._held.values():
            while held:
                try:
                    self._q0.put_nowait(held[0])
                except queue.Full:
                    break
                held.popleft()

    def _fetch(self, consumer: Consumer) -> list[Message]:
        self._release_held()
        open_lanes = [lane for lane in LANES if lane not in self._paused]
        if not open_lanes:
            msg = consumer.poll(0)  # serves rebalances and commits; paused partitions return nothing
            if msg is not None:
                return [msg]
            self._wait_for_room()
            return []
        # a fetch takes what the emptiest open lane has room for: a full lane's records ahead of the other's in
        # librdkafka's queue are held (_take), and that lane paused at once (_flow_control)
        room = fetch_size([self._lane_state(lane) for lane in open_lanes], self._q0.capacity, _MAX_FETCH)
        if room <= 0:
            # every open lane full. A short stall: librdkafka keeps its prefetched records (a pause would drop
            # them); a long one pauses the full lanes (_flow_control)
            now = self._clock()
            for lane in open_lanes:
                if self._backlog(lane) >= self._q0.capacity:
                    self._full_since.setdefault(lane, now)  # the stall starts now, not when flow control next looks
            self._wait_for_room()
            return []
        return list(consumer.consume(num_messages=room, timeout=_POLL_S))

    def _wait_for_room(self) -> None:
        """Backpressure: wait (at most one poll interval) until a full lane has drained to the resume mark.

        The wait ends at the take that brings the lane down to the mark (``FairInbox.wait_for_room``), not at
        the end of a sleep: the stages drain a full Q0 in milliseconds, and a consumer that slept a
        whole poll interval would leave the model idle that long. It looks for a halt or a stop
        every ``_ROOM_SLICE_S``.
        """
        deadline = self._clock() + _POLL_S
        levels = {lane: self._q0.capacity // 2 - len(self._held[lane]) for lane in LANES
                  if lane in self._paused or self._backlog(lane) >= self._q0.capacity}
        while not self._halt.is_set() and not self._stop.is_set():
            left = deadline - self._clock()
            if left <= 0 or self._q0.wait_for_room(levels, min(left, _ROOM_SLICE_S)):
                return

    def _flow_control(self, consumer: Consumer) -> None:
        now = self._clock()
        changed = self._assignment_changed
        self._assignment_changed = False
        for lane in LANES:
            backlog = self._backlog(lane)
            if backlog < self._q0.capacity:
                self._full_since.pop(lane, None)
            else:
                self._full_since.setdefault(lane, now)
            action = flow(self._lane_state(lane), self._q0.capacity, now, _PAUSE_AFTER_S)
            if action is not Flow.KEEP:
                self._set_paused(consumer, lane, action is Flow.PAUSE)
            elif changed:
                # librdkafka keeps an application pause across unassign/assign: partitions lost while
                # paused come back paused. New partitions get their lane's state, whichever it is.
                partitions = self._lane_partitions(consumer, lane)
                if partitions:
                    (consumer.pause if lane in self._paused else consumer.resume)(partitions)

    def _lane_state(self, lane: Lane) -> LaneState:
        return LaneState(self._backlog(lane), len(self._held[lane]), lane in self._paused,
                         self._full_since.get(lane))

    def _lane_partitions(self, consumer: Consumer, lane: Lane) -> list[Any]:
        return [tp for tp in consumer.assignment() if self._lane_of.get(tp.topic) == lane]

    def _set_paused(self, consumer: Consumer, lane: Lane, paused: bool) -> None:
        partitions = self._lane_partitions(consumer, lane)
        if paused:
            if partitions:
                consumer.pause(partitions)
            self._paused.add(lane)
            self._metrics.pauses.labels(SERVICE).inc()
        else:
            if partitions:
                consumer.resume(partitions)
                self._fetch_now(consumer, partitions)
            self._paused.discard(lane)
        self._metrics.paused.labels(SERVICE).set(1 if self._paused else 0)
        self._metrics.lane_paused.labels(SERVICE, lane).set(1 if paused else 0)
        _log.debug("consumer_paused" if paused else "consumer_resumed", lane=lane, partitions=len(partitions),
                   backlog=self._q0.size(lane))

    def _fetch_now(self, consumer: Consumer, partitions: list[Any]) -> None:
        """Seek resumed partitions to the positions taken: after a resume alone, librdkafka fetched them again
        only at its next fetch decision (measured on the lanes scenario: up to 0.86 s, the model fed from the
        other lane meanwhile); a seek starts the fetch at once. A partition not read yet in this assignment
        starts from its committed offset either way."""
        for tp in partitions:
            key: TopicPartitionKey = (tp.topic, tp.partition)
            taken = self._positions.get(key)
            if taken is None or taken[0] != self._assignments.generation(key):
                continue
            try:
                consumer.seek(TopicPartition(tp.topic, tp.partition, taken[1]))
            except KafkaException as exc:  # revoked meanwhile: the resume alone fetches it, later
                _log.debug("consumer_seek_skipped", topic=tp.topic, partition=tp.partition, error=str(exc))

    def _take(self, msg: Message, writer: WriteStage) -> None:
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                return
            error = kafka_error(err, f"consume {msg.topic()}")
            if isinstance(error, FatalError):
                raise error
            _log.warning("consumer_error", error_code=error.code, error=error.message)
            return
        tp: TopicPartitionKey = (str(msg.topic()), int(msg.partition() or 0))
        offset = int(msg.offset() or 0)
        generation = self._assignments.generation(tp)
        if generation is None:
            return  # a fetch of a partition revoked meanwhile: its new owner reads it
        seen = self._positions.get(tp)
        if seen is not None and seen[0] == generation and offset < seen[1]:
            # librdkafka may fetch a partition again from its committed offset after pause/resume
            # (when paused before the app position was known); those records are already in flight
            return
        self._positions[tp] = (generation, offset + 1)
        counter = self._in_counters.get(tp[0])
        if counter is None:  # found once per topic: a lookup per record costs more than the count
            counter = self._in_counters[tp[0]] = self._metrics.records_in.labels(SERVICE, tp[0])
        counter.inc()
        outcome = run_with_retries(lambda: self._decode(msg), retry=self._retry, wait=self._halt.wait)
        if outcome.interrupted:
            return
        if outcome.error is not None or outcome.value is None:
            self._dead_letter_input(msg, tp, offset, outcome.error, outcome.attempts, writer)
            return
        request = request_for(outcome.value, self._task.name, run_unrequested=self._run_unrequested)
        if request is None:
            self._ledger.skip(tp, offset)  # the job did not ask for this task: nothing to do, nothing owed
            return
        self._ledger.track(tp, offset)
        lane = self._lane_of.get(tp[0], BATCH)
        work = ConsumedChunk(tp, offset, generation, msg.key(), msg.value() or b"", outcome.value, self._clock(),
                             request, lane)
        if self._held[lane]:
            self._held[lane].append(work)  # behind the lane's earlier ones
            return
        try:
            self._q0.put_nowait(work)
        except queue.Full:
            self._held[lane].append(work)  # fetched before the pause took effect; bounded by one fetch

    def _decode(self, msg: Message) -> ChunkCreated:
        value = msg.value()
        if not value:
            raise SchemaError("record has no value", code="schema_empty", raw=None)
        record = self._serde.deserialize(value, str(msg.topic()))
        if not isinstance(record, ChunkCreated):
            raise SchemaError(f"expected ChunkCreated, got {type(record).__name__}", code="schema_unexpected_record",
                              raw=value)
        return record

    def _dead_letter_input(
        self, msg: Message, tp: TopicPartitionKey, offset: int, error: BaseException | None, attempts: int,
        writer: WriteStage,
    ) -> None:
        failure = error or SchemaError("undecodable record", code="schema_error")
        structlog.contextvars.bind_contextvars(topic=tp[0], partition=tp[1], offset=offset)
        _log.warning("record_undecodable", error_code=error_code_of(failure))
        structlog.contextvars.unbind_contextvars("topic", "partition", "offset")
        self._ledger.track(tp, offset, (DLQ,))
        self._metrics.records_failed.labels(SERVICE, error_code_of(failure)).inc()
        writer.dead_letter(tp, offset, msg.key(), msg.value(), failure, attempts=attempts)

    # -- rebalances (the Committer's hooks) --------------------------------------------------

    def _assigned(self, tps: list[TopicPartitionKey]) -> None:
        self._assignments.assign(tps)
        self._assignment_changed = True

    def _finish_revoked(self, tps: list[TopicPartitionKey]) -> None:
        """Revoke: the revoked partitions' records not batched yet are left to their next owner (they are not
        committed); the stages get a grace period to finish the ones already batched."""
        revoked = set(tps)
        left = len(self._q0.remove(lambda work: work.tp in revoked))
        for lane, held in self._held.items():
            kept = [work for work in held if work.tp not in revoked]
            left += len(held) - len(kept)
            self._held[lane] = deque(kept)
        deadline = self._clock() + self._revoke_grace_s
        while self._ledger.pending_count(tps) > left and self._clock() < deadline and not self._halt.is_set():
            self._halt.wait(0.02)

    # -- drain and close ----------------------------------------------------------------------

    def _drain(self) -> None:
        _log.info("inference_draining", in_flight=self._ledger.pending_count())
        consumer = self._committer.consumer
        consumer.pause(consumer.assignment())
        deadline = self._clock() + self._drain_timeout_s
        # the chunks read ahead and not batched yet are left, uncommitted, to the next consumer: a stop waits for
        # the batches in flight only, not for a lane's whole read-ahead
        left = len(self._q0.remove(lambda _work: True)) + sum(len(held) for held in self._held.values())
        for held in self._held.values():
            held.clear()
        self._q0.put_control(FLUSH)
        last_commit = self._clock()
        while self._error is None and self._clock() < deadline:
            if self._ledger.pending_count() <= left:
                break
            consumer.poll(_POLL_S)  # serves rebalances and commit callbacks; nothing is taken any more
            if self._clock() - last_commit >= self._commit_interval_s:
                self._committer.commit(asynchronous=True)
                last_commit = self._clock()
        unfinished = self._ledger.pending_count() - left
        if unfinished > 0:
            _log.warning("inference_drain_incomplete", in_flight=unfinished)
        elif left:
            _log.info("inference_left_unbatched", records=left)

    def _close(self, producer: ReliableProducer) -> None:
        self._halt.set()
        for stage in self._stages:
            stage.join(timeout=30)
        try:
            producer.flush(10)  # delivery callbacks of the last outputs: their records become done
        except DocstreamError as exc:
            _log.error("producer_flush_failed", error_code=exc.code, error=exc.message)
        self._committer.close()
        if self._own_producer:
            producer.close(0)
        _log.info("inference_stopped", in_flight=self._ledger.pending_count(), batches=len(self._history))
