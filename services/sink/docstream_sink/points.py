"""What a sink holds of a document, and what a completed document asks of a sink. Pure: no I/O.

A **point** is one chunk with a vector: its id, its vector and a payload (text, page span, heading, text source,
the other tasks' outputs on the chunk, the job and the tenant). Its id is addressed by the chunk's text, not by
the version of the document (docs/sinks.md "Ids"): UUIDv5 of (tenant, source, the text's hash, how many chunks
before it in the document had the same text). So a new version of a source upserts its unchanged chunks onto
the ids they had, and a chunk whose text changed gets a new id; the sink then deletes the source's points that
the new version did not write (``doc_id`` differs), and holds exactly the current text.

``decide`` says what one DocumentCompleted asks of a sink (write the document's points, remove a deleted
source's, or nothing, and why); ``compare`` is ``docstream sink verify``'s diff of a sink against the store, and
``plan_repair`` what its ``--repair`` writes once the store has been read again after the scan.
"""

from __future__ import annotations

import hashlib
import math
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from docstream.store.base import ChunkRow, DocumentRow

__all__ = [
    "POINT_NAMESPACE",
    "Differences",
    "Remove",
    "Repair",
    "SinkPoint",
    "Skip",
    "Write",
    "compare",
    "decide",
    "plan_repair",
    "point_ids",
    "points_of",
    "source_of",
]

POINT_NAMESPACE = uuid.UUID("6d1b7c2e-4f0a-5b8e-9c3d-2a7f1e0b5d64")
"""The UUIDv5 namespace of point ids: fixed forever, or every id in every sink changes."""

_WRITTEN = frozenset({"completed", "partial"})
VECTOR_TOLERANCE = 1e-4
"""Largest difference, per component, between a sink's vector and the store's that ``compare`` lets pass (float32
storage, and engines that normalize)."""


@dataclass(frozen=True, slots=True)
class SinkPoint:
    """One chunk as a sink holds it. ``tenant``, ``source`` and ``doc_id`` are the engine's filter columns (the
    stale points of a source are those of another ``doc_id``); everything else is in ``payload``."""

    id: str
    tenant: str
    source: str
    doc_id: str
    vector: list[float]
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Write:
    """Upsert the document's points, then delete the source's points of other versions."""

    doc_id: str
    source: str


@dataclass(frozen=True, slots=True)
class Remove:
    """The source was deleted: delete all its points."""

    source: str


@dataclass(frozen=True, slots=True)
class Skip:
    """Nothing to do, and why (the ``docstream_sink_documents{outcome}`` label)."""

    reason: Literal["unknown_document", "failed", "no_vectors", "not_current", "retired"]


def source_of(doc_id: str, source_key: str | None) -> str:
    """The source a document's points belong to: its source key, or for a document without one (an upload), the
    document itself (``docstream:doc/<doc_id>``: no version replaces it)."""
    return source_key if source_key else f"docstream:doc/{doc_id}"


def point_ids(tenant: str, source: str, texts: Sequence[str]) -> list[str]:
    """The id of each chunk of a document, by its text: UUIDv5 of (tenant, source, occurrence, sha256 of the
    text), where occurrence counts the chunks before it with the same text (two equal paragraphs keep two
    points). Unchanged text keeps its id across versions; changed text gets a new one."""
    seen: dict[str, int] = {}
    ids: list[str] = []
    for text in texts:
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        occurrence = seen.get(digest, 0)
        seen[digest] = occurrence + 1
        ids.append(str(uuid.uuid5(POINT_NAMESPACE, f"{tenant}\x1f{source}\x1f{occurrence}\x1f{digest}")))
    return ids


def _task_outputs(row: ChunkRow) -> dict[str, Any]:
    out: dict[str, Any] = {"model_id": row.model_id, "status": row.status}
    if row.label_scores:
        out["label_scores"] = dict(row.label_scores)
        out["top_label"] = max(row.label_scores.items(), key=lambda kv: kv[1])[0]
    if row.mentions:
        out["mentions"] = [m.to_record() for m in row.mentions]
    if row.output is not None:
        out["output"] = row.output
    return out


def points_of(
    tenant: str, document: DocumentRow, chunks: Sequence[ChunkRow],
    others: Mapping[str, Sequence[ChunkRow]] | None = None,
) -> list[SinkPoint]:
    """The points of a document: one per chunk of ``chunks`` (the sink model's rows) that has a vector, in chunk
    order. ``others`` holds the other tasks' chunk rows by task name; each one's output on the chunk (labels,
    entity mentions, a user task's JSON) goes in the payload under ``tasks``."""
    ordered = sorted(chunks, key=lambda c: c.chunk_index)
    source = source_of(document.doc_id, document.source_key)
    ids = point_ids(tenant, source, [c.text for c in ordered])
    by_task = {task: {r.chunk_index: r for r in rows} for task, rows in (others or {}).items()}
    points: list[SinkPoint] = []
    for point_id, chunk in zip(ids, ordered, strict=True):
        if chunk.status != "ok" or not chunk.embedding:
            continue
        tasks = {task: _task_outputs(rows[chunk.chunk_index])
                 for task, rows in sorted(by_task.items()) if chunk.chunk_index in rows}
        payload: dict[str, Any] = {
            "tenant": tenant, "job_id": chunk.job_id, "doc_id": document.doc_id, "source": source,
            "source_uri": document.source_uri, "filename": document.filename, "chunk_index": chunk.chunk_index,
            "chunk_id": chunk.chunk_id, "model_id": chunk.model_id, "text": chunk.text,
            "page_start": chunk.page_start, "page_end": chunk.page_end, "heading": chunk.heading,
            "text_source": chunk.text_source, "kind": chunk.kind, "token_count": chunk.token_count,
            "tasks": tasks,
        }
        points.append(SinkPoint(point_id, tenant, source, document.doc_id, list(chunk.embedding), payload))
    return points


def decide(
    document: DocumentRow | None, vectors_status: str | None, *, shown_doc_id: str | None,
    source_deleted: bool = False,
) -> Write | Remove | Skip:
    """What a sink does about a document, when one of its tasks completed (and when ``verify`` checks it).

    Args:
        document: the document's row (None: the store does not know it).
        vectors_status: the status of the document's result under the sink's model (None: none yet: a job
            without the embed task, or a task that completed before embed; embed's completion writes).
        shown_doc_id: the version of the document's source a sink shows: the newest whose vectors completed
            (``store.completion.latest_completed`` from the source's current version); ignored for a document
            without a source key.
        source_deleted: the document's source was deleted (``docstream delete``), or, without a source, the
            document itself (a tombstone).
    """
    if document is None:
        return Skip("unknown_document")
    source = source_of(document.doc_id, document.source_key)
    if source_deleted:
        return Remove(source)
    if vectors_status is None:
        return Skip("no_vectors")
    if vectors_status not in _WRITTEN:
        return Skip("failed")  # a failed version leaves its source's earlier points, as it leaves its results
    if document.source_key and shown_doc_id != document.doc_id:
        return Skip("not_current")  # a newer version completed: it wrote the source
    return Write(document.doc_id, source)


@dataclass(frozen=True, slots=True)
class Differences:
    """What ``compare`` found: point ids the sink lacks, holds beyond the store, holds for another version of the
    document, and holds with another vector."""

    missing: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()
    stale: tuple[str, ...] = ()
    vector_mismatch: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        return len(self.missing) + len(self.extra) + len(self.stale) + len(self.vector_mismatch)

    def counts(self) -> dict[str, int]:
        return {"missing": len(self.missing), "extra": len(self.extra), "stale": len(self.stale),
                "vector_mismatch": len(self.vector_mismatch)}


def _same_vector(a: Sequence[float], b: Sequence[float]) -> bool:
    return len(a) == len(b) and all(math.isclose(x, y, abs_tol=VECTOR_TOLERANCE) for x, y in zip(a, b, strict=True))


def compare(expected: Iterable[SinkPoint], held: Mapping[str, tuple[str, Sequence[float]]]) -> Differences:
    """The differences between the points the store says a sink should hold (``expected``) and what it holds
    (``held``: id → (doc_id, vector)). A point held under the right id but another doc_id is stale (an older
    version's), one with the right doc_id and another vector a vector mismatch."""
    missing: list[str] = []
    stale: list[str] = []
    mismatch: list[str] = []
    wanted: set[str] = set()
    for point in expected:
        wanted.add(point.id)
        got = held.get(point.id)
        if got is None:
            missing.append(point.id)
        elif got[0] != point.doc_id:
            stale.append(point.id)
        elif not _same_vector(point.vector, got[1]):
            mismatch.append(point.id)
    extra = sorted(set(held) - wanted)
    return Differences(tuple(missing), tuple(extra), tuple(stale), tuple(mismatch))


@dataclass(frozen=True, slots=True)
class Repair:
    """What ``docstream sink verify --repair`` writes: the points to upsert (as the store holds them now), the held
    points to delete, each as (id, doc_id) the scan saw (the engine deletes it only while it still holds that id
    under that doc_id), and the ids of the differences the store's second read explains (``settled``: a live
    sink's writes during the scan), which it leaves alone."""

    upsert: tuple[SinkPoint, ...] = ()
    delete: tuple[tuple[str, str], ...] = ()
    settled: tuple[str, ...] = ()


def plan_repair(
    differences: Differences, expected: Mapping[str, SinkPoint], held: Mapping[str, tuple[str, Sequence[float]]],
    current: Mapping[str, Mapping[str, SinkPoint]],
) -> Repair:
    """What a repair writes, from the first read of the store (``expected``: id → point), the scan (``held``:
    id → (doc_id, vector)), their ``differences``, and a second read of the store after the scan (``current``:
    for each doc_id of a difference, the points the sink should hold of that document now, by id; none when the
    sink should hold none of it: not current, retired, deleted, unknown).

    A sink beside the repair keeps writing between the reads. A difference is repaired only when the second read
    still asks for it: a missing, stale or mismatched point only while its document is current (a point of a
    version retired or deleted since the first read is left to the sink, which retires it), an extra point only
    when its held document does not claim it now (a point the sink wrote after the first read is kept).
    """
    upsert: list[SinkPoint] = []
    delete: list[tuple[str, str]] = []
    settled: list[str] = []
    for point_id in (*differences.missing, *differences.stale, *differences.vector_mismatch):
        now = current.get(expected[point_id].doc_id, {}).get(point_id)
        if now is None:
            settled.append(point_id)
        else:
            upsert.append(now)
    for point_id in differences.extra:
        doc_id = held[point_id][0]
        if point_id in current.get(doc_id, {}):
            settled.append(point_id)
        else:
            delete.append((point_id, doc_id))
    return Repair(tuple(upsert), tuple(delete), tuple(settled))
