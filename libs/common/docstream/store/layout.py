"""What the store's rows hold, declared once: a row is the fields of its records, less those it does not hold, in
the store's form, plus the store's own fields (docs/architecture.md "Adding a field"). Pure.

``python -m tools.gen_records`` writes the rows' dataclasses (``docstream.store.generated``) from these declarations
and the records' Avro schemas: each held field has its record field's name, type (an array as a tuple), default and
doc unless its :class:`Stored` says otherwise. From the dataclasses ``docstream.store.rows`` derives the columns,
``docstream.records.copy_fields`` the record-to-row copy; ``docstream_ingest.export`` and the ingest API's response
models read :func:`row_fields` for which record field each row field holds (its export column, its description).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Final, Literal

__all__ = [
    "CHUNK_ROW",
    "DOCUMENT_RESULT_ROW",
    "DOCUMENT_ROW",
    "FLOAT32",
    "JOB_ROW",
    "REQUIRED",
    "ROW_SPECS",
    "TEXTS",
    "TYPE_IMPORTS",
    "DocState",
    "RowField",
    "RowSpec",
    "Stored",
    "row_docs",
    "row_fields",
]

FLOAT32: Final = "float32"
"""Marks a row field whose numbers every backend keeps as float32 (``Annotated[dict[str, float], FLOAT32]``:
what a Cassandra ``float`` holds), so both backends read back the same values (``docstream.store.rows``)."""

TEXTS: Final = "texts"
"""Marks a row field that is a list of free texts (``Annotated[tuple[str, ...], TEXTS]``), which may hold commas:
stored as a list (Cassandra ``list<text>``, SQLite JSON), not comma-separated like the lists of words
(``docstream.store.rows``)."""

DocState = Literal["submitted", "chunking", "chunked", "completed", "partial", "failed", "skipped"]
"""Where a document is (documents and job_documents rows)."""

REQUIRED: Final = "<required>"
"""A :attr:`Stored.default`: the row field has no default, though its record field has one."""


@dataclass(frozen=True, slots=True)
class Stored:
    """A row field the store holds otherwise than its record field of the same name, or one no record has.

    Attributes:
        name: the row field.
        type: its type, as Python source; None: its record field's (an array as a tuple).
        default: its default, as Python source; ``REQUIRED``: none; None: its record field's.
        holds: the record field it holds (``Record.field``) when that is not the field of its name in the row's
            records; None and no record field of its name: a field of the store's own.
        doc: its docstring; None: the Avro doc of the field it holds.
    """

    name: str
    type: str | None = None
    default: str | None = None
    holds: str | None = None
    doc: str | None = None


@dataclass(frozen=True, slots=True)
class RowSpec:
    """One row type: every field of ``records`` (the first one's wins where two have a name) and ``picks``, less
    ``not_held``, as ``stored`` says, then ``stored``'s own fields.

    Attributes:
        name: the dataclass's name.
        doc: its docstring (the table and its key first).
        records: records whose every field the row holds, unless named in ``not_held``: a field added to one is
            held without an edit here (and needs its column: docs/architecture.md "Adding a field").
        not_held: by record, the fields the row does not hold and why.
        picks: by record, the only fields the row holds of a record not in ``records``.
        stored: fields held otherwise than their record's, and the store's own fields.
        order: the fields that lead, in this order (the order the row's positional arguments have always had);
            the others follow in their records' order, the store's own last.
    """

    name: str
    doc: str
    records: tuple[str, ...]
    not_held: Mapping[str, Mapping[str, str]]
    picks: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    stored: tuple[Stored, ...] = ()
    order: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RowField:
    """One field of a row, resolved against the records' schemas.

    Attributes:
        name: the row field.
        record: the record whose field it holds; None: the store's own.
        avro: that record field's Avro declaration (``name``, ``type``, ``doc``, maybe ``default``); None: own.
        stored: how the store holds it otherwise, if it does.
        doc: its doc: the stored one, else the Avro field's.
    """

    name: str
    record: str | None
    avro: Mapping[str, Any] | None
    stored: Stored | None
    doc: str

    @property
    def required(self) -> bool:
        """Whether the row field has no default."""
        if self.stored is not None and self.stored.default is not None:
            return self.stored.default == REQUIRED
        return self.avro is None or "default" not in self.avro

    @property
    def export_name(self) -> str:
        """What the row field is called outside the store: its record field's name (``table`` for ``table_part``)."""
        return str(self.avro["name"]) if self.avro is not None else self.name


def _fields_of(schemas: Mapping[str, Mapping[str, Any]], record: str) -> dict[str, Mapping[str, Any]]:
    try:
        return {str(f["name"]): f for f in schemas[record]["fields"]}
    except KeyError:
        raise ValueError(f"no schema of record {record}") from None


def _holding(spec: RowSpec, schemas: Mapping[str, Mapping[str, Any]]) -> dict[str, tuple[str, str]]:
    """The record field (record, field) each ``Stored.holds`` names, by row field, checked."""
    held: dict[str, tuple[str, str]] = {}
    for stored in spec.stored:
        if stored.holds is not None:
            record, _, name = stored.holds.partition(".")
            if name not in _fields_of(schemas, record):
                raise ValueError(f"{spec.name}.{stored.name}: {stored.holds} is no record field")
            held[stored.name] = (record, name)
    return held


def _held(spec: RowSpec, schemas: Mapping[str, Mapping[str, Any]]) -> dict[str, tuple[str, Mapping[str, Any]]]:
    """The row fields that hold a record field, in their records' order: row field -> (record, Avro field)."""
    holding = _holding(spec, schemas)
    renamed = {value: name for name, value in holding.items()}
    found: dict[str, tuple[str, Mapping[str, Any]]] = {}
    sources: list[tuple[str, tuple[str, ...] | None]] = [(record, None) for record in spec.records]
    sources += list(spec.picks.items())
    for record, only in sources:
        avro = _fields_of(schemas, record)
        not_held = spec.not_held.get(record, {})
        for name in [*not_held, *(only or ())]:
            if name not in avro:
                raise ValueError(f"{spec.name}: {record} has no field {name}")
        for name, declared in avro.items():
            if (record, name) in renamed:
                if name in not_held:
                    raise ValueError(f"{spec.name}: {record}.{name} is both held and not held")
                found[renamed[(record, name)]] = (record, declared)
            elif name in not_held or (only is not None and name not in only) or name in found:
                continue  # not held, not picked, or the same field of an earlier record
            elif name in holding:
                raise ValueError(f"{spec.name}.{name} holds {'.'.join(holding[name])}: name {record}.{name} in "
                                 "not_held")
            else:
                found[name] = (record, declared)
    lost = [name for name in holding if name not in found]
    if lost:
        raise ValueError(f"{spec.name}: {lost} hold fields of records not in records or picks")
    return found


def row_fields(spec: RowSpec, schemas: Mapping[str, Mapping[str, Any]]) -> tuple[RowField, ...]:
    """The fields of the row ``spec`` declares, in the row's order, against ``schemas`` (Avro record schemas by name).

    Raises:
        ValueError: the declaration names a record, field or order entry that does not exist, a store-only field
            has no type or doc, or a field without a default would follow one with a default.
    """
    stored = {s.name: s for s in spec.stored}
    found: dict[str, RowField] = {}
    for name, (record, avro) in _held(spec, schemas).items():
        kept = stored.get(name)
        found[name] = RowField(name, record, avro, kept, (kept.doc if kept and kept.doc else str(avro.get("doc", ""))))
    for own in spec.stored:
        if own.name not in found:
            if own.type is None or own.doc is None or own.default is None:
                raise ValueError(f"{spec.name}.{own.name}: a field of the store's own needs a type, default and doc")
            found[own.name] = RowField(own.name, None, None, own, own.doc)
    missing = [name for name in spec.order if name not in found]
    if missing:
        raise ValueError(f"{spec.name}: order names {missing}, not fields of the row")
    ordered = [found[name] for name in spec.order]
    ordered += [f for name, f in found.items() if name not in spec.order]
    late = [f.name for before, f in pairwise(ordered) if f.required and not before.required]
    if late:
        raise ValueError(f"{spec.name}: {late} have no default but follow a field with one (give them one)")
    return tuple(ordered)


def row_docs(spec: RowSpec, schemas: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """The doc of each field of the row ``spec`` declares (its Avro field's, or the stored one), by name."""
    return {f.name: f.doc for f in row_fields(spec, schemas)}


# -- the rows ----------------------------------------------------------------------------------------------

CHUNK_ROW = RowSpec(
    name="ChunkRow",
    doc="chunks: ((doc_id), model_id, chunk_index). A chunk (ChunkCreated) and its result of one task's model "
        "(ChunkResult).",
    records=("ChunkCreated", "ChunkResult"),
    not_held={
        "ChunkCreated": {
            "chunk_count": "the document's, in its documents row once chunked",
            "content_sha256": "the document's, in its documents row",
            "chunker_settings": "in document_results, once per document",
            "model_id": "the model the job asked for; the row's model_id is its result's (ChunkResult)",
            "created_at": "a transport time; the row's time is its write",
            "stage_us": "folded into the document's and job's usage",
            "tasks": "the job's, in its options",
            "page_breaks": "used by the entities task to give mentions their pages, then not needed",
            "previous_doc_id": "the document's, in its documents row",
            "tenant": "the job's, in its jobs row",
            "priority": "the job's, in its options",
            "resent": "a transport flag: whether inference looks for the chunk's stored result first",
            "token_ids": "the model's input, carried so that inference does not tokenize again",
            "tokenizer": "goes with token_ids",
        },
        "ChunkResult": {
            "chunk_count": "the document's, in its documents row once chunked",
            "embedded_at": "a transport time",
            "error": "the row keeps error_code; the text stays in the record on its topic",
            "chunker_settings": "in document_results, once per document",
            "runtime": "in document_results, once per document",
            "model_us": "folded into the document's and job's usage",
            "device": "folded into the usage's per-device microseconds",
            "stage_us": "folded into the document's and job's usage",
            "tasks": "the job's, in its options",
        },
    },
    stored=(
        Stored("model_id", holds="ChunkResult.model_id"),
        Stored("embedding", type="Sequence[float]", default=REQUIRED),
        Stored("status", default='"ok"'),
        Stored("table_part", type="TablePart | None", holds="ChunkCreated.table",
               doc="The table part of a ``table`` chunk (``ChunkCreated.table``, typed): page, bbox, caption, header, "
                   "cells; None for a text chunk."),
        Stored("label_scores", type="Annotated[dict[str, float], FLOAT32]"),
        Stored("mentions", type="tuple[Mention, ...]",
               doc="entities: the chunk's mentions, in document offsets (a mention's ``cut`` is not stored)."),
        Stored("page_furniture", type="Annotated[tuple[str, ...], TEXTS]"),
    ),
    order=("doc_id", "model_id", "chunk_index", "chunk_id", "job_id", "text", "page_start", "page_end", "char_start",
           "char_end", "token_count", "embedding", "status", "error_code"),
)

DOCUMENT_RESULT_ROW = RowSpec(
    name="DocumentResultRow",
    doc="document_results: ((doc_id), model_id). A document's result of one task's model (DocumentCompleted).",
    records=("DocumentCompleted",),
    not_held={
        "DocumentCompleted": {
            "source_uri": "the document's, in its documents row",
            "filename": "the document's, in its documents row",
            "page_count": "the document's, in its documents row",
            "error_code": "the document's, in its documents and job_documents rows",
            "error": "the document's, in its documents row",
            "model_us": "in job_documents' usage",
            "stage_us": "in job_documents' usage",
            "pages_by_verdict": "the document's, in its documents row",
            "pages_by_source": "the document's, in its documents row",
            "tasks": "the job's, in its options",
        },
    },
    stored=(
        Stored("model_id", type="str", default=REQUIRED, doc="Model of the results (a task's: docs/tasks.md)."),
        Stored("chunk_count", default=REQUIRED),
        Stored("failed_chunks", default=REQUIRED),
        Stored("token_count", default=REQUIRED),
        Stored("embedding", type="Sequence[float]", default=REQUIRED),
        Stored("chunker_settings", type="str", default=REQUIRED,
               doc="Canonical chunker settings the document was chunked with (see ChunkCreated); empty for results "
                   "that predate v2."),
        Stored("task", type="str", default='"embed"',
               doc="The task of the results (docs/tasks.md); the fields below are that task's, the others empty."),
        Stored("mentions", type="tuple[Mention, ...]"),
        Stored("entities", type="tuple[EntitySummary, ...]"),
    ),
    order=("doc_id", "model_id", "job_id", "status", "chunk_count", "failed_chunks", "token_count", "embedding",
           "chunker_settings", "completed_at"),
)

DOCUMENT_ROW = RowSpec(
    name="DocumentRow",
    doc="documents: ((doc_id)). A document (DocumentSubmitted) and where it is.",
    records=("DocumentSubmitted",),
    picks={"DocumentCompleted": ("page_count", "error_code", "error", "pages_by_verdict", "pages_by_source")},
    not_held={
        "DocumentSubmitted": {
            "size_bytes": "checked at intake, not kept",
            "submitted_at": "the row's updated_at",
            "tenant": "the job's, in its jobs row",
            "priority": "the job's, in its options",
            "model_id": "the job's, in its options",
            "chunk_max_tokens": "the job's, in its options",
            "chunk_overlap_tokens": "the job's, in its options",
            "tasks": "the job's, in its options",
        },
    },
    stored=(
        Stored("status", type="DocState", default=REQUIRED, doc="Where the document is."),
        Stored("updated_at", type="datetime", default=REQUIRED, doc="When the row was last written (UTC)."),
        Stored("page_count", doc="Pages, once the chunker opened the document."),
        Stored("pages_by_verdict",
               doc="Pages by quality verdict, once chunked (docs/chunking.md \"Provenance\"); empty before."),
        Stored("pages_by_source", doc="Pages by where their text came from (text_layer, ocr), once chunked; empty "
                                      "before."),
        Stored("generation", type="int | None", default="None",
               doc="Its place among its source's versions (``SourceRow.generation`` when it became current); None: a "
                   "document without a source, or written before generations (it reads as 0). Written by "
                   "``set_document_generation`` alone, never by the row's upsert."),
        Stored("deleted_at", type="datetime | None", default="None",
               doc="When it was deleted (``docstream.store.sources``); written by ``mark_document_deleted`` alone, "
                   "never by the row's upsert, so a writer that read the row before the delete cannot bring it back."),
    ),
    order=("doc_id", "job_id", "source_uri", "content_sha256", "status", "updated_at", "media_type", "filename",
           "page_count", "error_code", "error", "pages_by_verdict", "pages_by_source"),
)

JOB_ROW = RowSpec(
    name="JobRow",
    doc="jobs: ((job_id)). A job (JobStatus): what its submission asked, and its counts as its last status gives them.",
    records=("JobStatus",),
    not_held={
        "JobStatus": {
            "final": "the row's status says whether the job ended",
            "pages": "in usage",
            "chunks": "in usage",
            "tokens": "in usage",
            "model_us": "in usage",
            "stage_us": "in usage",
            "chat_tokens": "in usage",
        },
    },
    stored=(
        Stored("tenant", default=REQUIRED),
        Stored("status", type="JobState", default=REQUIRED, holds="JobStatus.state",
               doc="Where the job is: running, then the state it ended in."),
        Stored("created_at", type="datetime", default=REQUIRED, doc="When the job was created (UTC)."),
        Stored("options", type="dict[str, str]", default="field(default_factory=dict)",
               doc="What the job's submission asked (lane, tasks, model, chunk sizes), as the store keeps it: read it "
                   "through ``docstream.records.JobOptions.from_mapping``."),
        Stored("webhook_url", type="str | None", default="None",
               doc="Where the job's final status is posted; null: nowhere."),
        Stored("updated_at", type="datetime | None", default="None",
               doc="When its counts last changed (UTC); null before the first document ended."),
        Stored("usage", type="Usage | None", default="None",
               doc="What the job's terminal documents cost (the reducer's totals); null: nothing counted yet."),
    ),
    order=("job_id", "tenant", "created_at", "status", "document_count", "options", "webhook_url", "completed",
           "partial", "failed", "updated_at", "usage"),
)

ROW_SPECS: tuple[RowSpec, ...] = (DOCUMENT_ROW, DOCUMENT_RESULT_ROW, CHUNK_ROW, JOB_ROW)
"""Every row written from its records, in the order ``docstream.store.generated`` holds them."""

TYPE_IMPORTS: Mapping[str, tuple[str, ...]] = {
    "docstream.records": ("ChunkStatus", "DocumentStatus", "JobState"),
    "docstream.store.layout": ("FLOAT32", "TEXTS", "DocState"),
    "docstream.tables": ("TablePart",),
    "docstream.tasks.base": ("EntitySummary", "Mention"),
    "docstream.tenants.usage": ("Usage",),
}
"""Where the generated rows import the types their fields name."""
