"""docstream.jobs.progress: done, share, rate and ETA of a job, from its row and a clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from docstream.jobs.progress import format_duration, format_rate, job_progress
from docstream.store import JobRow

_T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _job(*, status: str = "running", total: int = 100, completed: int = 0, partial: int = 0, failed: int = 0,
         updated_s: float | None = None, naive: bool = False) -> JobRow:
    created = _T0.replace(tzinfo=None) if naive else _T0
    updated = None if updated_s is None else created + timedelta(seconds=updated_s)
    return JobRow(job_id="j", tenant="t", created_at=created, status=status,  # type: ignore[arg-type]
                  document_count=total, completed=completed, partial=partial, failed=failed, updated_at=updated)


def test_a_running_job_has_a_rate_over_its_age_and_an_eta_for_what_remains() -> None:
    progress = job_progress(_job(completed=20, partial=3, failed=2, updated_s=5), _T0 + timedelta(seconds=10))
    assert (progress.done, progress.total, progress.share) == (25, 100, 0.25)
    assert progress.elapsed_s == 10.0
    assert progress.rate == pytest.approx(2.5)
    assert progress.eta_s == pytest.approx(30.0)


def test_an_ended_job_is_measured_to_its_last_update_and_has_no_eta() -> None:
    progress = job_progress(_job(status="completed", completed=100, updated_s=40), _T0 + timedelta(hours=1))
    assert progress.elapsed_s == 40.0
    assert progress.rate == pytest.approx(2.5)
    assert progress.eta_s is None
    assert progress.share == 1.0


@pytest.mark.parametrize(("job", "now_s"), [
    (_job(), 10.0),                     # nothing done yet: no rate to extrapolate
    (_job(total=0, completed=0), 10.0),  # size not known yet
])
def test_no_eta_without_a_rate_or_a_size(job: JobRow, now_s: float) -> None:
    progress = job_progress(job, _T0 + timedelta(seconds=now_s))
    assert progress.eta_s is None


def test_no_rate_before_any_time_passed_and_a_clock_behind_the_row_is_not_negative() -> None:
    assert job_progress(_job(completed=1), _T0).rate is None
    behind = job_progress(_job(completed=1), _T0 - timedelta(seconds=5))
    assert (behind.elapsed_s, behind.rate, behind.eta_s) == (0.0, None, None)


def test_naive_datetimes_are_read_as_utc() -> None:
    progress = job_progress(_job(completed=10, naive=True), _T0 + timedelta(seconds=10))
    assert progress.rate == pytest.approx(1.0)


def test_unknown_size_has_no_share_and_more_done_than_total_is_capped() -> None:
    assert job_progress(_job(total=0, completed=3), _T0 + timedelta(seconds=1)).share is None
    assert job_progress(_job(total=2, completed=3), _T0 + timedelta(seconds=1)).share == 1.0


@pytest.mark.parametrize(("seconds", "shown"), [
    (None, "-"), (0.0, "0s"), (-3.0, "0s"), (41.6, "42s"), (60.0, "1m 00s"), (185.0, "3m 05s"),
    (3599.4, "59m 59s"), (3600.0, "1h 00m"), (7380.0, "2h 03m"), (86_400.0, "1d 00h"), (100_800.0, "1d 04h"),
])
def test_durations_are_shown_for_people(seconds: float | None, shown: str) -> None:
    assert format_duration(seconds) == shown


def test_rates_are_shown_with_two_decimals_or_a_dash() -> None:
    assert [format_rate(r) for r in (None, 0.0, 2.5, 12.345)] == ["-", "0.00", "2.50", "12.35"]
