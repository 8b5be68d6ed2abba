"""docstream_sink.points: point ids addressed by text, payloads, the sink's decision, verify's diff. Pure."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from docstream.store.base import ChunkRow, DocumentRow
from docstream.tasks.base import Mention
from docstream_sink.points import (
    POINT_NAMESPACE,
    Remove,
    SinkPoint,
    Skip,
    Write,
    compare,
    decide,
    point_ids,
    points_of,
    source_of,
)

NOW = datetime(2026, 12, 4, tzinfo=UTC)


def _doc(doc_id: str = "d2", source_key: str | None = "file:///a.pdf") -> DocumentRow:
    return DocumentRow(doc_id=doc_id, job_id="j", source_uri="file:///a.pdf", content_sha256="0" * 64,
                       status="completed", updated_at=NOW, filename="a.pdf", source_key=source_key)


def _chunk(i: int, text: str, *, model: str = "m", status: str = "ok", **fields: object) -> ChunkRow:
    return ChunkRow(doc_id="d2", model_id=model, chunk_index=i, chunk_id=f"c{i}", job_id="j", text=text,
                    page_start=i + 1, page_end=i + 2, char_start=0, char_end=len(text), token_count=3,
                    embedding=[] if status != "ok" else [float(i), 1.0], status=status,  # type: ignore[arg-type]
                    heading="Intro > Terms", **fields)  # type: ignore[arg-type]


def test_ids_are_uuid5_of_the_text_so_unchanged_text_keeps_its_id_across_versions() -> None:
    v1 = point_ids("acme", "file:///a.pdf", ["one", "two", "three"])
    v2 = point_ids("acme", "file:///a.pdf", ["one", "TWO changed", "three", "four"])
    assert all(uuid.UUID(i).version == 5 for i in v1)
    assert v1[0] == v2[0] and v1[2] == v2[2]
    assert v1[1] not in v2 and v2[3] not in v1
    assert v1 == point_ids("acme", "file:///a.pdf", ["one", "two", "three"])  # deterministic
    assert uuid.UUID(v1[0]) == uuid.uuid5(POINT_NAMESPACE, "acme\x1ffile:///a.pdf\x1f0\x1f"
                                          "7692c3ad3540bb803c020b3aee66cd8887123234ea0c6e7143c0add73ff431ed")


def test_equal_texts_get_one_id_per_occurrence_and_tenants_and_sources_never_share_ids() -> None:
    ids = point_ids("acme", "s", ["same", "other", "same"])
    assert len(set(ids)) == 3
    assert set(point_ids("globex", "s", ["same"])).isdisjoint(ids)
    assert set(point_ids("acme", "s2", ["same"])).isdisjoint(ids)


def test_a_document_without_a_source_key_is_its_own_source() -> None:
    assert source_of("d1", None) == "docstream:doc/d1"
    assert source_of("d1", "s3://b/k.pdf") == "s3://b/k.pdf"


def test_points_carry_text_pages_heading_text_source_and_the_other_tasks_outputs() -> None:
    chunks = [_chunk(1, "beta", text_source="ocr"), _chunk(0, "alpha"), _chunk(2, "gamma", status="failed")]
    labels = [_chunk(0, "alpha", model="clf", label_scores={"legal": 0.9, "finance": 0.1}),
              _chunk(1, "beta", model="clf", label_scores={"legal": 0.2, "finance": 0.8})]
    entities = [_chunk(1, "beta", model="ner", mentions=(Mention("Acme", "ORG", 10, 14, 2),))]
    points = points_of("acme", _doc(), chunks, {"classify": labels, "entities": entities})
    assert [p.payload["chunk_index"] for p in points] == [0, 1]  # in order; the failed chunk has no vector
    first, second = points
    assert first.id == point_ids("acme", "file:///a.pdf", ["alpha", "beta", "gamma"])[0]
    assert (first.tenant, first.source, first.doc_id, first.vector) == ("acme", "file:///a.pdf", "d2", [0.0, 1.0])
    assert first.payload["text"] == "alpha" and first.payload["heading"] == "Intro > Terms"
    assert (first.payload["page_start"], first.payload["page_end"], first.payload["job_id"]) == (1, 2, "j")
    assert second.payload["text_source"] == "ocr"
    assert first.payload["tasks"] == {"classify": {"model_id": "clf", "status": "ok", "top_label": "legal",
                                                   "label_scores": {"legal": 0.9, "finance": 0.1}}}
    assert second.payload["tasks"]["classify"]["top_label"] == "finance"
    assert second.payload["tasks"]["entities"]["mentions"][0]["text"] == "Acme"


@pytest.mark.parametrize(("document", "vectors", "shown", "deleted", "expected"), [
    (None, "completed", "d2", False, Skip("unknown_document")),
    (_doc(), "completed", "d2", False, Write("d2", "file:///a.pdf")),
    (_doc(), "partial", "d2", False, Write("d2", "file:///a.pdf")),
    (_doc(), "failed", "d2", False, Skip("failed")),
    (_doc(), None, "d2", False, Skip("no_vectors")),
    (_doc(), "completed", "d3", False, Skip("not_current")),  # a newer version completed
    (_doc(), "completed", None, True, Remove("file:///a.pdf")),  # the source was deleted
    (_doc(), "failed", None, True, Remove("file:///a.pdf")),
    (_doc(source_key=None), "completed", None, False, Write("d2", "docstream:doc/d2")),
])
def test_decide(document: DocumentRow | None, vectors: str | None, shown: str | None, deleted: bool,
                expected: object) -> None:
    assert decide(document, vectors, shown_doc_id=shown, source_deleted=deleted) == expected


def test_compare_names_missing_extra_stale_and_mismatched_points() -> None:
    expected = [SinkPoint(i, "t", "s", "d2", [1.0, 0.0]) for i in ("a", "b", "c", "d")]
    held = {"b": ("d2", [1.0, 0.0]), "c": ("d1", [1.0, 0.0]), "d": ("d2", [0.0, 1.0]), "z": ("d9", [1.0, 0.0])}
    found = compare(expected, held)
    assert (found.missing, found.extra, found.stale, found.vector_mismatch) == (("a",), ("z",), ("c",), ("d",))
    assert found.total == 4
    assert compare(expected, {p.id: (p.doc_id, [x + 1e-6 for x in p.vector]) for p in expected}).total == 0
