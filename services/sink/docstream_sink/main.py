"""`docstream sink run NAME`: completed topic → the sink's engine. Wiring only (docs/sinks.md)."""

from __future__ import annotations

from docstream.avro.serde import AvroSerde
from docstream.errors import ConfigError
from docstream.kafka.loop import ConsumeLoop
from docstream.metrics import Metrics
from docstream.service import ServiceHost, run_service
from docstream.settings import Settings, SinkSettings
from docstream.store import ResultStore
from docstream.tenants.tenancy import tenant_intakes_pattern
from docstream.topics import Topics
from docstream_sink.connect import open_engine
from docstream_sink.engine import SinkEngine
from docstream_sink.handler import SinkHandler, SinkWriter

__all__ = ["build_sink", "main", "sink_settings", "sink_writer"]


def sink_settings(settings: Settings, name: str) -> SinkSettings:
    """The settings of the sink ``name``.

    Raises:
        ConfigError: no sink of that name is configured.
    """
    found = settings.sinks.get(name)
    if found is None:
        known = ", ".join(sorted(settings.sinks)) or "none"
        raise ConfigError(f"no sink {name[:100]!r} in the settings ([sinks.{name[:100]}]; configured: {known})")
    return found


def sink_writer(settings: Settings, name: str, *, store: ResultStore, engine: SinkEngine,
                metrics: Metrics) -> SinkWriter:
    """The write path of the sink ``name`` (``docstream sink run`` and ``verify``)."""
    sink = sink_settings(settings, name)
    return SinkWriter(name, store, engine, model_id=sink.model_id or settings.inference.model_id,
                      batch_size=sink.batch_size, metrics=metrics)


def build_sink(settings: Settings, name: str, *, store: ResultStore, engine: SinkEngine, metrics: Metrics,
               poll_timeout_s: float = 1.0) -> ConsumeLoop:
    """The consume loop of the sink ``name``: its own consumer group on the completed topic, and on the intake
    topic for its tombstones."""
    sink = sink_settings(settings, name)
    topics = Topics(settings.kafka.topic_prefix)
    writer = sink_writer(settings, name, store=store, engine=engine, metrics=metrics)
    handler = SinkHandler(writer, metrics, prefix=topics.prefix)
    return ConsumeLoop(
        settings.kafka, settings.retry,
        group_id=sink.group_id or topics.group(f"sink-{name}"),
        # the intake topics for their tombstones (deleted sources): the shared one and every tenant's own
        topics=[topics.completed, topics.submitted, tenant_intakes_pattern(topics.prefix)],
        handler=handler,
        on_tombstone=handler.on_tombstone,
        serde=AvroSerde(settings.kafka),
        service=f"sink-{name}",
        metrics=metrics,
        poll_timeout_s=poll_timeout_s,
        max_batch=sink.max_documents,
    )


def main(settings: Settings, name: str) -> int:
    """Run the sink ``name`` until SIGTERM/SIGINT; 0 on a clean stop, 1 on a fatal error."""

    def serve(host: ServiceHost) -> None:
        engine = open_engine(sink_settings(settings, name))
        host.on_exit(engine.close)
        loop = build_sink(settings, name, store=host.open_store(), engine=engine, metrics=host.metrics)
        host.serve(loop.run, stop=loop.stop, ready=lambda: loop.ready)

    return run_service(settings, "sink", serve, stopped_event="sink_stopped")
