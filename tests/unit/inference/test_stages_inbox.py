"""Q0, the FairInbox: lanes with their own room, the fair order, control items, removal, and the consumer's wait for
room without polling."""

from __future__ import annotations

import queue
import threading
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from docstream.lanes import Lane
from docstream.records import ChunkCreated
from docstream_inference.stages import FLUSH, ConsumedChunk, FairInbox

_AT = datetime(2026, 1, 1, tzinfo=UTC)
_CHUNK = ChunkCreated(job_id="j", doc_id="d", chunk_id="c", chunk_index=0, chunk_count=1, content_sha256="ab" * 32,
                      text="t", page_start=1, page_end=1, char_start=0, char_end=1, token_count=100,
                      chunker_settings="s", created_at=_AT)


def _work(tenant: str, offset: int, lane: Lane = "batch", *, partition: int = 0, tokens: int = 100) -> ConsumedChunk:
    chunk = replace(_CHUNK, tenant=tenant, chunk_index=offset, token_count=tokens)
    return ConsumedChunk(("t", partition), offset, 1, b"d", b"", chunk, 0.0, lane=lane)


def _fill(inbox: FairInbox, lane: Lane, tenant: str, count: int, *, start: int = 0, partition: int = 0) -> None:
    for offset in range(start, start + count):
        inbox.put_nowait(_work(tenant, offset, lane, partition=partition))


def _drain(inbox: FairInbox) -> list[object]:
    out: list[object] = []
    while True:
        try:
            out.append(inbox.get_nowait())
        except queue.Empty:
            return out


def test_a_full_batch_lane_leaves_room_for_interactive_chunks_which_are_taken_first() -> None:
    inbox = FairInbox(4)
    _fill(inbox, "batch", "a", 4)
    with pytest.raises(queue.Full):
        inbox.put_nowait(_work("a", 4))
    inbox.put_nowait(_work("b", 0, "interactive"))
    assert (inbox.size("batch"), inbox.size("interactive"), inbox.size()) == (4, 1, 5)
    first = inbox.get(timeout=1)
    assert isinstance(first, ConsumedChunk) and first.chunk.tenant == "b"


def test_tenants_of_a_lane_alternate_whatever_arrived_first_and_flush_comes_after_every_chunk() -> None:
    inbox = FairInbox(100, quantum=100)
    _fill(inbox, "batch", "backfill", 50)
    _fill(inbox, "batch", "small", 3)
    inbox.put_control(FLUSH)
    assert inbox.waiting_tokens() == {("batch", "backfill"): 5000, ("batch", "small"): 300}
    taken = _drain(inbox)
    assert taken[-1] is FLUSH and len(taken) == 54
    tenants = [w.chunk.tenant for w in taken[:-1] if isinstance(w, ConsumedChunk)]
    assert tenants[:6] == ["backfill", "small"] * 3  # the small job does not wait for the backfill
    offsets = [w.offset for w in taken[:-1] if isinstance(w, ConsumedChunk) and w.chunk.tenant == "backfill"]
    assert offsets == sorted(offsets)  # each tenant in its own order


def test_a_revoked_partitions_chunks_leave_and_the_rest_keep_their_order() -> None:
    inbox = FairInbox(100)
    _fill(inbox, "batch", "a", 5, partition=0)
    _fill(inbox, "batch", "a", 5, start=5, partition=1)
    removed = inbox.remove(lambda work: work.tp == ("t", 0))
    assert [w.offset for w in removed] == [0, 1, 2, 3, 4]
    assert [w.offset for w in _drain(inbox) if isinstance(w, ConsumedChunk)] == [5, 6, 7, 8, 9]


def test_a_get_waits_for_a_put_and_times_out_when_nothing_comes() -> None:
    inbox = FairInbox(4)
    with pytest.raises(queue.Empty):
        inbox.get(timeout=0.05)
    got: list[object] = []
    taker = threading.Thread(target=lambda: got.append(inbox.get(timeout=30)))
    taker.start()
    inbox.put_nowait(_work("a", 0))
    taker.join(10)
    assert not taker.is_alive() and len(got) == 1


def test_a_wait_for_room_ends_when_a_take_brings_a_full_lane_down_to_its_level() -> None:
    inbox = FairInbox(4)
    _fill(inbox, "batch", "a", 4)
    results: list[bool] = []
    waiter = threading.Thread(target=lambda: results.append(inbox.wait_for_room({"batch": 2}, timeout_s=30)))
    waiter.start()
    inbox.get_nowait()  # 3 left: above the level, the wait goes on
    waiter.join(0.2)
    assert waiter.is_alive()
    inbox.get_nowait()  # 2 left
    waiter.join(10)
    assert not waiter.is_alive() and results == [True]


def test_a_wait_for_room_at_or_below_the_level_returns_at_once_and_one_above_it_times_out() -> None:
    inbox = FairInbox(4)
    _fill(inbox, "batch", "a", 1)
    assert inbox.wait_for_room({"batch": 1}, timeout_s=0) is True
    assert inbox.wait_for_room({}, timeout_s=0) is True
    _fill(inbox, "batch", "a", 1, start=1)
    assert inbox.wait_for_room({"batch": 1}, timeout_s=0.05) is False
    assert inbox.size() == 2  # waiting takes nothing
