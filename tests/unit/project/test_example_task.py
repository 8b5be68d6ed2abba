"""The worked example of a user task (examples/custom_task): found by module:Class, run, folded in any order."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from docstream.errors import ConfigError
from docstream.settings import InferenceSettings, TasksSettings
from docstream.tasks.base import FoldInput, Task, TaskContext, TaskOutputError, TaskRequest
from docstream.tasks.registry import load_task, resolve_task, task_fold
from examples.custom_task.sentiment import DEFAULT_MODEL_PATH, SentimentTask

REFERENCE = "examples.custom_task.sentiment:SentimentTask"
DEFAULTS = TaskContext(InferenceSettings(), TasksSettings())
TEXTS = [
    "The support team was helpful and the new release is excellent, fast and reliable. We recommend it.",
    "The update crashed twice, the export failed and the documentation is confusing. A terrible week.",
    "The meeting is on Tuesday at ten in the second floor room.",
    "It was not bad at all: the installation was easy and the results impressive.",
]


def _fold_outputs(outputs: list[object], order: list[int]) -> object:
    fold = task_fold("sentiment")
    state = fold.empty()
    for index in order:
        state = json.loads(json.dumps(fold.add(state, FoldInput(index, 10 + 5 * index, 1, 1, output=outputs[index]))))
    return fold.finish(state, chunk_count=len(outputs)).output


def test_the_example_loads_through_the_registry_by_module_and_class() -> None:
    assert resolve_task(REFERENCE) == "sentiment"

    task = load_task(REFERENCE, DEFAULTS)

    assert isinstance(task, SentimentTask) and isinstance(task, Task)
    assert task.model_id == "docstream-example-sentiment-lexicon@1"
    assert task.model_id_for(TaskRequest("sentiment")) == task.model_id


def test_it_scores_chunks_and_folds_them_in_any_order() -> None:
    task = load_task(REFERENCE, DEFAULTS)
    outputs = [o.output for o in task.run(task.prepare(TEXTS, [TaskRequest("sentiment")] * len(TEXTS)))]

    scores = [o["score"] for o in outputs]
    assert scores[0] > 0.5 and scores[1] < -0.5 and scores[2] == 0.0 and scores[3] > 0  # "not bad" is positive
    expected = _fold_outputs(outputs, list(range(len(TEXTS))))
    assert expected["most_positive"] == [0, 3]
    assert expected["most_negative"] == [1]
    assert expected["label"] in ("positive", "negative", "neutral")
    for order in itertools.permutations(range(len(TEXTS))):
        assert _fold_outputs(outputs, list(order)) == expected


def test_the_document_score_is_the_token_weighted_mean() -> None:
    fold = SentimentTask.fold
    state = fold.empty()
    for index, (tokens, score) in enumerate([(300, 0.5), (100, -0.5), (0, 1.0)]):
        state = fold.add(state, FoldInput(index, tokens, 1, 1, output={"score": score, "matched": 1}))

    out = fold.finish(state, chunk_count=3).output

    assert out["score"] == pytest.approx((150 - 50 + 1) / 401, abs=1e-6)
    assert out["label"] == "positive"
    assert fold.finish(fold.empty(), chunk_count=3).output is None


def test_the_lexicon_comes_from_the_configured_folder(tmp_path: Path) -> None:
    lexicon = json.loads((DEFAULT_MODEL_PATH / "lexicon.json").read_text())
    (tmp_path / "lexicon.json").write_text(json.dumps({**lexicon, "version": "2", "valences": {"tuesday": 3}}))
    context = TaskContext(InferenceSettings(), TasksSettings(options={"sentiment": {"model_path": str(tmp_path)}}))

    task = SentimentTask.load(context)
    (out,) = task.run(task.prepare([TEXTS[2]], [TaskRequest("sentiment")]))

    assert task.model_id.endswith("@2")
    assert out.output["score"] > 0
    with pytest.raises(ConfigError) as caught:
        SentimentTask.load(TaskContext(InferenceSettings(),
                                       TasksSettings(options={"sentiment": {"model_path": str(tmp_path / "x")}})))
    assert caught.value.code == "model_unavailable"


@pytest.mark.parametrize("output", [None, {"score": 2.0, "matched": 1}, {"score": "high", "matched": 1}, [0.5]])
def test_a_malformed_chunk_output_raises(output: object) -> None:
    fold = SentimentTask.fold
    with pytest.raises(TaskOutputError):
        fold.add(fold.empty(), FoldInput(0, 10, 1, 1, output=output))
