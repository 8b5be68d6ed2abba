"""Topic names, in one place."""

from __future__ import annotations

from dataclasses import dataclass

from docstream.lanes import INTERACTIVE, lane_of
from docstream.tasks.legacy import PRE_TASK_TASK, keeps_pre_task_group

__all__ = ["Topics", "dlq_topic"]


def dlq_topic(topic: str) -> str:
    """The dead-letter topic of ``topic``."""
    return f"{topic}.dlq"


@dataclass(frozen=True)
class Topics:
    """The topics of docs/architecture.md "Data flow" under one prefix (default ``docstream``)."""

    prefix: str = "docstream"

    @property
    def submitted(self) -> str:
        """Intake: DocumentSubmitted, key doc_id."""
        return f"{self.prefix}.documents.submitted"

    @property
    def submitted_interactive(self) -> str:
        """Intake of interactive jobs: DocumentSubmitted, key doc_id (the chunker reads it beside ``submitted``;
        tombstones go to ``submitted``)."""
        return f"{self.prefix}.documents.submitted.interactive"

    def intake(self, priority: str) -> str:
        """The intake topic of a job's lane: ``submitted_interactive`` for interactive, ``submitted`` for batch."""
        return self.submitted_interactive if lane_of(priority) == INTERACTIVE else self.submitted

    def intakes(self) -> tuple[str, str]:
        """Both intake topics, interactive first: what the chunker reads."""
        return (self.submitted_interactive, self.submitted)

    @property
    def chunks(self) -> str:
        """ChunkCreated, key doc_id."""
        return f"{self.prefix}.chunks"

    @property
    def chunks_interactive(self) -> str:
        """ChunkCreated of interactive jobs, key doc_id: the interactive lane (docs/operations.md "Sharing the
        service"); ``chunks`` is the batch lane."""
        return f"{self.prefix}.chunks.interactive"

    def lane(self, priority: str) -> str:
        """The chunks topic of a job's lane: ``chunks_interactive`` for interactive, ``chunks`` for batch."""
        return self.chunks_interactive if lane_of(priority) == INTERACTIVE else self.chunks

    def lanes(self) -> tuple[str, str]:
        """Both chunks topics, interactive first: what inference reads."""
        return (self.chunks_interactive, self.chunks)

    @property
    def results(self) -> str:
        """ChunkResult, key doc_id: every task's result of each chunk (what inference writes)."""
        return f"{self.prefix}.chunks.results"

    @property
    def legacy_results(self) -> str:
        """The result topic before ``results`` (ChunkEmbedded, key doc_id), read by the reducer for one release:
        inference instances of the version before still write it during a rolling upgrade, and records in flight
        there at the upgrade are reduced (docs/messaging.md "Renamed: ChunkEmbedded → ChunkResult")."""
        return f"{self.prefix}.chunks.embedded"

    def result_topics(self) -> tuple[str, str]:
        """Both result topics, ``results`` first: what the reducer reads (for one release)."""
        return (self.results, self.legacy_results)

    @property
    def completed(self) -> str:
        """DocumentCompleted, key doc_id."""
        return f"{self.prefix}.documents.completed"

    @property
    def chunked(self) -> str:
        """DocumentChunked, key doc_id: a document's chunks wait for the model (the reducer counts each job's
        tokens waiting from it, docs/operations.md "Where a job stands")."""
        return f"{self.prefix}.documents.chunked"

    @property
    def mapped(self) -> str:
        """DocumentCompleted whose document-level step is left to make (generate's map-reduce), key doc_id: the
        reducer writes them, the document stage reads them and publishes the finished document on ``completed``."""
        return f"{self.prefix}.documents.mapped"

    @property
    def jobs(self) -> str:
        """JobStatus, key job_id."""
        return f"{self.prefix}.jobs"

    def group(self, service: str) -> str:
        """Consumer group id of a service: ``<prefix>-<service>`` (e.g. docstream-inference)."""
        return f"{self.prefix}-{service}"

    def inference_group(self, task: str = PRE_TASK_TASK) -> str:
        """Consumer group of the inference service of ``task``: ``<prefix>-inference`` for embed, else
        ``<prefix>-inference-<task>`` (each task reads the chunks topic in a group of its own)."""
        return self.group("inference" if keeps_pre_task_group(task) else f"inference-{task}")

    def all(self) -> tuple[str, ...]:
        """Every main topic (without DLQs)."""
        return (self.submitted, self.submitted_interactive, self.chunks, self.chunks_interactive, self.results,
                self.legacy_results, self.chunked, self.completed, self.mapped, self.jobs)
