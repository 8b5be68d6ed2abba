"""Whose an intake record is: the verdicts that keep a record on the intake topic inside its tenant. Pure.

A ``DocumentSubmitted`` names a job, a document (its ``doc_id``), maybe an earlier version (``previous_doc_id``)
and a source (``source_key``); a tombstone names a document by its key. The chunker reads what the store says of
each (``docstream_chunker.handler.ChunkerHandler``) and asks here whether the record's tenant owns it; a refusal
goes to the intake topic's DLQ with its code (docs/security.md "Intake records").

A tenant producing directly writes its own intake topic, ``<prefix>.tenant.<tenant>.documents.submitted``
(``tenant_intake_topic``): there the topic, which only that tenant's principal may write, says whose a record is,
tombstones included. On the shared intake topics, which only docstream's own principals write, the record's
``tenant`` field says it.
"""

from __future__ import annotations

from dataclasses import dataclass

from docstream.errors import PoisonRecord

__all__ = [
    "DOC_ID_MISMATCH",
    "TENANT_MISMATCH_JOB",
    "TENANT_MISMATCH_PREVIOUS",
    "TENANT_MISMATCH_SOURCE",
    "TENANT_MISMATCH_TOPIC",
    "IntakeRefused",
    "Refusal",
    "Submission",
    "refuse_submission",
    "refuse_tombstone",
    "tenant_intake_topic",
    "tenant_intakes_pattern",
    "tenant_of_topic",
]

TENANT_MISMATCH_TOPIC = "tenant_mismatch_topic"
"""A record on a tenant's own intake topic names another tenant."""
TENANT_MISMATCH_JOB = "tenant_mismatch_job"
"""The record's job belongs to another tenant."""
TENANT_MISMATCH_PREVIOUS = "tenant_mismatch_previous"
"""The record's ``previous_doc_id`` is no document of its tenant (another tenant's, or none at all: one code for
both, so that a refusal never says whether another tenant's document exists)."""
TENANT_MISMATCH_SOURCE = "tenant_mismatch_source"
"""A tombstone on a tenant's own intake topic names another tenant's document (and so its source)."""
DOC_ID_MISMATCH = "doc_id_mismatch"
"""The record's ``doc_id`` names a document of another job (a doc_id is ``docstream.ids.doc_id(job_id, sha256)``,
one job's only): handled, it would write over that document's rows."""

_TENANT_PART = ".tenant."
_INTAKE_SUFFIX = ".documents.submitted"


class IntakeRefused(PoisonRecord):
    """An intake record that names what its tenant does not own: it goes to the DLQ with its ``code``."""

    code = "tenant_mismatch"


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a record is refused: ``code`` (the DLQ's error code, the metric's reason) and a message that names
    the record's own tenant only, never what another tenant holds."""

    code: str
    message: str

    def error(self) -> IntakeRefused:
        """The refusal as the ``PoisonRecord`` the loop sends to the DLQ."""
        return IntakeRefused(self.message, code=self.code)


@dataclass(frozen=True, slots=True)
class Submission:
    """What the store says of a ``DocumentSubmitted``'s references, beside what the record says.

    Attributes:
        tenant: the record's ``tenant``.
        job_id, doc_id: the record's.
        document_job_id: the job of the ``documents`` row of its doc_id; None: no such row yet.
        topic_tenant: the tenant of the topic it came from (``tenant_of_topic``); None: a shared intake topic.
        job_tenant: the tenant of its job's ``jobs`` row; None: the job has no row yet (the chunker creates it
            for the record's tenant: the first record of a new job claims it).
        previous_doc_id: the record's.
        previous_tenant: the tenant of the job of the ``previous_doc_id``'s document; None: no such document, or
            its job has no row.
    """

    tenant: str
    job_id: str
    doc_id: str
    document_job_id: str | None = None
    topic_tenant: str | None = None
    job_tenant: str | None = None
    previous_doc_id: str | None = None
    previous_tenant: str | None = None


def refuse_submission(facts: Submission) -> Refusal | None:
    """Why a ``DocumentSubmitted`` may not be handled as its tenant's, or None when it may. Checked in this order:
    the topic's tenant, the doc_id's job, the job's tenant, the earlier version's tenant."""
    tenant = facts.tenant
    if facts.topic_tenant is not None and facts.topic_tenant != tenant:
        return Refusal(TENANT_MISMATCH_TOPIC, f"a record of tenant {tenant[:128]!r} on the intake topic of tenant "
                                              f"{facts.topic_tenant[:128]!r}")
    if facts.document_job_id is not None and facts.document_job_id != facts.job_id:
        return Refusal(DOC_ID_MISMATCH, f"doc_id {facts.doc_id[:128]!r} is no document of job {facts.job_id[:128]!r}")
    if facts.job_tenant is not None and facts.job_tenant != tenant:
        return Refusal(TENANT_MISMATCH_JOB, f"job {facts.job_id[:128]!r} is not a job of tenant {tenant[:128]!r}")
    if facts.previous_doc_id is not None and facts.previous_tenant != tenant:
        return Refusal(TENANT_MISMATCH_PREVIOUS, f"previous_doc_id {facts.previous_doc_id[:128]!r} is not a "
                                                 f"document of tenant {tenant[:128]!r}")
    return None


def refuse_tombstone(topic_tenant: str | None, document_tenant: str) -> Refusal | None:
    """Why a tombstone may not delete the source of a document of ``document_tenant``, or None when it may: on a
    tenant's own intake topic, the document must be that tenant's (on a shared intake topic, which only
    docstream's principals write, any may)."""
    if topic_tenant is None or topic_tenant == document_tenant:
        return None
    return Refusal(TENANT_MISMATCH_SOURCE, f"the tombstone names no document of tenant {topic_tenant[:128]!r}")


def tenant_intake_topic(prefix: str, tenant: str) -> str:
    """The intake topic a tenant that produces directly writes: ``<prefix>.tenant.<tenant>.documents.submitted``.

    Raises:
        ValueError: the tenant holds a character no Kafka topic name does (``:`` or ``@``).
    """
    topic = f"{prefix}{_TENANT_PART}{tenant}{_INTAKE_SUFFIX}"
    if not tenant or any(not (ch.isascii() and (ch.isalnum() or ch in "._-")) for ch in tenant) or len(topic) > 249:
        raise ValueError(f"tenant {tenant[:128]!r} cannot name a Kafka topic (letters, digits, . _ - only)")
    return topic


def tenant_intakes_pattern(prefix: str) -> str:
    """The subscription that reads every tenant's own intake topic (``tenant_intake_topic``): a librdkafka regular
    expression (a leading ``^``), so a tenant's topic created later is read without a restart. Its DLQ topics
    (``....dlq``) do not match."""
    escaped = "".join(f"\\{ch}" if ch == "." else ch for ch in prefix)
    return f"^{escaped}\\.tenant\\.[A-Za-z0-9._-]+\\.documents\\.submitted$"


def tenant_of_topic(prefix: str, topic: str) -> str | None:
    """The tenant whose own intake topic ``topic`` is (``tenant_intake_topic``); None: any other topic."""
    head = f"{prefix}{_TENANT_PART}"
    if not (topic.startswith(head) and topic.endswith(_INTAKE_SUFFIX)):
        return None
    tenant = topic[len(head):len(topic) - len(_INTAKE_SUFFIX)]
    return tenant or None
