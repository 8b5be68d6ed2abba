"""StoredResults: the stored results a batch reuses, by chunk_id and from a source's earlier version, over a real
SQLite store."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from docstream.records import ChunkCreated
from docstream.store.base import ChunkRow
from docstream.store.sqlite import SqliteStore
from docstream.tasks.base import Mention
from docstream_inference.stages import StoredResults

AT = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)
V1, V2 = "doc-v1", "doc-v2"


class CountingStore(SqliteStore):
    """A SQLite store that counts its chunk reads."""

    reads = 0

    def iter_chunks(self, doc_id: str, model_id: str) -> Iterator[ChunkRow]:
        self.reads += 1
        return super().iter_chunks(doc_id, model_id)


def _row(index: int, text: str, *, doc_id: str = V1, model_id: str = "m", status: str = "ok", task: str = "embed",
         char_start: int = 0) -> ChunkRow:
    ok = status == "ok"
    return ChunkRow(doc_id=doc_id, model_id=model_id, chunk_index=index, chunk_id=f"{doc_id}-{index}", job_id="j1",
                    text=text, page_start=1, page_end=1, char_start=char_start, char_end=char_start + len(text),
                    token_count=len(text.split()), embedding=[float(index), 1.0] if ok and task == "embed" else [],
                    status="ok" if ok else "failed", error_code=None if ok else "model_error", task=task,
                    mentions=(Mention("Ada", "PERSON", char_start + 2, char_start + 5, 1, 0.9),)
                    if task == "entities" else ())


def _chunk(index: int, text: str, *, previous: str | None = V1, doc_id: str = V2) -> ChunkCreated:
    return ChunkCreated(job_id="j2", doc_id=doc_id, chunk_id=f"{doc_id}-{index}", chunk_index=index, chunk_count=9,
                        content_sha256="s2", text=text, page_start=1, page_end=1, char_start=0, char_end=len(text),
                        token_count=len(text.split()), chunker_settings="cs", created_at=AT, previous_doc_id=previous)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CountingStore]:
    store = CountingStore(tmp_path / "s.db")
    store.migrate()
    store.upsert_chunks([_row(0, "kept first"), _row(1, "edited before"), _row(2, "kept last"),
                         _row(3, "failed before", status="failed"), _row(4, "kept first")])
    yield store
    store.close()


def test_a_new_versions_unchanged_texts_reuse_the_earlier_versions_results_and_the_rest_run(
    store: CountingStore,
) -> None:
    stored = StoredResults(store, by_chunk_id=False)
    chunks = [_chunk(0, "kept first"), _chunk(1, "edited after"), _chunk(2, "kept last"),
              _chunk(3, "failed before"), _chunk(4, "no version", previous=None)]
    found = stored.find(chunks, ["m"] * 5, "embed")
    assert set(found.outputs) == {"doc-v2-0", "doc-v2-2"} == found.by_version  # changed, failed, unversioned: run
    assert list(found.outputs["doc-v2-0"].embedding) == [0.0, 1.0]
    assert list(found.outputs["doc-v2-2"].embedding) == [2.0, 1.0]
    # the next batches of the same document read the earlier version no more
    again = stored.find([_chunk(5, "kept first")], ["m"], "embed")
    assert set(again.outputs) == {"doc-v2-5"} and store.reads == 1
    # another model or another task has no stored result to reuse
    assert not stored.find(chunks, ["other"] * 5, "embed").outputs
    assert not stored.find(chunks, ["m"] * 5, "classify").outputs


def test_a_reused_entity_mention_keeps_its_place_in_the_chunk(store: CountingStore) -> None:
    store.upsert_chunks([_row(0, "by Ada Lovelace", doc_id="doc-e", task="entities", char_start=100)])
    found = StoredResults(store, by_chunk_id=False).find([_chunk(0, "by Ada Lovelace", previous="doc-e")], ["m"],
                                                         "entities")
    [span] = found.outputs["doc-v2-0"].spans
    assert (span.start, span.end, span.label) == (2, 5, "PERSON")  # in the chunk's own offsets, placed anew


def test_by_chunk_id_finds_a_chunks_own_row_and_says_so(store: CountingStore) -> None:
    own = _chunk(1, "edited before", previous=None, doc_id=V1)
    found = StoredResults(store).find([own], ["m"], "embed")
    assert set(found.outputs) == {"doc-v1-1"} and not found.by_version
    assert not StoredResults(store, by_chunk_id=False).find([own], ["m"], "embed").outputs


def test_a_chunk_the_chunker_sent_again_keeps_its_stored_result_without_reuse_asked(store: CountingStore) -> None:
    # a redelivery or a replay of the chunker: the model would give another vector for the same text under bf16
    # (it moves with the batch), which a sink holding the first would not be told of
    resent = replace(_chunk(1, "edited before", previous=None, doc_id=V1), resent=True)
    first_pass = _chunk(2, "kept last", previous=None, doc_id=V1)
    found = StoredResults(store, by_chunk_id=False).find([resent, first_pass], ["m", "m"], "embed")
    assert set(found.outputs) == {"doc-v1-1"} and not found.by_version
    assert list(found.outputs["doc-v1-1"].embedding) == [1.0, 1.0]
    assert store.reads == 1, "one read of the document sent again, none for a first pass"
    assert not StoredResults(store, by_chunk_id=False).find([first_pass], ["m"], "embed").outputs
    assert store.reads == 1


def test_only_the_last_few_earlier_versions_are_kept_in_memory(store: CountingStore) -> None:
    stored = StoredResults(store, by_chunk_id=False)
    for n in range(StoredResults.PREVIOUS_KEPT + 1):
        stored.find([_chunk(0, "x", previous=f"gone-{n}")], ["m"], "embed")
    reads = store.reads
    stored.find([_chunk(0, "x", previous="gone-0")], ["m"], "embed")  # the oldest was let go: read again
    stored.find([_chunk(0, "x", previous=f"gone-{StoredResults.PREVIOUS_KEPT}")], ["m"], "embed")  # kept
    assert store.reads == reads + 1
