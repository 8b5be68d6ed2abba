"""docstream_cli.ops.submit_outcome: the exit status and hint of `docstream submit --wait`, from the job's rows."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from docstream.store import JobRow
from docstream_cli.ops.submit_outcome import (
    EXIT_CANCELLED,
    EXIT_DOCUMENTS_FAILED,
    EXIT_OK,
    EXIT_SOURCE_UNREADABLE,
    wait_outcome,
)

_URL = "/home/u/.local/share/docstream/objects"


def _job(*, status: str = "completed", completed: int = 0, partial: int = 0, failed: int = 0) -> JobRow:
    return JobRow(job_id="j1", tenant="t", created_at=datetime(2026, 12, 1, tzinfo=UTC), status=status,  # type: ignore[arg-type]
                  document_count=completed + partial + failed, completed=completed, partial=partial, failed=failed)


def test_every_document_completed_is_0_without_a_hint() -> None:
    outcome = wait_outcome(_job(completed=12), {}, object_store_url=_URL)
    assert (outcome.exit_code, outcome.hint) == (EXIT_OK, None)
    assert outcome.summary == "job j1 completed: 12 completed, 0 partial, 0 failed"


@pytest.mark.parametrize(("partial", "failed", "codes"), [(0, 2, {"corrupt": 1, "encrypted": 1}), (1, 0, {})])
def test_failed_or_partial_documents_are_4(partial: int, failed: int, codes: dict[str, int]) -> None:
    outcome = wait_outcome(_job(completed=3, partial=partial, failed=failed), codes, object_store_url=_URL)
    assert (outcome.exit_code, outcome.hint) == (EXIT_DOCUMENTS_FAILED, None)


def test_an_unreadable_source_is_5_and_names_the_settings_to_fix() -> None:
    outcome = wait_outcome(_job(completed=1, failed=12), {"fetch_failed": 11, "corrupt": 1}, object_store_url=_URL)
    assert outcome.exit_code == EXIT_SOURCE_UNREADABLE
    assert outcome.hint is not None
    assert outcome.hint.startswith("11 documents failed (fetch_failed)")
    for name in ("object_store.url", "DOCSTREAM_OBJECT_STORE__URL", "object_store.allowed_roots", _URL):
        assert name in outcome.hint


def test_the_hint_keeps_no_credentials_of_the_object_store_url() -> None:
    outcome = wait_outcome(_job(failed=1), {"source_not_allowed": 1}, object_store_url="s3://key:secret@bucket/p")
    assert outcome.hint is not None
    assert "secret" not in outcome.hint and "s3://bucket/p" in outcome.hint


def test_a_cancelled_job_is_3_and_still_hints() -> None:
    outcome = wait_outcome(_job(status="cancelled", failed=1), {"fetch_failed": 1}, object_store_url=_URL)
    assert outcome.exit_code == EXIT_CANCELLED
    assert outcome.hint is not None
