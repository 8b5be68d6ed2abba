"""The task contract: what the inference service runs per chunk, and how the reducer folds it (docs/tasks.md).

Pure: data types, protocols and the span placement. No model is loaded and nothing is read here.

A task has two halves that live in different processes:

* the **runner** (``Task``), loaded once by an inference service: it turns a micro-batch of chunk
  texts into one ``ChunkOutput`` each, in two steps the pipeline runs on different threads,
  ``prepare`` (tokenize: cheap, CPU) and ``run`` (the model);
* the **fold** (``TaskFold``), used by the reducer without the model: it folds the chunk results of
  one document into a ``DocumentOutput``. A fold is pure and its ``add`` commutes, so the result
  does not depend on the order chunks arrive in; the reducer hands it each chunk index once, so a
  redelivery changes nothing.

Results are keyed by ``model_id``: several tasks over one document sit side by side.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, get_args, runtime_checkable

from docstream.errors import InputError, PoisonRecord
from docstream.tasks.legacy import tasks_of
from docstream.tenants.json_input import loads_bounded

if TYPE_CHECKING:  # pure: the settings' module reads the environment
    from docstream.settings import InferenceSettings, TasksSettings

__all__ = [
    "BUILTIN_TASKS",
    "CLASSIFY",
    "EMBED",
    "ENTITIES",
    "FAILURE_OUTPUT",
    "GENERATE",
    "MAX_CHUNK_MENTIONS",
    "MAX_DESCRIPTION_CHARS",
    "MAX_LABELS",
    "MAX_LABEL_CHARS",
    "MAX_PROMPT_CHARS",
    "MAX_SCHEMA_CHARS",
    "MAX_TASKS",
    "ChunkOutput",
    "DocumentOutput",
    "DocumentStepTask",
    "EntitySummary",
    "FoldInput",
    "Label",
    "Mention",
    "PreparedTexts",
    "Prompt",
    "PromptKind",
    "Span",
    "StoredAnswersFold",
    "Task",
    "TaskClass",
    "TaskContext",
    "TaskFold",
    "TaskOutputError",
    "TaskRequest",
    "always_reuses_stored",
    "bind_task_metrics",
    "check_task_name",
    "close_task",
    "failure_output",
    "has_document_step",
    "place_spans",
    "requested_tasks",
    "task_names",
]

EMBED = "embed"
CLASSIFY = "classify"
ENTITIES = "entities"
GENERATE = "generate"
BUILTIN_TASKS = (EMBED, CLASSIFY, ENTITIES, GENERATE)

FAILURE_OUTPUT = "chunk_output"
"""The attribute of a chunk's exception that holds what its failed attempts cost, as a JSON object (the generate
task: the chat server's tokens): ``failure_output``."""

MAX_TASKS = 8
"""Most tasks one job may ask for."""
MAX_LABELS = 64
"""Most labels one classify request may carry."""
MAX_LABEL_CHARS = 100
MAX_DESCRIPTION_CHARS = 500
MAX_PROMPT_CHARS = 16_000
"""Longest instruction of a generate prompt."""
MAX_SCHEMA_CHARS = 32_000
"""Longest JSON Schema of an extract prompt (its canonical JSON)."""
MAX_CHUNK_MENTIONS = 256
"""Most mentions kept of one chunk (the rest, by offset, are dropped and logged by the runner)."""

_TASK_NAME = re.compile(r"[a-z][a-z0-9_-]{0,39}")


class TaskOutputError(PoisonRecord):
    """A chunk result a fold cannot take (a malformed output); the reducer sends it to the DLQ, never merges it."""

    code = "task_output_invalid"


def check_task_name(name: str) -> str:
    """``name`` when it is a valid task name (lowercase letter, then ``[a-z0-9_-]``, at most 40).

    Raises:
        InputError: ``task_invalid``.
    """
    if not isinstance(name, str) or not _TASK_NAME.fullmatch(name):
        raise InputError(f"invalid task name {name!r}: a lowercase letter, then a-z 0-9 _ -, at most 40",
                         code="task_invalid")
    return name


@dataclass(frozen=True, slots=True)
class Label:
    """A classification label: its name, and optionally the text it is matched by (zero-shot).

    Raises:
        InputError: ``labels_invalid`` for an empty or over-long name or description.
    """

    name: str
    description: str | None = None

    def __post_init__(self) -> None:
        if not self.name.strip() or len(self.name) > MAX_LABEL_CHARS:
            raise InputError(f"label name must be 1..{MAX_LABEL_CHARS} characters: {self.name[:120]!r}",
                             code="labels_invalid")
        if self.description is not None and len(self.description) > MAX_DESCRIPTION_CHARS:
            raise InputError(f"label {self.name!r}: description longer than {MAX_DESCRIPTION_CHARS} characters",
                             code="labels_invalid")

    @property
    def text(self) -> str:
        """What a zero-shot classifier embeds for the label: its description, else its name."""
        return self.description or self.name

    def to_record(self) -> dict[str, Any]:
        """The Avro ``Label`` dict."""
        return {"name": self.name, "description": self.description}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Label:
        """From the Avro ``Label`` dict."""
        description = record.get("description")
        return cls(str(record["name"]), None if description is None else str(description))

    @classmethod
    def parse(cls, text: str) -> Label:
        """``name`` or ``name=description`` (the CLI's ``--labels`` item).

        Raises:
            InputError: ``labels_invalid``.
        """
        name, sep, description = text.partition("=")
        return cls(name.strip(), description.strip() or None if sep else None)



PromptKind = Literal["summarize", "extract"]


@dataclass(frozen=True, slots=True)
class Prompt:
    """What a ``generate`` request asks of the model for every chunk (docs/tasks.md "generate").

    Attributes:
        kind: ``summarize`` (a summary per chunk, then of the document) or ``extract`` (the fields a JSON
            Schema names, per chunk, then merged per document).
        instruction: the user's prompt; empty: the kind's built-in instruction.
        json_schema: extract: the JSON Schema the answer must validate against, as canonical JSON text.

    Raises:
        InputError: ``prompt_invalid``: an unknown kind, an instruction or schema over its bound, a schema that
            is not a JSON object, a summarize prompt with a schema or an extract prompt without one.
    """

    kind: PromptKind
    instruction: str = ""
    json_schema: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in get_args(PromptKind):
            raise InputError(f"prompt kind must be summarize or extract, got {str(self.kind)[:40]!r}",
                             code="prompt_invalid")
        if len(self.instruction) > MAX_PROMPT_CHARS:
            raise InputError(f"the prompt is longer than {MAX_PROMPT_CHARS} characters", code="prompt_invalid")
        if (self.json_schema is None) != (self.kind == "summarize"):
            raise InputError("an extract prompt needs a JSON Schema, and only an extract prompt takes one",
                             code="prompt_invalid")
        if self.json_schema is not None:
            if len(self.json_schema) > MAX_SCHEMA_CHARS:
                raise InputError(f"the JSON Schema is longer than {MAX_SCHEMA_CHARS} characters",
                                 code="prompt_invalid")
            if not isinstance(_json_value(self.json_schema), dict):
                raise InputError("the JSON Schema must be a JSON object", code="prompt_invalid")

    @property
    def schema(self) -> dict[str, Any] | None:
        """extract: the JSON Schema, decoded."""
        return None if self.json_schema is None else dict(_json_value(self.json_schema))

    @classmethod
    def of(cls, kind: PromptKind, instruction: str = "", schema: Mapping[str, Any] | None = None) -> Prompt:
        """A prompt whose schema is stored as canonical JSON (sorted keys), so one schema has one text and
        one ``model_id``.

        Raises:
            InputError: ``prompt_invalid``.
        """
        text = None if schema is None else json.dumps(schema, sort_keys=True, separators=(",", ":"),
                                                       ensure_ascii=False)
        return cls(kind, instruction.strip(), text)

    def to_record(self) -> dict[str, Any]:
        """The Avro ``Prompt`` dict."""
        return {"kind": self.kind, "instruction": self.instruction, "json_schema": self.json_schema}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Prompt:
        """From the Avro ``Prompt`` dict.

        Raises:
            InputError: ``prompt_invalid``.
        """
        schema = record.get("json_schema")
        return cls(record.get("kind"), str(record.get("instruction") or ""),  # type: ignore[arg-type]
                   None if schema is None else str(schema))


def _json_value(text: str) -> Any:
    """A schema's text decoded within ``loads_bounded``'s size and depth (never a ``RecursionError``)."""
    return loads_bounded(text, what="the JSON Schema", code="prompt_invalid")


@dataclass(frozen=True, slots=True)
class TaskRequest:
    """One task a job asks for: its name, (classify) its labels and (generate) its prompt.

    Raises:
        InputError: ``task_invalid``, ``labels_invalid`` (duplicate names, too many).
    """

    name: str
    labels: tuple[Label, ...] = ()
    prompt: Prompt | None = None

    def __post_init__(self) -> None:
        check_task_name(self.name)
        if len(self.labels) > MAX_LABELS:
            raise InputError(f"at most {MAX_LABELS} labels, got {len(self.labels)}", code="labels_invalid")
        names = [label.name for label in self.labels]
        if len(set(names)) != len(names):
            raise InputError(f"duplicate label names in {names}", code="labels_invalid")

    def to_record(self) -> dict[str, Any]:
        """The Avro ``TaskRequest`` dict (``prompt`` only when there is one: the records and job options of the
        tasks before generate stay as they were)."""
        out: dict[str, Any] = {"name": self.name, "labels": [label.to_record() for label in self.labels]}
        if self.prompt is not None:
            out["prompt"] = self.prompt.to_record()
        return out

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> TaskRequest:
        """From the Avro ``TaskRequest`` dict.

        Raises:
            InputError: an invalid name or labels.
        """
        prompt = record.get("prompt")
        return cls(str(record["name"]), tuple(Label.from_record(x) for x in record.get("labels") or ()),
                   None if prompt is None else Prompt.from_record(prompt))


@cache
def _unnamed_requests() -> tuple[TaskRequest, ...]:
    """The requests of a record that names no task (made once: every chunk of an embed-only job asks this)."""
    return tuple(TaskRequest(name) for name in tasks_of(()))


def requested_tasks(records: Sequence[Mapping[str, Any]]) -> tuple[TaskRequest, ...]:
    """The tasks a record's ``tasks`` field asks for; empty: embed alone (``legacy.tasks_of``).

    Raises:
        InputError: an invalid request, a task named twice, or more than ``MAX_TASKS``.
    """
    if not records:
        return _unnamed_requests()
    requests = tuple(TaskRequest.from_record(r) for r in records)
    names = [r.name for r in requests]
    if len(set(names)) != len(names):
        raise InputError(f"a task is named twice: {names}", code="task_invalid")
    if len(requests) > MAX_TASKS:
        raise InputError(f"at most {MAX_TASKS} tasks, got {len(requests)}", code="task_invalid")
    return requests


def task_names(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """The names of the tasks a record's ``tasks`` field asks for (``[embed]`` when empty)."""
    return [r.name for r in requested_tasks(records)]


@dataclass(frozen=True, slots=True)
class Span:
    """A labelled span a model found in one chunk's text, in offsets of that text."""

    start: int
    end: int
    label: str
    score: float = 1.0


@dataclass(frozen=True, slots=True)
class Mention:
    """An entity mention in document offsets (``text[start:end]`` of the document's extracted text).

    ``cut``: it touches an edge where its chunk was cut from a neighbour, so it may be a fragment of a
    longer mention that the neighbour holds whole (only chunk results carry it).
    """

    text: str
    label: str
    start: int
    end: int
    page: int
    score: float = 1.0
    cut: bool = False

    def to_record(self, *, chunk: bool = True) -> dict[str, Any]:
        """The Avro dict: ``ChunkMention`` (with ``cut``) or, ``chunk=False``, ``EntityMention``."""
        out: dict[str, Any] = {"text": self.text, "label": self.label, "start": self.start, "end": self.end,
                               "page": self.page, "score": float(self.score)}
        if chunk:
            out["cut"] = self.cut
        return out

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Mention:
        """From a ``ChunkMention`` or ``EntityMention`` dict."""
        return cls(str(record["text"]), str(record["label"]), int(record["start"]), int(record["end"]),
                   int(record["page"]), float(record.get("score", 1.0)), bool(record.get("cut", False)))


@dataclass(frozen=True, slots=True)
class EntitySummary:
    """One distinct entity of a document: (label, normalised text), how often and on which pages."""

    label: str
    text: str
    count: int
    pages: tuple[int, ...]

    def to_record(self) -> dict[str, Any]:
        """The Avro ``EntitySummary`` dict."""
        return {"label": self.label, "text": self.text, "count": self.count, "pages": list(self.pages)}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> EntitySummary:
        """From the Avro ``EntitySummary`` dict."""
        return cls(str(record["label"]), str(record["text"]), int(record["count"]),
                   tuple(int(p) for p in record.get("pages") or ()))


@dataclass(frozen=True, slots=True)
class ChunkOutput:
    """A task's output for one chunk; each task fills its own field.

    Attributes:
        embedding: embed: the vector.
        label_scores: classify: a score per label, summing to 1.
        spans: entities: labelled spans in offsets of the chunk's text (the service places them in the
            document: ``place_spans``).
        output: a user task: any JSON-serializable value.
    """

    embedding: Sequence[float] = ()
    label_scores: Mapping[str, float] = field(default_factory=dict)
    spans: tuple[Span, ...] = ()
    output: Any = None


@dataclass(frozen=True, slots=True)
class FoldInput:
    """What a fold sees of one chunk's ok result, or of a failed one whose task gave it an output (``failed``).

    Attributes:
        index: the chunk's 0-based index in its document.
        token_count: its tokens (folds weight by ``max(token_count, 1)``).
        page_start: its first page (1-based).
        page_end: its last page.
        embedding: embed: the vector.
        label_scores: classify: score per label.
        mentions: entities: the chunk's mentions in document offsets.
        output: a user task: the decoded JSON value of its ``ChunkOutput.output`` (of a failed chunk: its
            exception's ``failure_output``).
        failed: the chunk failed: ``output`` is what its failed attempts cost, never an answer.
    """

    index: int
    token_count: int
    page_start: int
    page_end: int
    embedding: Sequence[float] = ()
    label_scores: Mapping[str, float] = field(default_factory=dict)
    mentions: tuple[Mention, ...] = ()
    output: Any = None
    failed: bool = False


@dataclass(frozen=True, slots=True)
class DocumentOutput:
    """A task's result for one document; each task fills its own fields (they go into DocumentCompleted).

    Attributes:
        embedding: embed: the token-weighted mean of the chunk vectors.
        label_scores: classify: score per label (token-weighted mean of the chunks', summing to 1).
        top_label: classify: the best label.
        top_chunks: classify: the chunk indices that scored highest for ``top_label``, best first.
        mentions: entities: every mention once, in document order, overlap duplicates merged.
        entities: entities: the distinct entities with counts and pages.
        mentions_truncated: entities: more mentions arrived than the fold keeps.
        output: a user task: any JSON-serializable value.
    """

    embedding: Sequence[float] = ()
    label_scores: Mapping[str, float] = field(default_factory=dict)
    top_label: str | None = None
    top_chunks: tuple[int, ...] = ()
    mentions: tuple[Mention, ...] = ()
    entities: tuple[EntitySummary, ...] = ()
    mentions_truncated: bool = False
    output: Any = None


@runtime_checkable
class TaskFold(Protocol):
    """Folds one document's chunk results into its result, in the reducer (no model, no I/O).

    The state is any JSON-serializable value (the reducer keeps it in a Faust table as JSON).
    ``add`` must commute: any order of the same chunks gives the same ``finish``. The reducer calls
    ``add`` once per chunk index with an ok result, never twice for one index; and once for a failed result
    that carries an output (``FoldInput.failed``: what the failure cost, ``failure_output``), before an ok
    result of the same index that replaces it. Only a task whose exceptions carry ``FAILURE_OUTPUT`` gives
    its fold failed chunks.
    """

    def empty(self) -> Any:
        """The state of a document before any chunk."""

    def add(self, state: Any, chunk: FoldInput) -> Any:
        """The state with one more chunk folded in (``state`` itself is not changed)."""

    def finish(self, state: Any, *, chunk_count: int) -> DocumentOutput:
        """The document's result (``state`` may hold no chunk at all: every chunk failed)."""


@runtime_checkable
class StoredAnswersFold(TaskFold, Protocol):
    """A fold whose document result is made of its chunks' answers, which the store keeps (the generate task).

    Its state keeps no answer, only what stays the same size whatever the document's length (kind, token
    totals): a state that kept every chunk's answer would grow with the document and be written again on every
    chunk (docs/reducer.md "Documents"). When the document's last chunk is in, the reducer reads the answers
    from the document's stored chunk rows (the inference service writes a chunk's row before its record: the
    row is there before the reducer sees it) and hands them to ``finish_with``; ``finish`` alone gives the
    document without its answers.
    """

    def answer_of(self, state: Any, output: Any) -> Any:
        """The answer a stored ok chunk output (its decoded JSON) holds for a document of ``state``.

        Raises:
            TaskOutputError: it holds none (not an answer, or an answer of another kind than the document's).
        """

    def finish_with(self, state: Any, answers: Sequence[tuple[int, Any]], *, chunk_count: int) -> DocumentOutput:
        """The document's result with its chunk answers, ``(chunk index, answer)`` in any order."""


@dataclass(frozen=True, slots=True)
class PreparedTexts:
    """A micro-batch made ready for ``Task.run``.

    Attributes:
        texts: the chunk texts, in the order outputs come back.
        requests: the task request of each text (its job's labels, for classify).
        features: the task's own prepared inputs (opaque to the pipeline).
    """

    texts: tuple[str, ...]
    requests: tuple[TaskRequest, ...]
    features: Any = None


@runtime_checkable
class Task(Protocol):
    """A loaded task runner: chunk texts in, one ``ChunkOutput`` each out (in an inference service).

    Optional, found by name: ``bind_metrics(metrics, service)`` (called once by the pipeline, to count
    into its ``docstream.metrics.Metrics``), ``close()`` (called once when the pipeline stops), and
    ``token_ids_of`` with ``prepare_token_ids(texts, requests, token_ids)``: the fingerprint of the tokenizer whose
    ids the runner takes, and ``prepare`` from the ids the chunker carried, None for a text to tokenize
    (``token_ids_accepted``, ``usable_token_ids``).
    """

    @property
    def name(self) -> str:
        """The task name (embed, classify, entities, or a user task's)."""

    @property
    def model_id(self) -> str:
        """The model name (and revision) of the results, for a request without options of its own."""

    @property
    def max_tokens(self) -> int:
        """Longest input in tokens; longer texts are truncated by the model."""

    @property
    def runtime(self) -> str:
        """Label of the backend/device/precision the model runs with (goes with every result)."""

    @property
    def device(self) -> str:
        """Device of the forward pass, as torch names it: ``cpu``, ``cuda:0``, ``mps`` (job accounting)."""

    def model_id_for(self, request: TaskRequest) -> str:
        """The ``model_id`` results of ``request`` are keyed by (classify: the labels are part of it)."""

    def prepare(self, texts: Sequence[str], requests: Sequence[TaskRequest]) -> PreparedTexts:
        """Make a micro-batch ready (tokenize); cheap, runs beside ``run`` on another thread."""

    def run(self, batch: PreparedTexts) -> Sequence[ChunkOutput]:
        """Run the model: one output per text, same order. It returns once the device is done.

        Any exception fails the batch, and the pipeline isolates the text at fault by splitting it.
        ``docstream.errors.PartialBatchError`` instead names the texts that failed alone (their
        exceptions in place of their outputs; an exception may carry what its attempts cost in its
        ``FAILURE_OUTPUT`` attribute, which the chunk's failed row and record keep).
        ``docstream.errors.BackendUnavailable`` says the model's backend does not answer: the pipeline
        waits and runs the batch again.
        """

    def warm_up(self) -> None:
        """Run one small batch so the first real batch pays no start-up cost."""


@runtime_checkable
class DocumentStepTask(Task, Protocol):
    """The runner of a task that declares a document-level step (``TaskClass.document_step``: generate).

    Its fold may leave a document's output waiting for a step (``docstream.tasks.reduction.needs_document_step``):
    the reducer then publishes the document on the mapped topic instead of the completed one, and the document
    stage (``docstream document-stage``) finishes it with ``finish_document``.
    """

    def finish_document(self, output: dict[str, Any], request: TaskRequest) -> dict[str, Any]:
        """The document's output with its step made: ``output`` is the folded one, ``request`` the job's request
        of this task whose ``model_id_for`` is the document's.

        Raises:
            PoisonRecord: this document's step cannot be made (the document fails with its code); its
                ``FAILURE_OUTPUT`` may hold what the attempts cost.
            BackendUnavailable: the model does not answer (the record is retried).
        """


@dataclass(frozen=True, slots=True)
class TaskContext:
    """What a task's ``load`` is given: the settings sections a runner is loaded from.

    Attributes:
        inference: the model, its device and runtime, warm-up (``inference``).
        tasks: the tasks' options (``tasks``): a built-in task's section, a user task's own options in
            ``tasks.options[name]``, the user tasks by name in ``tasks.custom``.
    """

    inference: InferenceSettings
    tasks: TasksSettings


class TaskClass(Protocol):
    """What the registry finds (built in, an entry point in group ``docstream.tasks``, or ``module:Class``).

    ``name`` and ``fold`` are read without loading any model (the reducer needs only the fold).

    Optional declarations, found by name (class attributes, read on the class or a runner of it; absent: False):

    * ``document_step: ClassVar[bool]``: the task's map-reduce has a document-level step; its runner is then a
      ``DocumentStepTask`` (``has_document_step``);
    * ``always_reuse_stored: ClassVar[bool]``: the inference pipeline reads a batch's stored rows before running it
      whatever ``inference.reuse_stored`` says, because a result costs far more than a read: a paid model call
      that is never asked again once its answer is stored (``always_reuses_stored``).
    """

    name: ClassVar[str]
    fold: ClassVar[TaskFold]

    @classmethod
    def load(cls, context: TaskContext) -> Task:
        """Load the model (from a local folder or an installed package, never a hub) and return the runner.

        ``context`` holds the process's ``inference`` and ``tasks`` settings sections; a user task's own options
        are in ``context.tasks.options[name]``.
        """


def failure_output(error: BaseException) -> dict[str, Any] | None:
    """What a chunk's failed attempts cost, as its task put it on the exception (``FAILURE_OUTPUT``), or None."""
    value = getattr(error, FAILURE_OUTPUT, None)
    return value if isinstance(value, dict) else None


def place_spans(text: str, spans: Sequence[Span], *, char_start: int, page_start: int,
                page_breaks: Sequence[int], first: bool, last: bool) -> tuple[Mention, ...]:
    """``spans`` of one chunk's ``text`` as document mentions: offsets, page and ``cut``.

    Args:
        text: the chunk's text (``document_text[char_start:char_end]``).
        spans: what the model found, in offsets of ``text``; spans outside it or empty are dropped.
        char_start: the chunk's first offset in the document text.
        page_start: the chunk's first page.
        page_breaks: document offsets where the chunk's later pages begin (ChunkCreated.page_breaks).
        first: the chunk is the document's first (nothing was cut before it).
        last: the chunk is the document's last.

    Returns:
        At most ``MAX_CHUNK_MENTIONS`` mentions, by offset. A mention is ``cut`` when only spaces lie
        between it and an edge where the chunk was cut from its neighbour.
    """
    out: list[Mention] = []
    for span in sorted(spans, key=lambda s: (s.start, s.end, s.label)):
        if not 0 <= span.start < span.end <= len(text):
            continue
        start = char_start + span.start
        page = page_start + bisect_right(page_breaks, start)
        cut = (not first and not text[:span.start].strip()) or (not last and not text[span.end:].strip())
        score = min(max(float(span.score), 0.0), 1.0)
        out.append(Mention(text[span.start:span.end], span.label, start, char_start + span.end, page, score, cut))
        if len(out) >= MAX_CHUNK_MENTIONS:
            break
    return tuple(out)


def bind_task_metrics(task: object, metrics: Any, service: str) -> None:
    """Call the task runner's optional ``bind_metrics(metrics, service)`` (an endpoint counts its requests)."""
    bind = getattr(task, "bind_metrics", None)
    if callable(bind):
        bind(metrics, service)


def token_ids_accepted(task: object) -> str | None:
    """The fingerprint of the tokenizer whose token ids the task runner takes (its optional ``token_ids_of``, with
    ``prepare_token_ids``); None: it tokenizes every text itself."""
    accepted = getattr(task, "token_ids_of", None)
    return accepted if isinstance(accepted, str) and callable(getattr(task, "prepare_token_ids", None)) else None


def usable_token_ids(token_ids: Sequence[bytes], tokenizers: Sequence[str | None], accepted: str) -> list[bytes | None]:
    """Each chunk's carried token ids where they are of the ``accepted`` tokenizer, else None (to tokenize)."""
    pairs = zip(token_ids, tokenizers, strict=True)
    return [ids if ids and tokenizer == accepted else None for ids, tokenizer in pairs]


def close_task(task: object) -> None:
    """Call the task runner's optional ``close()`` (an endpoint closes its connections)."""
    close = getattr(task, "close", None)
    if callable(close):
        close()


def has_document_step(task: object) -> bool:
    """Whether a task class, or a runner of one, declares a document-level step (``TaskClass.document_step``)."""
    return getattr(task, "document_step", False) is True


def always_reuses_stored(task: object) -> bool:
    """Whether a task class, or a runner of one, declares that its stored results are always reused
    (``TaskClass.always_reuse_stored``)."""
    return getattr(task, "always_reuse_stored", False) is True
