"""What a tenant can see of the others: its job standing as the API shows it, and the series that name tenants on
/metrics (the API's view with two tenants' keys: tests/unit/ingest/test_api_app.py). No store, no broker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from docstream.jobs.standing import QueueStanding, coarse_tokens, tenant_standing
from docstream.metrics import HIDDEN_TENANT, Metrics, tenant_label_value
from docstream.tenants.usage import Usage

AT = datetime(2024, 5, 17, 12, 0, tzinfo=UTC)
NOW = AT + timedelta(seconds=90)


@pytest.mark.parametrize(("tokens", "shown"), [
    (0, 0), (1, 1_000), (1_000, 1_000), (1_001, 2_000), (12_345, 13_000), (60_000, 60_000), (99_999, 100_000),
    (100_001, 110_000), (1_234_567, 1_300_000),
])
def test_tokens_ahead_are_rounded_up_to_two_significant_figures_and_a_thousand(tokens: int, shown: int) -> None:
    assert coarse_tokens(tokens) == shown


def test_a_tenants_standing_estimates_its_start_from_the_figure_it_shows() -> None:
    exact = QueueStanding("batch", False, 12_345, 300, 24.69, NOW + timedelta(seconds=24.69))
    shown = tenant_standing(exact)
    assert (shown.tokens_ahead, shown.waiting_tokens) == (13_000, 300)
    assert shown.start_in_s is not None and shown.start_in_s == pytest.approx(26.0)
    assert shown.estimated_start == NOW + timedelta(seconds=shown.start_in_s)
    unknown = tenant_standing(QueueStanding("batch", False, 12_345, 0, None, None))
    assert (unknown.tokens_ahead, unknown.start_in_s, unknown.estimated_start) == (13_000, None, None)
    started = QueueStanding("batch", True, 0, 10, 0.0, NOW)
    assert tenant_standing(started) is started


# -- metrics ----------------------------------------------------------------------------


def _metrics() -> Metrics:
    metrics = Metrics()
    metrics.queued_tokens.labels("reducer", "batch", "acme").set(100)
    metrics.queued_tokens.labels("reducer", "batch", "globex").set(250)
    metrics.queued_tokens.labels("reducer", "interactive", "acme").set(7)
    metrics.count_usage("reducer", "acme", Usage(pages=1, chunks=2, tokens=30), new_document=True)
    metrics.count_usage("reducer", "globex", Usage(pages=3, chunks=4, tokens=50), new_document=True)
    metrics.records_in.labels("reducer", "docstream.chunks.results").inc(5)
    return metrics


def test_the_tenant_label_value_is_the_name_or_hidden() -> None:
    assert tenant_label_value("acme", tenant_label=True) == "acme"
    assert tenant_label_value("acme", tenant_label=False) == HIDDEN_TENANT


def test_with_the_tenant_label_off_metrics_name_no_tenant_and_sum_them() -> None:
    metrics = _metrics()
    named = metrics.render().decode()
    assert 'tenant="globex"' in named  # on by default: the operator's view
    hidden = metrics.render(tenant_label=False).decode()
    assert "acme" not in hidden and "globex" not in hidden
    assert 'docstream_queued_tokens{lane="batch",service="reducer",tenant="_"} 350.0' in hidden
    assert 'docstream_queued_tokens{lane="interactive",service="reducer",tenant="_"} 7.0' in hidden
    assert 'docstream_tokens_total{service="reducer",tenant="_"} 80.0' in hidden
    assert 'docstream_records_in_total{service="reducer",topic="docstream.chunks.results"} 5.0' in hidden
    assert [line for line in hidden.splitlines() if line.startswith("# TYPE")] == [
        line for line in named.splitlines() if line.startswith("# TYPE")]
