"""`docstream run --task embed --task entities --task classify --labels ...`: three tasks over one job, in one process.

Generated PDFs on three clearly different topics hold known people, organisations and places on known pages
(tests/fixtures/task_documents.py); chunked small, two of the names are cut by a chunk edge. Checked in the run's
store, where `docstream results` reads: every known mention found exactly once on its page (the fold merged the
overlap's duplicates and dropped the cut fragments), each document's top label its topic, and the embeddings
beside them under their own model_id.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from docstream.store import SqliteStore
from docstream.store.base import DocumentResultRow
from docstream_ingest.export import task_path
from tests.fixtures.documents import make_pdf_of_paragraphs
from tests.fixtures.services import DOCSTREAM, shared_broker_env
from tests.fixtures.task_documents import CUT_MENTIONS, KNOWN_MENTIONS, TASK_CHUNKING, TOPIC_LABELS, TOPIC_PAGES

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def task_run(tmp_path_factory: pytest.TempPathFactory,
             kafka_bootstrap: str) -> tuple[Path, dict[str, dict[str, DocumentResultRow]], str]:
    """A folder where `docstream run` ran the three tasks over the topic PDFs: results by topic, then by task."""
    folder = tmp_path_factory.mktemp("tasks")
    (folder / "in").mkdir()
    for topic, pages in TOPIC_PAGES.items():
        (folder / "in" / f"{topic}.pdf").write_bytes(make_pdf_of_paragraphs(pages).data)
    env = shared_broker_env(kafka_bootstrap, "tasks", COLUMNS="200",
                            DOCSTREAM_CHUNKER__MAX_TOKENS=str(TASK_CHUNKING["max_tokens"]),
                            DOCSTREAM_CHUNKER__OVERLAP_TOKENS=str(TASK_CHUNKING["overlap_tokens"]))
    done = subprocess.run(
        [str(DOCSTREAM), "run", "in", "--task", "embed", "--task", "entities", "--task", "classify",
         "--labels", ",".join(TOPIC_LABELS), "--out", "out/results.jsonl", "--timeout", "500"],
        cwd=folder, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    job_id = json.loads((folder / ".docstream" / "run.json").read_text())["job_id"]
    store = SqliteStore(folder / ".docstream" / "docstream.db")
    try:
        results: dict[str, dict[str, DocumentResultRow]] = {}
        for row in store.iter_job_documents(job_id):
            topic = Path(row.filename or "").stem
            results[topic] = {r.task: r for r in store.list_document_results(row.doc_id)}
    finally:
        store.close()
    return folder, results, job_id


def test_every_task_completed_every_document(task_run: tuple[Path, dict[str, dict[str, DocumentResultRow]], str],
                                             ) -> None:
    _, results, _ = task_run
    assert set(results) == set(TOPIC_PAGES)
    for topic, by_task in results.items():
        assert set(by_task) == {"embed", "entities", "classify"}, topic
        assert {r.status for r in by_task.values()} == {"completed"}, topic
        assert len({r.model_id for r in by_task.values()}) == 3  # side by side, each under its own model_id
        assert len(by_task["embed"].embedding) == 384 and by_task["entities"].embedding == []


def test_out_holds_a_line_per_document_and_task_asked_for(
    task_run: tuple[Path, dict[str, dict[str, DocumentResultRow]], str],
) -> None:
    folder, results, _ = task_run
    lines = [json.loads(x) for x in (folder / "out" / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    assert sorted((Path(x["filename"]).name, x["task"]) for x in lines) == sorted(
        (f"{topic}.pdf", task) for topic in TOPIC_PAGES for task in ("classify", "embed", "entities"))
    assert {x["status"] for x in lines} == {"completed"}
    by_key = {(Path(x["filename"]).stem, x["task"]): x for x in lines}
    for topic, by_task in results.items():
        assert by_key[(topic, "classify")]["top_label"] == by_task["classify"].top_label
        assert len(by_key[(topic, "entities")]["mentions"]) == len(by_task["entities"].mentions)
        assert len(by_key[(topic, "embed")]["embedding"]) == 384


def test_each_known_mention_is_found_exactly_once_on_its_page(
    task_run: tuple[Path, dict[str, dict[str, DocumentResultRow]], str],
) -> None:
    _, results, _ = task_run
    for topic, known in KNOWN_MENTIONS.items():
        mentions = results[topic]["entities"].mentions
        for label, text, page in known:
            found = [m for m in mentions if m.text == text]
            assert len(found) == 1, (topic, text, [(m.text, m.label, m.page) for m in mentions])
            assert (found[0].label, found[0].page) == (label, page), (topic, found[0])
        index = {(e.label, e.text): e for e in results[topic]["entities"].entities}
        for label, text, page in known:
            entry = index[(label, " ".join(text.split()).casefold())]
            assert (entry.count, entry.pages) == (1, (page,)), entry


def test_the_names_were_cut_by_a_chunk_edge_and_merged_whole(
    task_run: tuple[Path, dict[str, dict[str, DocumentResultRow]], str],
) -> None:
    """The premise of the boundary case: a chunk edge falls inside each of CUT_MENTIONS."""
    folder, results, _ = task_run
    store = SqliteStore(folder / ".docstream" / "docstream.db")
    try:
        for topic, by_task in results.items():
            entities = by_task["entities"]
            for mention in (m for m in entities.mentions if m.text in CUT_MENTIONS):
                edges = [edge for chunk in store.iter_chunks(entities.doc_id, entities.model_id)
                         for edge in (chunk.char_start, chunk.char_end)]
                assert any(mention.start < edge < mention.end for edge in edges), (topic, mention)
                fragments = [m for m in entities.mentions if m.start < mention.end and mention.start < m.end]
                assert fragments == [mention]  # the cut fragments ("Janet", "Darwin") were dropped
    finally:
        store.close()
    cut = {m.text for by_task in results.values() for m in by_task["entities"].mentions if m.text in CUT_MENTIONS}
    assert cut == set(CUT_MENTIONS)


def test_documents_on_different_topics_get_their_topic_as_top_label(
    task_run: tuple[Path, dict[str, dict[str, DocumentResultRow]], str],
) -> None:
    _, results, _ = task_run
    for topic, by_task in results.items():
        classified = by_task["classify"]
        assert classified.top_label == topic, (topic, classified.label_scores)
        assert set(classified.label_scores) == {"sport", "biology", "finance"}
        assert abs(sum(classified.label_scores.values()) - 1.0) < 1e-6
        assert classified.top_chunks and all(0 <= i < classified.chunk_count for i in classified.top_chunks)


def test_a_users_own_task_runs_by_module_and_class_beside_embed(tmp_path: Path, kafka_bootstrap: str) -> None:
    """examples/custom_task's sentiment task, named as module:Class on the command line (PYTHONPATH is the
    repository root, as its README says): its document output is in the run's results, beside embed's."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "notes.pdf").write_bytes(make_pdf_of_paragraphs(TOPIC_PAGES["sport"]).data)
    env = shared_broker_env(kafka_bootstrap, "custom-task", COLUMNS="200",
                            PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    run = subprocess.run(
        [str(DOCSTREAM), "run", "in", "--task", "embed", "--task", "examples.custom_task.sentiment:SentimentTask",
         "--out", "results.parquet", "--timeout", "300"], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=400, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    for task in ("embed", "sentiment"):  # --out of Parquet: a file per task, named in the summary
        written = pq.read_table(task_path(tmp_path / "results.parquet", task))
        assert written.column("task").to_pylist() == [task] and written.column("status").to_pylist() == ["completed"]
        assert f"results.{task}.parquet" in run.stdout
    job_id = json.loads((tmp_path / ".docstream" / "run.json").read_text())["job_id"]
    exported = subprocess.run([str(DOCSTREAM), "results", job_id, "--task", "sentiment"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120, check=False)
    assert exported.returncode == 0, exported.stderr[-3000:]
    [line] = [json.loads(x) for x in exported.stdout.splitlines()]
    assert (line["task"], line["status"]) == ("sentiment", "completed")
    assert isinstance(json.loads(line["output"]), dict)
