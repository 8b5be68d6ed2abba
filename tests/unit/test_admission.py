"""docstream.admission: what a tenant may submit now, and which limit holds it back. Pure: figures and time in."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from docstream.admission import DAILY, DOCUMENTS, ENQUEUED, Limits, TenantLoad, capacity, day_of

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
