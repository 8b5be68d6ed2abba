"""`docstream inference` (settings → logging → model → topics, store → pipeline) and `docstream document-stage`
(the generate task's document-level step: docstream_inference.document_stage). Wiring only."""

from __future__ import annotations

from docstream.avro.serde import AvroSerde
from docstream.kafka.admin import ensure_topics
from docstream.kafka.clients import ReliableProducer
from docstream.kafka.loop import ConsumeLoop
from docstream.logging import get_logger
from docstream.metrics import Metrics
from docstream.records import DocumentCompleted
from docstream.service import ServiceHost, run_service
from docstream.settings import Settings
from docstream.store import ResultStore
from docstream.tasks.base import DocumentStepTask, Task, TaskContext, bind_task_metrics, close_task
from docstream.tasks.generate import GenerateTask
from docstream.tasks.registry import load_task
from docstream.topics import Topics
from docstream_inference import document_stage
from docstream_inference.document_stage import DocumentStage
from docstream_inference.faults import stage_hooks, with_faults
from docstream_inference.pipeline import SERVICE, InferencePipeline

__all__ = ["build_document_stage", "build_inference", "document_stage_main", "load_model", "main"]

_log = get_logger(__name__)


def load_model(settings: Settings, task: str | None = None) -> Task:
    """Load (and warm up) ``task`` (default ``tasks.task``), with the fault injection of ``settings.faults``."""
    return with_faults(load_task(task or settings.tasks.task, TaskContext(settings.inference, settings.tasks)),
                       settings.faults)


def build_inference(
    settings: Settings, *, store: ResultStore, metrics: Metrics, task: Task | None = None,
    static_assignment: bool = False, producer: ReliableProducer | None = None,
) -> InferencePipeline:
    """The pipeline on ``store`` (migrated, topics ensured) running ``task``, or ``tasks.task`` loaded here.

    ``static_assignment`` takes every partition without a group join (``docstream run`` only);
    ``producer`` (not closed by the pipeline) replaces the pipeline's own.
    """
    return InferencePipeline(settings.kafka, settings.inference, settings.retry,
                             task=task if task is not None else load_model(settings),
                             store=store, serde=AvroSerde(settings.kafka), metrics=metrics, producer=producer,
                             static_assignment=static_assignment, run_unrequested=settings.tasks.run_unrequested,
                             hooks=stage_hooks(settings.faults), fairness=settings.fairness)


def main(settings: Settings) -> int:
    """Run the inference service until SIGTERM/SIGINT (0) or a fatal fault (1)."""

    def serve(host: ServiceHost) -> None:
        ensure_topics(settings.kafka, Topics(settings.kafka.topic_prefix))
        pipeline = build_inference(settings, store=host.open_store(migrate=True), metrics=host.metrics)
        try:
            host.serve(pipeline.run, stop=pipeline.stop, ready=lambda: pipeline.ready)
        finally:
            close_task(pipeline.task)  # an endpoint's connections

    return run_service(settings, SERVICE, serve)


def build_document_stage(
    settings: Settings, *, store: ResultStore, metrics: Metrics, task: DocumentStepTask | None = None,
    static_assignment: bool = False, producer: ReliableProducer | None = None,
) -> ConsumeLoop:
    """The document stage's consume loop on ``store``: the mapped topic in the stage's own group, ``task`` (a task
    that declares a document step; default: ``tasks.generate`` loaded here, closed by the caller) making each
    document's step."""
    topics = Topics(settings.kafka.topic_prefix)
    generate = task if task is not None else GenerateTask.load(TaskContext(settings.inference, settings.tasks))
    bind_task_metrics(generate, metrics, document_stage.SERVICE)
    serde = AvroSerde(settings.kafka)

    def measure(completed: DocumentCompleted) -> int:
        return len(serde.serialize(completed, topics.completed))

    stage = DocumentStage(generate, store, topics, measure=measure, max_message_bytes=settings.kafka.max_message_bytes)
    return ConsumeLoop(
        settings.kafka, settings.retry, group_id=topics.group(document_stage.SERVICE), topics=[topics.mapped],
        handler=stage, serde=serde,
        service=document_stage.SERVICE, metrics=metrics, static_assignment=static_assignment, producer=producer,
    )


def document_stage_main(settings: Settings) -> int:
    """Run the document stage until SIGTERM/SIGINT (0) or a fatal fault (1)."""

    def serve(host: ServiceHost) -> None:
        ensure_topics(settings.kafka, Topics(settings.kafka.topic_prefix))
        task = GenerateTask.load(TaskContext(settings.inference, settings.tasks))
        loop = build_document_stage(settings, store=host.open_store(migrate=True), metrics=host.metrics, task=task)
        try:
            host.serve(loop.run, stop=loop.stop, ready=lambda: loop.ready)
        finally:
            task.close()

    return run_service(settings, document_stage.SERVICE, serve)
