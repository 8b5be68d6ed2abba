"""Bad input: a mutation fuzz of the extraction path through the chunker's own child process (tests/chaos/fuzz.py).

No broker and no store: the extraction child is where a damaged document can crash or hang, so that is
what runs. Short (`make test`): the chaos seed, at most 6,000 inputs or 25 s. Full (`make chaos`,
``DOCSTREAM_CHAOS_FULL=1``): 5 minutes. docs/chunking.md "Robustness" has the figures of a full run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.chaos.fuzz import extraction_fuzz, fuzz_settings
from tests.chaos.harness import FULL, SCALE, ChaosReport

BUDGET_S = 300.0 if FULL else 25.0
MAX_INPUTS = 1_000_000 if FULL else 6_000
CHILD_TIMEOUT_S = 10.0
# ProcessExtractor replaces a child whose RSS passed this after a document: the memory bound the chunker keeps.
RSS_BOUND_BYTES = 1 << 30

pytestmark = [pytest.mark.chaos, pytest.mark.slow, pytest.mark.timeout(int(BUDGET_S) + 300)]


def test_mutated_documents_and_archives_end_typed_without_crash_hang_or_unbounded_memory(
    tmp_path: Path, chaos_report: ChaosReport
) -> None:
    figures = extraction_fuzz(
        fuzz_settings(tmp_path, timeout_s=CHILD_TIMEOUT_S), seed=SCALE.seed, budget_s=BUDGET_S, max_inputs=MAX_INPUTS,
        findings_dir=chaos_report.path.parent / "fuzz-findings",
    )
    summary = figures.as_dict()
    chaos_report.record("extraction_fuzz", **summary)
    print("extraction fuzz:", json.dumps(summary, default=str))
    assert figures.inputs > 0 and figures.extractions > 0
    assert figures.crashes == 0, summary["findings"]
    assert figures.hangs == 0, summary["findings"]
    assert not figures.untyped, summary["findings"]
    assert figures.outcomes["extraction_failed"] == 0, summary["findings"]  # MuPDF raised what we do not handle
    assert 0 < figures.peak_rss_bytes < RSS_BOUND_BYTES
