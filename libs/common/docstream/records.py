"""Domain records: frozen dataclasses mirroring schemas/*.avsc, with paired converters.

``to_record()`` gives the dict fastavro writes; ``from_record()`` takes the dict fastavro
reads. Timestamps are timezone-aware UTC datetimes.
"""

from __future__ import annotations

import json
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

__all__ = [
    "OUTPUT_TOO_LARGE",
    "RECORD_TYPES",
    "AnyRecord",
    "ChunkCreated",
    "ChunkEmbedded",
    "DocumentChunked",
    "DocumentCompleted",
    "DocumentSubmitted",
    "JobStatus",
    "carry",
    "output_too_large",
    "record_limit",
    "utc_now",
]

ChunkStatus = Literal["ok", "failed"]
DocumentStatus = Literal["completed", "partial", "failed"]
JobState = Literal["running", "completed", "cancelled"]

_R = TypeVar("_R", bound="_Record")
R = TypeVar("R")


def utc_now() -> datetime:
    """Now, UTC, millisecond precision (what timestamp-millis keeps)."""
    now = datetime.now(UTC)
    return now.replace(microsecond=(now.microsecond // 1000) * 1000)


_FIELD_NAMES: dict[type[Any], tuple[str, ...]] = {}


def _field_names(cls: type[Any]) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


class _Record:
    schema_name: ClassVar[str]

    def to_record(self) -> dict[str, Any]:
        """The dict written by the Avro serializer.

        Shallow: the values are the record's own (records are flat and frozen), so encoding a
        ChunkEmbedded does not copy its embedding (``dataclasses.asdict`` deep-copies every list).
        """
        return {name: getattr(self, name) for name in _field_names(type(self))}

    @classmethod
    def from_record(cls: type[_R], record: dict[str, Any]) -> _R:
        """Build from a decoded Avro dict; fields the class doesn't know are ignored."""
        values = {name: record[name] for name in _field_names(cls) if name in record}
        for key, value in values.items():
            if isinstance(value, datetime) and value.tzinfo is None:
                values[key] = value.replace(tzinfo=UTC)
        return cls(**values)

    @property
    def key(self) -> str:
        """The Kafka record key."""
        return str(getattr(self, "doc_id"))  # noqa: B009 - defined by the subclasses


@dataclass(frozen=True, slots=True)
class DocumentSubmitted(_Record):
    """A document handed to docstream (intake topic)."""

    schema_name: ClassVar[str] = "DocumentSubmitted"

    job_id: str
    doc_id: str
    source_uri: str
    content_sha256: str
    size_bytes: int
    submitted_at: datetime
    tenant: str = "default"
    filename: str | None = None
    media_type: str | None = None
    model_id: str | None = None
    chunk_max_tokens: int | None = None
    chunk_overlap_tokens: int | None = None
    tasks: list[dict[str, Any]] = field(default_factory=list)
    """TaskRequest dicts (``docstream.tasks.TaskRequest.to_record``); empty: embed only."""
    source_key: str | None = None
    """The document's identity across versions: the user's key, else the absolute path or URI it came from."""
    previous_doc_id: str | None = None
    """The doc_id of the source's version current when this one was submitted (None: no earlier one)."""
    priority: str = "batch"
    """The job's lane, ``interactive`` or ``batch`` (``docstream.lanes.LANES``)."""


@dataclass(frozen=True, slots=True)
class ChunkCreated(_Record):
    """One chunk of a document (chunks topic)."""

    schema_name: ClassVar[str] = "ChunkCreated"

    job_id: str
    doc_id: str
    chunk_id: str
    chunk_index: int
    chunk_count: int
    content_sha256: str
    text: str
    page_start: int
    page_end: int
    char_start: int
    char_end: int
    token_count: int
    chunker_settings: str
    created_at: datetime
    heading: str | None = None
    model_id: str | None = None
    stage_us: dict[str, int] = field(default_factory=dict)
    text_source: str = "text_layer"
    ocr_engine: str | None = None
    page_verdicts: list[str] = field(default_factory=list)
    tasks: list[dict[str, Any]] = field(default_factory=list)
    """TaskRequest dicts of the job's tasks (``docstream.tasks.TaskRequest``); empty: embed only."""
    page_breaks: list[int] = field(default_factory=list)
    page_reasons: list[str] = field(default_factory=list)
    """Why each page kept its text (``docstream_chunker.provenance.REASONS``), page_start to page_end."""
    kind: str = "text"
    """``text``, or ``table``: the chunk is one part of a table (docs/chunking.md "Tables")."""
    table: dict[str, Any] | None = None
    """The ``ChunkTable`` dict of a table chunk (``docstream.tables.TablePart.to_record``), else None."""
    previous_doc_id: str | None = None
    """The doc_id of the source's earlier version (DocumentSubmitted): its stored results of unchanged chunk texts
    are reused."""
    tenant: str = "default"
    """The job's tenant (DocumentSubmitted): inference shares the model fairly between tenants."""
    priority: str = "batch"
    """The job's lane (DocumentSubmitted); the chunk travels on that lane's topic (``Topics.lane``)."""


@dataclass(frozen=True, slots=True)
class ChunkEmbedded(_Record):
    """The model's result for one chunk (chunks.embedded topic)."""

    schema_name: ClassVar[str] = "ChunkEmbedded"

    job_id: str
    doc_id: str
    chunk_id: str
    chunk_index: int
    chunk_count: int
    model_id: str
    status: ChunkStatus
    token_count: int
    page_start: int
    page_end: int
    embedded_at: datetime
    embedding: list[float] = field(default_factory=list)
    error_code: str | None = None
    error: str | None = None
    chunker_settings: str = ""
    runtime: str | None = None
    model_us: int = 0
    device: str | None = None
    stage_us: dict[str, int] = field(default_factory=dict)
    task: str = "embed"
    tasks: list[str] = field(default_factory=list)
    label_scores: dict[str, float] = field(default_factory=dict)
    mentions: list[dict[str, Any]] = field(default_factory=list)
    """ChunkMention dicts (``docstream.tasks.Mention.to_record``)."""
    output: str | None = None


@dataclass(frozen=True, slots=True)
class DocumentChunked(_Record):
    """A document was chunked and its chunks wait for the model (documents.chunked topic)."""

    schema_name: ClassVar[str] = "DocumentChunked"

    job_id: str
    doc_id: str
    chunk_count: int
    token_count: int
    chunked_at: datetime
    tenant: str = "default"
    priority: str = "batch"
    page_count: int | None = None


@dataclass(frozen=True, slots=True)
class DocumentCompleted(_Record):
    """A document reached a terminal state (documents.completed topic)."""

    schema_name: ClassVar[str] = "DocumentCompleted"

    job_id: str
    doc_id: str
    status: DocumentStatus
    completed_at: datetime
    model_id: str | None = None
    source_uri: str | None = None
    filename: str | None = None
    content_sha256: str | None = None
    page_count: int | None = None
    chunk_count: int = 0
    failed_chunks: int = 0
    token_count: int = 0
    embedding: list[float] = field(default_factory=list)
    error_code: str | None = None
    error: str | None = None
    chunker_settings: str | None = None
    runtime: str | None = None
    model_us: dict[str, int] = field(default_factory=dict)
    stage_us: dict[str, int] = field(default_factory=dict)
    pages_by_verdict: dict[str, int] = field(default_factory=dict)
    pages_by_source: dict[str, int] = field(default_factory=dict)
    task: str | None = None
    tasks: list[str] = field(default_factory=list)
    label_scores: dict[str, float] = field(default_factory=dict)
    top_label: str | None = None
    top_chunks: list[int] = field(default_factory=list)
    mentions: list[dict[str, Any]] = field(default_factory=list)
    """EntityMention dicts (``docstream.tasks.Mention.to_record``)."""
    entities: list[dict[str, Any]] = field(default_factory=list)
    """EntitySummary dicts (``docstream.tasks.EntitySummary.to_record``)."""
    mentions_truncated: bool = False
    output: str | None = None


OUTPUT_TOO_LARGE = "output_too_large"
"""error_code of a document whose DocumentCompleted would be larger than a record may be (``record_limit``)."""

_RECORD_HEADROOM_BYTES = 64 * 1024
_COST_KEYS = ("kind", "prompt_tokens", "completion_tokens")


def record_limit(max_message_bytes: int) -> int:
    """The most bytes a record's serialized value may hold, under a bound of ``max_message_bytes`` on the whole
    record (``kafka.max_message_bytes``: the producers' and the topics'). A quarter of it, at most 64 KiB, is left
    to the key, the record's framing and headers, and what the reducer adds after it measured the value (the
    documents row's source, filename and page counts)."""
    return max_message_bytes - min(_RECORD_HEADROOM_BYTES, max_message_bytes // 4)


def output_too_large(completed: DocumentCompleted, size: int, limit: int) -> DocumentCompleted:
    """``completed`` failed with ``OUTPUT_TOO_LARGE``: its results dropped (embedding, scores, mentions, entities,
    output), its counts kept, and of its output what it cost (``kind``, ``prompt_tokens``, ``completion_tokens``:
    a job's chat tokens are the server's bill whatever became of the answers)."""
    return replace(completed, status="failed", error_code=OUTPUT_TOO_LARGE,
                   error=f"the document's result is at least {size} bytes, over the {limit} a record holds "
                         "(kafka.max_message_bytes less headroom)",
                   embedding=[], label_scores={}, top_label=None, top_chunks=[], mentions=[], entities=[],
                   mentions_truncated=False, output=_cost_of(completed.output))


def _cost_of(output: str | None) -> str | None:
    try:
        value = json.loads(output) if output else None
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    kept = {key: value[key] for key in _COST_KEYS
            if isinstance(value.get(key), int) or (isinstance(value.get(key), str) and len(value[key]) <= 64)}
    return json.dumps(kept, ensure_ascii=False, separators=(",", ":")) if kept else None


@dataclass(frozen=True, slots=True)
class JobStatus(_Record):
    """Progress of a job (jobs topic, key job_id)."""

    schema_name: ClassVar[str] = "JobStatus"

    job_id: str
    state: JobState
    document_count: int
    updated_at: datetime
    tenant: str = "default"
    completed: int = 0
    partial: int = 0
    failed: int = 0
    final: bool = False
    pages: int = 0
    chunks: int = 0
    tokens: int = 0
    model_us: dict[str, int] = field(default_factory=dict)
    stage_us: dict[str, int] = field(default_factory=dict)
    chat_tokens: dict[str, int] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """The Kafka record key: job_id."""
        return self.job_id


AnyRecord = DocumentSubmitted | ChunkCreated | ChunkEmbedded | DocumentChunked | DocumentCompleted | JobStatus

RECORD_TYPES: dict[str, type[_Record]] = {
    cls.schema_name: cls
    for cls in (DocumentSubmitted, ChunkCreated, ChunkEmbedded, DocumentChunked, DocumentCompleted, JobStatus)
}


# -- carry: a record or a row from other dataclasses, field by field name ----------------------------------


def _converter(hint: Any) -> Callable[[Any], Any]:
    """How a source's value becomes a field of type ``hint``: sequences become the field's tuple (of the items'
    records: ``Mention.from_record``) or list, maps are copied; other values are taken as they are."""
    if get_origin(hint) is Annotated:
        hint = get_args(hint)[0]
    if get_origin(hint) in (Union, types.UnionType):  # an optional sequence: None stays None
        inner = _converter(next(arg for arg in get_args(hint) if arg is not type(None)))
        return lambda value: None if value is None else inner(value)
    origin = get_origin(hint)
    if origin is tuple:
        item = get_args(hint)[0]
        from_record = getattr(item, "from_record", None)
        if from_record is not None:
            return lambda value: tuple(from_record(v) if isinstance(v, Mapping) else v for v in value)
        return tuple
    if origin is list:
        return list
    if origin is dict:
        return dict
    return lambda value: value


_Carried = tuple[tuple[int, str, Callable[[Any], Any]], ...]
_CARRIED: dict[tuple[type[Any], tuple[type[Any], ...], frozenset[str]], _Carried] = {}


def _plan(target: type[Any], sources: tuple[type[Any], ...], given: frozenset[str]) -> _Carried:
    hints = get_type_hints(target, include_extras=True)
    plan = []
    for f in fields(target):
        if f.name in given:
            continue
        holders = [i for i, source in enumerate(sources) if f.name in {s.name for s in fields(source)}]
        if len(holders) > 1:
            names = ", ".join(sources[i].__name__ for i in holders)
            raise TypeError(f"{target.__name__}.{f.name}: both {names} have it; give it in values")
        if holders:
            plan.append((holders[0], f.name, _converter(hints[f.name])))
    return tuple(plan)


def carry(target: type[R], *sources: Any, **values: Any) -> R:
    """A ``target`` (a row or a record dataclass) holding every field of ``sources`` that it has a field of the
    same name for, as its type holds it (a list as a tuple, a tuple as a list), then ``values`` (what the sources
    do not say, or say otherwise).

    So a field added to a record and to the row of the same name is carried without another line (docs/architecture.md
    "Adding a field"); ``tests/unit/test_schema_ties.py`` names every record field a row does not hold.

    Raises:
        TypeError: two sources have a field ``target`` has and ``values`` does not give (say which one wins).
    """
    key = (target, tuple(type(s) for s in sources), frozenset(values))
    plan = _CARRIED.get(key)
    if plan is None:
        plan = _CARRIED[key] = _plan(target, key[1], key[2])
    found = {name: convert(getattr(sources[at], name)) for at, name, convert in plan}
    return target(**found, **values)
