"""OCR on the real stack: a scan and a normal PDF through `docstream chunker` → `inference` → `reducer`.

Real Kafka and Cassandra (deploy/local), the services as separate processes under this test's own
topic prefix, the real OCR engine (its absence fails the test: ``make setup`` installs it).
Checked where a downstream user looks: the chunks rows in Cassandra carry ``text_source=ocr`` and
the engine for the scan, ``text_layer`` for the normal PDF; the documents rows and the
DocumentCompleted records count the pages by verdict and by source.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from docstream import ids
from docstream.avro import AvroSerde
from docstream.errors import ConfigError
from docstream.records import DocumentCompleted, JobStatus
from docstream.settings import CassandraSettings, OcrSettings, Settings
from docstream.store import ResultStore
from docstream_chunker.ocr import open_engine
from tests.fixtures.documents import make_pdf, make_scanned_copy, page_marker
from tests.fixtures.kafka import read_topic
from tests.fixtures.services import running_pipeline

pytestmark = pytest.mark.integration

MODEL_ID = Settings().inference.model_id


def test_a_scans_chunks_carry_text_source_ocr_in_cassandra(
    kafka_bootstrap: str, cassandra_settings: CassandraSettings, cassandra_store: ResultStore, tmp_path: Path,
) -> None:
    try:
        open_engine(OcrSettings())
    except ConfigError as exc:
        pytest.fail(f"no OCR engine (`make setup` installs it: deploy/install-ocr.sh): {exc.message}")
    folder = tmp_path / "docs"
    folder.mkdir()
    scan, normal = make_scanned_copy(2, seed=31), make_pdf(2, seed=32).data
    (folder / "scan.pdf").write_bytes(scan.data)
    (folder / "normal.pdf").write_bytes(normal)
    job_id = f"ocr-{uuid.uuid4().hex[:12]}"
    scan_id = ids.doc_id(job_id, ids.content_sha256(scan.data))
    normal_id = ids.doc_id(job_id, ids.content_sha256(normal))
    serde = AvroSerde(Settings().kafka)

    with running_pipeline(kafka_bootstrap, cassandra_settings, tmp_path, "ocr") as pipeline:
        pipeline.start("chunker", "inference", "reducer")
        pipeline.submit([folder], job_id)

        def completed() -> dict[str, DocumentCompleted] | None:
            records = read_topic(kafka_bootstrap, pipeline.topics.completed, serde=serde, timeout_s=30).records
            found = {r.doc_id: r for r in records if isinstance(r, DocumentCompleted) and r.job_id == job_id}
            return found if len(found) == 2 else None

        def final_status() -> list[JobStatus] | None:
            records = read_topic(kafka_bootstrap, pipeline.topics.jobs, serde=serde, timeout_s=30).records
            return [r for r in records if isinstance(r, JobStatus) and r.job_id == job_id and r.final] or None

        done = pipeline.until(completed, "both DocumentCompleted", 400)
        # the final JobStatus follows the documents on the reducer's next flush, not with them
        final = pipeline.until(final_status, "the final JobStatus", 60, poll_s=0.5)
        assert final[-1].completed == 2, final
        pipeline.check_alive()

    assert {r.status for r in done.values()} == {"completed"}, done
    assert (done[scan_id].pages_by_source, done[normal_id].pages_by_source) == ({"ocr": 2}, {"text_layer": 2})
    scan_chunks = list(cassandra_store.iter_chunks(scan_id, MODEL_ID))
    assert scan_chunks and {c.text_source for c in scan_chunks} == {"ocr"}
    assert {c.ocr_engine for c in scan_chunks} == {OcrSettings().engine}
    assert all(len(c.page_verdicts) == c.page_end - c.page_start + 1 for c in scan_chunks)
    assert page_marker(1) in scan_chunks[0].text
    normal_chunks = list(cassandra_store.iter_chunks(normal_id, MODEL_ID))
    assert normal_chunks and {(c.text_source, c.ocr_engine) for c in normal_chunks} == {("text_layer", None)}
    scan_row = cassandra_store.get_document(scan_id)
    assert scan_row is not None and scan_row.pages_by_source == {"ocr": 2}
