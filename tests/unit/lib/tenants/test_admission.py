"""docstream.tenants.admission: what a tenant may submit now, which limit holds it back, and which slots reconciliation
frees. Pure: figures and time in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from docstream.tenants.admission import (
    DAILY,
    DOCUMENTS,
    ENQUEUED,
    ORPHAN_AFTER,
    Limits,
    Slot,
    SlotDocument,
    TenantLoad,
    capacity,
    day_of,
    ended_slots,
    slots_to_check,
)

NOON = datetime(2026, 12, 4, 12, 0, 0, tzinfo=UTC)


def test_a_tenant_without_limits_may_submit_anything_and_is_read_for_nothing() -> None:
    cap = capacity(Limits(), TenantLoad(10_000, 10**9, 10**9), NOON)
    assert not Limits().any and cap.documents is None and cap.limited_by is None and cap.admits(10**6)


def test_documents_fit_up_to_the_limit_and_one_more_is_refused_by_it() -> None:
    cap = capacity(Limits(max_documents_in_flight=10), TenantLoad(documents_in_flight=7), NOON)
    assert cap.documents == 3 and cap.admits(3) and not cap.admits(4)
    assert cap.refusal_limit(4) == DOCUMENTS and cap.refusal_limit(3) is None
    full = capacity(Limits(max_documents_in_flight=10), TenantLoad(documents_in_flight=10), NOON)
    assert (full.documents, full.limited_by, full.retry_after_s) == (0, DOCUMENTS, 5)


@pytest.mark.parametrize(("load", "limit"), [
    (TenantLoad(enqueued_tokens=5_000), ENQUEUED),
    (TenantLoad(tokens_today=1_000_000), DAILY),
    (TenantLoad(enqueued_tokens=5_000, tokens_today=1_000_000), DAILY),  # the day's limit is named first: it lasts
])
def test_a_token_limit_reached_holds_every_submission_back(load: TenantLoad, limit: str) -> None:
    limits = Limits(max_documents_in_flight=100, max_enqueued_tokens=5_000, max_tokens_per_day=1_000_000)
    cap = capacity(limits, load, NOON)
    assert cap.documents == 0 and cap.limited_by == limit and not cap.admits(1) and cap.refusal_limit(1) == limit


def test_below_a_token_limit_a_submission_goes_whatever_its_size() -> None:
    cap = capacity(Limits(max_enqueued_tokens=5_000), TenantLoad(enqueued_tokens=4_999), NOON)
    assert cap.documents is None and cap.admits(1000)  # its tokens are known once chunked


def test_the_days_limit_says_to_come_back_after_utc_midnight() -> None:
    late = datetime(2026, 12, 4, 23, 59, 30, tzinfo=UTC)
    cap = capacity(Limits(max_tokens_per_day=10), TenantLoad(tokens_today=10), late)
    assert cap.retry_after_s == 31
    assert capacity(Limits(max_tokens_per_day=10), TenantLoad(tokens_today=10), NOON).retry_after_s == 12 * 3600 + 1
    assert day_of(late) == "2026-12-04" and day_of(datetime(2026, 12, 5, 0, 30, tzinfo=UTC)) == "2026-12-05"


# -- reconciliation: which slots to free (issue 44) ----------------------------------------------------------------


def _slot(doc_id: str, minutes: int = 0, job_id: str = "job-1") -> Slot:
    return Slot(doc_id, job_id, NOON + timedelta(minutes=minutes))


def test_a_check_reads_a_bounded_share_of_the_slots_oldest_first_and_varying_start_reaches_all() -> None:
    slots = [_slot(f"d{i}", minutes=-i) for i in range(5)]  # d4 is the oldest
    assert [s.doc_id for s in slots_to_check(slots, 2, 0)] == ["d4", "d3"]
    assert [s.doc_id for s in slots_to_check(slots, 3, 4)] == ["d0", "d4", "d3"]  # wraps round
    assert [s.doc_id for s in slots_to_check(slots, 10, 7)] == ["d2", "d1", "d0", "d4", "d3"]  # each once
    assert {s.doc_id for start in (0, 2, 4) for s in slots_to_check(slots, 2, start)} == {f"d{i}" for i in range(5)}
    assert slots_to_check(slots, 0, 0) == [] and slots_to_check([], 5, 3) == []


def test_a_slot_frees_when_its_document_ended_after_its_admission_or_never_got_a_row() -> None:
    later = NOON + timedelta(minutes=1)
    slots = [_slot("ended"), _slot("running"), _slot("ended-before"), _slot("other-job"), _slot("no-row"),
             _slot("no-row-yet", minutes=1), _slot("not-read")]
    documents: dict[str, SlotDocument | None] = {
        "ended": SlotDocument("job-1", True, later),
        "running": SlotDocument("job-1", False, later),
        "ended-before": SlotDocument("job-1", True, NOON - timedelta(hours=1)),  # admitted again since
        "other-job": SlotDocument("job-2", True, later),
        "no-row": None,
        "no-row-yet": None,
    }
    assert ended_slots(slots, documents, NOON + ORPHAN_AFTER) == ["ended", "no-row"]
    assert ended_slots(slots, documents, NOON) == ["ended"]  # rows are written right after admission: wait
