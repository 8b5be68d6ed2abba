"""What a tenant can see of the others (issue 43, point 5): its job standings through the API, and the series
that name tenants on /metrics. SQLite store, no broker, nothing sent anywhere."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from docstream.metrics import HIDDEN_TENANT, Metrics, tenant_label_value
from docstream.settings import Settings
from docstream.standing import QueueStanding, coarse_tokens, tenant_standing
from docstream.store.base import ApiKeyRow, JobRow, QueuedJobRow
from docstream.store.sqlite import SqliteStore
from docstream.usage import Usage
from docstream_ingest.api import create_app
from docstream_ingest.apikeys import generate_api_key

AT = datetime(2024, 5, 17, 12, 0, tzinfo=UTC)
NOW = AT + timedelta(seconds=90)
LANE = "docstream.chunks"  # the batch lane's queue


@dataclass
class Api:
    client: TestClient
    store: SqliteStore
    keys: dict[str, str]

    def as_(self, tenant: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[tenant]}"}


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    settings = Settings().with_overrides(
        store={"backend": "sqlite", "sqlite_path": str(tmp_path / "store.db")},
        object_store={"url": str(tmp_path / "objects")},
        kafka={"bootstrap_servers": "127.0.0.1:1"},  # never contacted: nothing here is produced
    )
    store = SqliteStore(tmp_path / "store.db")
    store.migrate()
    keys = {}
    for tenant in ("acme", "globex"):
        new = generate_api_key()
        store.upsert_api_key(ApiKeyRow(new.key_id, tenant, new.key_hash, AT))
        keys[tenant] = new.key
    with TestClient(create_app(settings, store=store, clock=lambda: NOW), raise_server_exceptions=False) as client:
        yield Api(client, store, keys)
    store.close()


def _running(store: SqliteStore, job_id: str, tenant: str, created_at: datetime, waiting: int) -> None:
    store.upsert_job(JobRow(job_id=job_id, tenant=tenant, created_at=created_at, status="running", document_count=2,
                            updated_at=created_at))
    store.upsert_queued_job(QueuedJobRow(LANE, job_id, tenant, created_at, waiting, 0, created_at))


def test_a_tenant_sees_its_position_but_not_the_size_or_name_of_another_tenants_job_ahead(api: Api) -> None:
    _running(api.store, "globex-secret-backfill", "globex", AT - timedelta(hours=1), 12_345)
    _running(api.store, "acme-job", "acme", AT, 300)
    api.store.record_throughput("docstream-inference", "inference-1", 500.0, NOW, 60)
    detail = api.client.get("/v1/jobs/acme-job", headers=api.as_("acme"))
    listed = api.client.get("/v1/jobs", headers=api.as_("acme"))
    queue = detail.json()["queue"]
    assert queue["tokens_ahead"] == 13_000  # was 12,345: the other tenant's job, exactly
    assert queue["waiting_tokens"] == 300  # its own, exact
    assert queue["start_in_s"] == 26.0  # from the figure shown, at 500 tokens/s
    assert [j["queue"] for j in listed.json()["items"]] == [queue]
    for response in (detail, listed):
        assert "globex" not in response.text and "12345" not in response.text and "12,345" not in response.text
    # the other tenant sees its own job first in the lane, and nothing of acme's
    theirs = api.client.get("/v1/jobs/globex-secret-backfill", headers=api.as_("globex"))
    assert theirs.json()["queue"]["tokens_ahead"] == 0 and theirs.json()["queue"]["waiting_tokens"] == 12_345
    assert "acme" not in theirs.text
    assert api.client.get("/v1/jobs/globex-secret-backfill", headers=api.as_("acme")).status_code == 404


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
    metrics.records_in.labels("reducer", "docstream.chunks.embedded").inc(5)
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
    assert 'docstream_records_in_total{service="reducer",topic="docstream.chunks.embedded"} 5.0' in hidden
    assert [line for line in hidden.splitlines() if line.startswith("# TYPE")] == [
        line for line in named.splitlines() if line.startswith("# TYPE")]
