"""docstream.tenants.tenancy: whose an intake record is, decided from what the record and the store say (no I/O)."""

from __future__ import annotations

import re

import pytest

from docstream import ids
from docstream.errors import PoisonRecord
from docstream.tenants.tenancy import (
    DOC_ID_MISMATCH,
    TENANT_MISMATCH_JOB,
    TENANT_MISMATCH_PREVIOUS,
    TENANT_MISMATCH_SOURCE,
    TENANT_MISMATCH_TOPIC,
    Submission,
    refuse_submission,
    refuse_tombstone,
    tenant_intake_topic,
    tenant_intakes_pattern,
    tenant_of_topic,
)

SHA = "ab" * 32


def _facts(**fields: object) -> Submission:
    base: dict[str, object] = {"tenant": "acme", "job_id": "job-1", "doc_id": ids.doc_id("job-1", SHA)}
    return Submission(**{**base, **fields})  # type: ignore[arg-type]


def test_a_record_of_its_tenants_job_and_versions_is_accepted() -> None:
    assert refuse_submission(_facts(job_tenant="acme", previous_doc_id="p", previous_tenant="acme")) is None


def test_a_record_of_a_job_without_a_row_is_accepted_to_claim_it() -> None:
    assert refuse_submission(_facts(job_tenant=None)) is None


def test_a_document_handled_before_in_its_own_job_is_accepted() -> None:
    assert refuse_submission(_facts(job_tenant="acme", document_job_id="job-1")) is None


@pytest.mark.parametrize(("fields", "code"), [
    ({"job_tenant": "victim"}, TENANT_MISMATCH_JOB),
    ({"job_tenant": "acme", "previous_doc_id": "p", "previous_tenant": "victim"}, TENANT_MISMATCH_PREVIOUS),
    ({"job_tenant": "acme", "previous_doc_id": "p", "previous_tenant": None}, TENANT_MISMATCH_PREVIOUS),
    ({"doc_id": ids.doc_id("victims-job", SHA), "document_job_id": "victims-job"}, DOC_ID_MISMATCH),
    ({"topic_tenant": "victim", "job_tenant": "victim"}, TENANT_MISMATCH_TOPIC),
])
def test_each_foreign_reference_is_refused_with_its_code(fields: dict[str, object], code: str) -> None:
    refusal = refuse_submission(_facts(**fields))
    assert refusal is not None and refusal.code == code
    assert "victim" not in refusal.message.replace("'victim'", "") or code == TENANT_MISMATCH_TOPIC
    error = refusal.error()
    assert isinstance(error, PoisonRecord) and error.code == code


def test_an_unknown_and_a_foreign_earlier_version_are_refused_alike() -> None:
    foreign = refuse_submission(_facts(previous_doc_id="p", previous_tenant="victim"))
    unknown = refuse_submission(_facts(previous_doc_id="p", previous_tenant=None))
    assert foreign == unknown  # a refusal never tells whether another tenant's document exists


def test_the_topic_is_checked_before_the_store() -> None:
    refusal = refuse_submission(_facts(topic_tenant="other", job_tenant="victim", document_job_id="x"))
    assert refusal is not None and refusal.code == TENANT_MISMATCH_TOPIC


@pytest.mark.parametrize(("topic_tenant", "document_tenant", "code"), [
    (None, "victim", None),  # a shared intake topic: only docstream's principals write it
    ("acme", "acme", None),
    ("acme", "victim", TENANT_MISMATCH_SOURCE),
])
def test_a_tombstone_deletes_only_its_topics_tenants_documents(
    topic_tenant: str | None, document_tenant: str, code: str | None
) -> None:
    refusal = refuse_tombstone(topic_tenant, document_tenant)
    assert (refusal.code if refusal is not None else None) == code
    assert refusal is None or "victim" not in refusal.message


def test_a_tenants_intake_topic_names_its_tenant() -> None:
    topic = tenant_intake_topic("docstream", "acme.eu-1")
    assert topic == "docstream.tenant.acme.eu-1.documents.submitted"
    assert tenant_of_topic("docstream", topic) == "acme.eu-1"
    assert tenant_of_topic("other", topic) is None
    assert tenant_of_topic("docstream", "docstream.documents.submitted") is None
    assert tenant_of_topic("docstream", "docstream.documents.submitted.interactive") is None
    assert tenant_of_topic("docstream", "docstream.tenant..documents.submitted") is None


@pytest.mark.parametrize("tenant", ["a:b", "a@b", "", "é"])
def test_a_tenant_that_cannot_name_a_topic_gets_none(tenant: str) -> None:
    with pytest.raises(ValueError, match="cannot name a Kafka topic"):
        tenant_intake_topic("docstream", tenant)


def test_the_tenant_topics_pattern_reads_every_tenants_topic_and_nothing_else() -> None:
    pattern = re.compile(tenant_intakes_pattern("ds-1.x"))
    assert pattern.pattern.startswith("^")  # librdkafka takes a subscription starting with ^ as a regex
    assert pattern.search(tenant_intake_topic("ds-1.x", "acme"))
    assert pattern.search(tenant_intake_topic("ds-1.x", "a.b_c-9"))
    for other in ("ds-1.x.documents.submitted", "ds-1.x.tenant.acme.documents.submitted.dlq",
                  "ds-1Xx.tenant.acme.documents.submitted", "other.tenant.acme.documents.submitted",
                  "ds-1.x.tenant..documents.submitted"):
        assert not pattern.search(other), other
