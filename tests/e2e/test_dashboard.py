"""The job dashboard in a real browser: a job submitted over the API is watched to completion at /ui.

`docstream api`, `docstream chunker`, `docstream inference` and `docstream reducer` run as
subprocesses on the real Kafka and Cassandra (tests/fixtures/services.py), with their own topic
prefix; keys come from `docstream apikey create`. Headless Debian chromium, driven by playwright
(tests/fixtures/browser.py), enters the key, follows the job's progress bar to 100 %, opens the job
page (documents with pages, chunks and error codes; what the job cost; the results export) and a document page (its
chunks), and checks that another tenant's key sees none of it.

Set ``DOCSTREAM_UI_SCREENSHOTS=docs/img`` to keep the three screenshots of docs/api.md there
(they always land in the test's tmp_path).
"""

from __future__ import annotations

import json
import os
import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from docstream.settings import CassandraSettings
from docstream.store.base import JobRow, QueuedJobRow, ResultStore
from docstream.tenants.usage import Usage
from tests.fixtures.documents import make_not_a_document, make_pdf
from tests.fixtures.services import Pipeline, free_port, service_env

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]

JOB_TIMEOUT_MS = 300_000
HOSTILE = "<img src=x onerror=window.pwned=1>.pdf"


def _new_key(pipeline: Pipeline, tenant: str) -> str:
    done = pipeline.cli("apikey", "create", "--tenant", tenant)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()[0]


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _submit(url: str, key: str) -> str:
    files = [("files", (f"report-{i}.pdf", make_pdf(3, seed=700 + i).data, "application/pdf")) for i in range(2)]
    files.append(("files", (HOSTILE, make_pdf(2, seed=710).data, "application/pdf")))
    files.append(("files", ("notes.pdf", make_not_a_document(), "application/pdf")))
    accepted = httpx.post(f"{url}/v1/jobs", files=files, data={"chunk_max_tokens": "96"},
                          headers={"Authorization": f"Bearer {key}"}, timeout=60)
    assert accepted.status_code == 202, accepted.text
    job_id: str = accepted.json()["job_id"]
    return job_id


def _log_in(page: Page, url: str, key: str) -> None:
    page.goto(f"{url}/ui")
    page.fill("#api-key", key)
    page.click("#login button[type=submit]")


def _shoot(page: Page, folder: Path, name: str) -> None:
    page.screenshot(path=str(folder / name))
    keep = os.environ.get("DOCSTREAM_UI_SCREENSHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(keep) / name))


def _usage(url: str, key: str, job_id: str) -> dict[str, Any]:
    """The job's ``usage`` as the API answers it (what the page must show)."""
    job = httpx.get(f"{url}/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {key}"}, timeout=30).json()
    usage: dict[str, Any] = job["usage"]
    return usage


def test_a_job_is_watched_to_completion_on_the_dashboard_and_another_tenant_sees_nothing(
    kafka_bootstrap: str, cassandra_store: ResultStore, cassandra_settings: CassandraSettings, tmp_path: Path,
    browser: Browser,
) -> None:
    prefix = f"ui-e2e-{uuid.uuid4().hex[:12]}"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = service_env(kafka_bootstrap, prefix, cassandra_settings, tmp_path,
                      DOCSTREAM_API__HOST="127.0.0.1", DOCSTREAM_API__PORT=str(port))
    pipeline = Pipeline(env, tmp_path)
    shots = tmp_path / "screenshots"
    shots.mkdir()
    mine, theirs = browser.new_context(viewport={"width": 1280, "height": 760}), browser.new_context()
    seeded: list[QueuedJobRow] = []
    try:
        pipeline.start("api")  # creates the topics and the schema, then serves
        pipeline.until(lambda: _ready(url), "the API to be ready", 120)
        tenant = f"acme-{uuid.uuid4().hex[:8]}"
        key = _new_key(pipeline, tenant)
        other_key = _new_key(pipeline, f"globex-{uuid.uuid4().hex[:8]}")
        page = mine.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))

        _log_in(page, url, key)
        expect(page.locator("#no-jobs")).to_be_visible()
        pipeline.start("chunker", "inference", "reducer")
        job_id = _submit(url, key)

        # the list polls on its own: the new job appears and its bar runs to 100 %
        row = page.locator(f'#jobs tr[data-job-id="{job_id}"]')
        expect(row).to_be_visible(timeout=30_000)
        expect(row).to_have_attribute("data-status", "completed", timeout=JOB_TIMEOUT_MS)
        expect(row.locator(".progress-text")).to_have_text("4/4 100%")
        bar = row.locator("progress")
        assert bar.get_attribute("value") == bar.get_attribute("max") == "4"
        expect(row.locator(".rate")).to_have_text(re.compile(r"docs/s$"))
        _shoot(page, shots, "dashboard-jobs.png")

        # the job page: every document with its status, pages, chunks and error code
        row.locator("a").click()
        documents = page.locator("#documents tbody tr")
        expect(documents).to_have_count(4)
        expect(page.locator("#job")).to_have_attribute("data-status", "completed")
        for name in ("report-0.pdf", "report-1.pdf", HOSTILE):
            doc = page.locator("#documents tbody tr", has=page.get_by_role("link", name=name, exact=True))
            expect(doc).to_have_attribute("data-status", "completed")
            expect(doc.locator(".pages")).to_have_text("2" if name == HOSTILE else "3")
            expect(doc.locator(".chunks")).to_have_text(re.compile(r"^[1-9]\d*$"))
        # what the job cost, as the API reports it: tokens and model time on the page
        usage = _usage(url, key, job_id)
        assert usage["tokens"] > 0 and usage["model_seconds"] > 0 and usage["device"] == "cpu"
        expect(page.locator("#usage .tokens")).to_have_text(f"{usage['tokens']:,}")
        expect(page.locator("#usage")).to_contain_text("(cpu)")
        failed = page.locator('#documents tbody tr[data-status="failed"]')
        expect(failed.get_by_role("link")).to_have_text("notes.pdf")
        expect(failed.locator("td.id")).to_have_text(re.compile(r"^[a-z_]+$"))
        # user data is text: the hostile file name is shown as written and never became an element
        assert page.locator("#documents img").count() == 0 and page.evaluate("window.pwned") is None
        with page.expect_download() as download:
            page.click("#export")
        lines = [json.loads(line) for line in Path(download.value.path()).read_text().splitlines()]
        assert sorted(line["filename"] for line in lines) == sorted(["report-0.pdf", "report-1.pdf", HOSTILE,
                                                                      "notes.pdf"])
        _shoot(page, shots, "dashboard-job.png")

        # the document page: its chunks with pages, tokens and the start of their text
        page.get_by_role("link", name="report-0.pdf", exact=True).click()
        expect(page.locator("#document")).to_have_attribute("data-status", "completed")
        chunks = page.locator("#chunks tbody tr")
        expect(chunks.first).to_be_visible()
        chunk_count = int(page.locator("#document dd.chunks").inner_text())
        expect(chunks).to_have_count(chunk_count)
        expect(chunks.first.locator("td.text")).not_to_be_empty()
        _shoot(page, shots, "dashboard-document.png")
        assert errors == []

        # another tenant's key: no job in its list, and the job's own address is "not found"
        spy = theirs.new_page()
        _log_in(spy, url, other_key)
        expect(spy.locator("#no-jobs")).to_be_visible()
        spy.goto(f"{url}/ui#/jobs/{job_id}")
        expect(spy.locator("#not-found")).to_have_text(f"no job {job_id}")
        assert spy.locator("#job, #documents").count() == 0

        # the list shows the job's tokens too
        page.goto(f"{url}/ui#/")
        expect(page.locator(f'#jobs tr[data-job-id="{job_id}"] .tokens')).to_have_text(f"{usage['tokens']:,}")

        # a generate job's chat tokens, as its jobs row holds them (the reducer's totals of the server's usage)
        chat_job = f"chat-{uuid.uuid4().hex[:8]}"
        cassandra_store.upsert_job(JobRow(chat_job, tenant, datetime.now(UTC), "completed", 0, usage=Usage(
            chunks=3, chat_tokens={"prompt": 12_345, "completion": 678})))
        page.goto(f"{url}/ui#/jobs/{chat_job}")
        expect(page.locator("#usage .chat-tokens")).to_have_text("12,345 prompt, 678 completion")

        # where a running job stands in its lane, as the reducer's rows say (docs/operations.md "Where a job
        # stands"): a job of 40,000 tokens waiting submitted before it, and the service's rate
        waiting_job, queued_job = f"backfill-{uuid.uuid4().hex[:8]}", f"queued-{uuid.uuid4().hex[:8]}"
        queued_at = datetime.now(UTC)
        seeded.append(QueuedJobRow(f"{prefix}.chunks", waiting_job, "bulk", queued_at - timedelta(minutes=1),
                                   40_000, 0, queued_at))
        cassandra_store.upsert_queued_job(seeded[-1])
        cassandra_store.record_throughput(f"{prefix}-inference", "e2e", 1_000.0, queued_at, 300)
        cassandra_store.upsert_job(JobRow(queued_job, tenant, queued_at, "running", 2))
        page.goto(f"{url}/ui#/jobs/{queued_job}")
        expect(page.locator("#job .queue")).to_have_text("40,000 tokens ahead")
        # 40 s at the 1,000 tokens/s written here, sooner if the pipeline's inference measured a rate of its own
        expect(page.locator("#job .starts")).to_have_text(re.compile(r"^in \d+(\.\d)? s$"))
        standing = httpx.get(f"{url}/v1/jobs/{queued_job}", headers={"Authorization": f"Bearer {key}"},
                             timeout=10).json()["queue"]
        assert (standing["lane"], standing["started"], standing["tokens_ahead"]) == ("batch", False, 40_000)
        assert 0 < standing["start_in_s"] <= 40.0
        page.goto(f"{url}/ui#/")
        expect(page.locator(f'#jobs tr[data-job-id="{queued_job}"] .queue')).to_have_text("40,000 tokens ahead")
        expect(page.locator(f'#jobs tr[data-job-id="{job_id}"] .queue')).to_have_text("—")  # it ended
        _shoot(page, shots, "dashboard-queue.png")
        assert errors == []
    finally:
        for row in seeded:
            cassandra_store.delete_queued_job(row.lane, row.job_id)
        mine.close()
        theirs.close()
        pipeline.stop()
