"""The classify runner: zero-shot with the bundled embedding model, and a local sequence-classification folder."""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from docstream.errors import ConfigError, InputError
from docstream.models.embedding import Embedder, PreparedBatch, Runtime, load_embedder
from docstream.models.files import resolve_model_path
from docstream.settings import ClassifySettings, InferenceSettings, TasksSettings
from docstream.tasks.base import CLASSIFY, Label, Task, TaskContext, TaskRequest
from docstream.tasks.classify import ClassifyTask, FolderClassifyTask, zero_shot_model_id
from docstream.tasks.fold_classify import ClassifyFold
from docstream.tasks.registry import load_task

TOPICS = {
    "sport": "The striker scored twice in the second half and the home side won the league match three to one, "
             "while the goalkeeper saved a penalty in front of a sold-out stadium.",
    "biology": "Photosynthesis takes place in the chloroplasts of plant cells, where chlorophyll absorbs light and "
               "the plant turns carbon dioxide and water into glucose and oxygen.",
    "finance": "The central bank raised interest rates by a quarter point to curb inflation, and bond yields rose "
               "as investors expected borrowing costs to stay high for longer.",
}
LABELS = (Label("sport", "sport, football, games and athletes"),
          Label("biology", "biology, plants, cells and living organisms"),
          Label("finance", "finance, banks, money, interest rates and markets"))
CPU = InferenceSettings(device="cpu", runtime="fp32", warmup=False)


class _CountingEmbedder:
    """The real embedder, counting the texts each ``embed`` call gets."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner
        self.calls: list[tuple[str, ...]] = []

    model_id = property(lambda self: self._inner.model_id)
    dimension = property(lambda self: self._inner.dimension)
    max_tokens = property(lambda self: self._inner.max_tokens)
    device = property(lambda self: self._inner.device)

    @property
    def runtime(self) -> Runtime:
        return self._inner.runtime

    def prepare(self, texts: Sequence[str]) -> PreparedBatch:
        return self._inner.prepare(texts)

    def embed(self, batch: PreparedBatch) -> npt.NDArray[np.float32]:
        self.calls.append(batch.texts)
        return self._inner.embed(batch)

    def encode(self, texts: Sequence[str], *, batch_size: int) -> npt.NDArray[np.float32]:
        return self._inner.encode(texts, batch_size=batch_size)

    def warm_up(self) -> None:
        self._inner.warm_up()


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return load_embedder(CPU)


def _requests(labels: Sequence[Label], count: int) -> list[TaskRequest]:
    return [TaskRequest(CLASSIFY, tuple(labels))] * count


def test_importing_classify_imports_no_model_library() -> None:
    """The reducer imports the module for its fold."""
    code = "import sys, docstream.tasks.classify; print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_zero_shot_finds_the_topic_of_clearly_different_texts(embedder: Embedder) -> None:
    task = ClassifyTask(embedder, temperature=0.05)
    texts = list(TOPICS.values())

    outputs = task.run(task.prepare(texts, _requests(LABELS, len(texts))))

    for expected, output in zip(TOPICS, outputs, strict=True):
        scores = output.label_scores
        assert max(scores, key=scores.__getitem__) == expected
        assert set(scores) == {"sport", "biology", "finance"}
        assert math.isclose(sum(scores.values()), 1.0, rel_tol=1e-9)
        assert all(0.0 < s < 1.0 for s in scores.values())  # a softmax, not a one-hot


def test_a_document_of_those_chunks_folds_to_its_topic(embedder: Embedder) -> None:
    from docstream.tasks.base import FoldInput

    task = ClassifyTask(embedder, labels=LABELS)
    texts = [TOPICS["biology"], TOPICS["biology"] + " " + TOPICS["biology"], TOPICS["sport"]]
    outputs = task.run(task.prepare(texts, _requests((), len(texts))))
    fold = ClassifyFold()
    state = fold.empty()
    for index, (text, output) in enumerate(zip(texts, outputs, strict=True)):
        state = fold.add(state, FoldInput(index, len(text.split()), 1, 1, label_scores=output.label_scores))

    result = fold.finish(state, chunk_count=len(texts))

    assert result.top_label == "biology"
    assert result.top_chunks[:2] in ((0, 1), (1, 0))
    assert math.isclose(sum(result.label_scores.values()), 1.0, rel_tol=1e-9)


def test_label_embeddings_are_computed_once_per_label_set(embedder: Embedder) -> None:
    counting = _CountingEmbedder(embedder)
    task = ClassifyTask(counting)
    texts = list(TOPICS.values())

    task.run(task.prepare(texts, _requests(LABELS, 3)))
    assert len(counting.calls) == 2  # the chunks, then the labels
    assert counting.calls[1] == tuple(label.text for label in LABELS)

    counting.calls.clear()
    task.run(task.prepare(texts[:2], _requests(LABELS, 2)))
    assert counting.calls == [tuple(texts[:2])]  # no label embedded again


def test_a_batch_of_two_label_sets_scores_each_over_its_own(embedder: Embedder) -> None:
    task = ClassifyTask(embedder)
    other = (Label("plants"), Label("money"))
    texts = [TOPICS["biology"], TOPICS["finance"]]
    requests = [TaskRequest(CLASSIFY, LABELS), TaskRequest(CLASSIFY, other)]

    first, second = task.run(task.prepare(texts, requests))

    assert set(first.label_scores) == {"sport", "biology", "finance"}
    assert set(second.label_scores) == {"plants", "money"}
    assert max(second.label_scores, key=second.label_scores.__getitem__) == "money"


def test_a_request_without_labels_uses_the_configured_ones(embedder: Embedder) -> None:
    task = ClassifyTask(embedder, labels=LABELS)

    (output,) = task.run(task.prepare([TOPICS["finance"]], [TaskRequest(CLASSIFY)]))

    assert max(output.label_scores, key=output.label_scores.__getitem__) == "finance"
    assert task.model_id_for(TaskRequest(CLASSIFY)) == task.model_id


def test_no_labels_anywhere_fails_the_batch_typed(embedder: Embedder) -> None:
    task = ClassifyTask(embedder)

    with pytest.raises(InputError) as caught:
        task.run(task.prepare(["some text"], [TaskRequest(CLASSIFY)]))
    assert caught.value.code == "labels_missing"


def test_two_label_sets_give_two_model_ids(embedder: Embedder) -> None:
    task = ClassifyTask(embedder, temperature=0.05)
    one = task.model_id_for(TaskRequest(CLASSIFY, LABELS))
    two = task.model_id_for(TaskRequest(CLASSIFY, LABELS[:2]))
    described = task.model_id_for(TaskRequest(CLASSIFY, (Label("sport"), *LABELS[1:])))

    assert len({one, two, described}) == 3
    assert one.startswith(f"classify/{embedder.model_id}/")
    assert len(one.rsplit("/", 1)[1]) == 12
    assert one == task.model_id_for(TaskRequest(CLASSIFY, tuple(reversed(LABELS))))  # order changes no score
    assert one != zero_shot_model_id(embedder.model_id, LABELS, 0.1)


def test_load_through_the_registry_with_configured_labels() -> None:
    context = TaskContext(CPU, TasksSettings(
        classify=ClassifySettings(labels=["sport=sport, football and athletes", "finance"])))

    task = load_task(CLASSIFY, context)

    assert isinstance(task, ClassifyTask) and isinstance(task, Task)
    assert task.labels == (Label("sport", "sport, football and athletes"), Label("finance"))
    assert task.model_id == zero_shot_model_id("all-MiniLM-L6-v2", task.labels, 0.05)
    assert task.max_tokens > 0 and task.device == "cpu" and task.runtime.startswith("torch/cpu/fp32")


def test_run_unrequested_without_configured_labels_refuses_to_start() -> None:
    context = TaskContext(CPU, TasksSettings(run_unrequested=True))

    with pytest.raises(ConfigError) as caught:
        ClassifyTask.load(context)
    assert caught.value.code == "labels_missing"


def test_invalid_configured_labels_refuse_to_start() -> None:
    context = TaskContext(CPU, TasksSettings(classify=ClassifySettings(labels=["a", "a"])))

    with pytest.raises(ConfigError) as caught:
        ClassifyTask.load(context)
    assert caught.value.code == "labels_invalid"


# -- a local Hugging Face sequence-classification folder ------------------------------------------------------

FOLDER_LABELS = {0: "negative", 1: "neutral", 2: "positive"}


@pytest.fixture(scope="module")
def classifier_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny randomly initialised BERT classifier with the bundled model's tokenizer, saved like a real one."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    folder = tmp_path_factory.mktemp("tiny-sentiment")
    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model_path(None)), local_files_only=True)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128, num_labels=3, id2label=FOLDER_LABELS,
                        label2id={v: k for k, v in FOLDER_LABELS.items()})
    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder


def _folder_settings(folder: Path, **classify: str) -> TaskContext:
    return TaskContext(CPU, TasksSettings(
        classify=ClassifySettings(model_path=str(folder), **classify)))  # type: ignore[arg-type]


def test_a_classifier_folder_scores_its_own_labels(classifier_folder: Path) -> None:
    task = load_task(CLASSIFY, _folder_settings(classifier_folder))
    texts = [*TOPICS.values(), "short", "word " * 500]

    outputs = task.run(task.prepare(texts, [TaskRequest(CLASSIFY)] * len(texts)))

    assert isinstance(task, FolderClassifyTask) and isinstance(task, Task)
    assert len(outputs) == len(texts)
    for output in outputs:
        assert list(output.label_scores) == ["negative", "neutral", "positive"]
        assert math.isclose(sum(output.label_scores.values()), 1.0, rel_tol=1e-6)
    assert task.model_id == f"classify/{classifier_folder.name}"
    assert task.model_id_for(TaskRequest(CLASSIFY, (Label("positive"),))) == task.model_id
    assert task.max_tokens == 128


def test_a_classifier_folder_takes_its_model_id_from_settings(classifier_folder: Path) -> None:
    task = FolderClassifyTask.load(_folder_settings(classifier_folder, model_id="sentiment-tiny@1"))

    assert task.model_id == "sentiment-tiny@1"


def test_a_request_naming_other_labels_than_the_folders_fails_typed(classifier_folder: Path) -> None:
    task = FolderClassifyTask.load(_folder_settings(classifier_folder))
    same = TaskRequest(CLASSIFY, tuple(Label(n, "described") for n in reversed(FOLDER_LABELS.values())))

    assert len(task.run(task.prepare(["fine"], [same]))) == 1
    with pytest.raises(InputError) as caught:
        task.run(task.prepare(["fine"], [TaskRequest(CLASSIFY, LABELS)]))
    assert caught.value.code == "labels_mismatch"


def test_a_folder_that_is_no_classifier_refuses_to_start(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        FolderClassifyTask.load(_folder_settings(tmp_path))
    assert caught.value.code == "model_unavailable"
    with pytest.raises(ConfigError):
        FolderClassifyTask.load(_folder_settings(tmp_path / "absent"))
