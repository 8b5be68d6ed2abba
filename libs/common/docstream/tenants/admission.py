"""Per-tenant quotas: what a tenant may submit now, and the verdict on a submission (docs/operations.md "Quotas
and admission"). Pure: the caller reads the tenant's figures from the store and hands them in with the time.

Three limits, each optional:

* ``max_documents_in_flight``: documents admitted and not terminal yet;
* ``max_enqueued_tokens``: tokens of the tenant's chunked documents not terminal yet (a document's tokens count
  from its chunking to its end: what waits for the model, at document grain);
* ``max_tokens_per_day``: tokens of the tenant's documents that ended this UTC day.

A submission of ``n`` documents is admitted when the documents fit (in flight + n <= the limit) and the token
figures are below theirs: a document's tokens are known only once it is chunked, so the last admission may take a
token figure past its limit by its own size. Refused, it names the limit and says when to try again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

__all__ = [
    "DAILY",
    "DOCUMENTS",
    "ENQUEUED",
    "ORPHAN_AFTER",
    "Capacity",
    "Limits",
    "Slot",
    "SlotDocument",
    "TenantLoad",
    "capacity",
    "day_of",
    "ended_slots",
    "slots_to_check",
]

DOCUMENTS = "max_documents_in_flight"
ENQUEUED = "max_enqueued_tokens"
DAILY = "max_tokens_per_day"

_RETRY_FLIGHT_S = 5
"""Retry-After of a refusal by documents or enqueued tokens: they free as documents end, seconds apart."""

ORPHAN_AFTER = timedelta(minutes=10)
"""A slot whose document has no row this long after its admission is freed: the intake writes the rows right after
admitting, so its process died in between and the document will never run."""


@dataclass(frozen=True, slots=True)
class Limits:
    """A tenant's limits; None: no limit of that kind."""

    max_documents_in_flight: int | None = None
    max_enqueued_tokens: int | None = None
    max_tokens_per_day: int | None = None

    @property
    def any(self) -> bool:
        """Whether any limit is set (none: admission reads nothing)."""
        return any(v is not None for v in (self.max_documents_in_flight, self.max_enqueued_tokens,
                                           self.max_tokens_per_day))


@dataclass(frozen=True, slots=True)
class TenantLoad:
    """A tenant's figures now, from the store."""

    documents_in_flight: int = 0
    enqueued_tokens: int = 0
    tokens_today: int = 0


@dataclass(frozen=True, slots=True)
class Capacity:
    """What a tenant may submit now.

    Attributes:
        documents: how many more documents may be admitted now (None: no limit on documents; 0: none).
        limited_by: the limit that holds submissions back now, or None.
        retry_after_s: when ``documents`` is 0, seconds until it is worth asking again.
        load: the figures it was computed from.
        limits: the tenant's limits.
    """

    documents: int | None
    limited_by: str | None
    retry_after_s: int
    load: TenantLoad
    limits: Limits

    def admits(self, count: int) -> bool:
        """Whether ``count`` documents may be admitted now."""
        return self.limited_by is None and (self.documents is None or count <= self.documents)

    def refusal_limit(self, count: int) -> str | None:
        """The limit a submission of ``count`` documents is refused by, or None when it is admitted."""
        if self.limited_by is not None:
            return self.limited_by
        return DOCUMENTS if self.documents is not None and count > self.documents else None


def day_of(now: datetime) -> str:
    """The UTC day ``now`` falls in, ``YYYY-MM-DD``: the key of the per-day figures."""
    return now.astimezone(UTC).strftime("%Y-%m-%d")


def _seconds_to_midnight(now: datetime) -> int:
    utc = now.astimezone(UTC)
    midnight = (utc + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    return max(1, int((midnight - utc).total_seconds()) + 1)


def capacity(limits: Limits, load: TenantLoad, now: datetime) -> Capacity:
    """What the tenant may submit now, and which limit holds it back."""
    if limits.max_tokens_per_day is not None and load.tokens_today >= limits.max_tokens_per_day:
        return Capacity(0, DAILY, _seconds_to_midnight(now), load, limits)
    if limits.max_enqueued_tokens is not None and load.enqueued_tokens >= limits.max_enqueued_tokens:
        return Capacity(0, ENQUEUED, _RETRY_FLIGHT_S, load, limits)
    if limits.max_documents_in_flight is None:
        return Capacity(None, None, 0, load, limits)
    room = max(0, limits.max_documents_in_flight - load.documents_in_flight)
    if room == 0:
        return Capacity(0, DOCUMENTS, _RETRY_FLIGHT_S, load, limits)
    return Capacity(room, None, _RETRY_FLIGHT_S, load, limits)


@dataclass(frozen=True, slots=True)
class Slot:
    """A document holding one of its tenant's slots (a ``tenant_inflight`` row with an admission)."""

    doc_id: str
    job_id: str
    admitted_at: datetime


@dataclass(frozen=True, slots=True)
class SlotDocument:
    """What reconciliation reads of a slot's document (its ``documents`` row).

    Attributes:
        job_id: the job the row belongs to.
        ended: whether its status is terminal (completed, partial, failed, skipped).
        updated_at: when the status was last written.
    """

    job_id: str
    ended: bool
    updated_at: datetime


def slots_to_check(slots: Sequence[Slot], budget: int, start: int) -> list[Slot]:
    """At most ``budget`` of ``slots``, oldest admission first, from position ``start`` (taken modulo their number) on,
    wrapping round: a caller that varies ``start`` reaches every slot, however many there are, at ``budget`` reads of
    document rows per check."""
    if budget <= 0 or not slots:
        return []
    ordered = sorted(slots, key=lambda slot: (slot.admitted_at, slot.doc_id))
    first = start % len(ordered)
    return (ordered[first:] + ordered[:first])[:budget]


def ended_slots(slots: Sequence[Slot], documents: Mapping[str, SlotDocument | None], now: datetime) -> list[str]:
    """The doc_ids of ``slots`` to free: their document's row, of the same job, ended at or after the admission (an
    end written before it is a previous run of a document admitted again), or the document has no row
    ``ORPHAN_AFTER`` after its admission. A slot missing from ``documents`` (not read) is kept."""
    freed: list[str] = []
    for slot in slots:
        if slot.doc_id not in documents:
            continue
        document = documents[slot.doc_id]
        if document is None:
            if now - slot.admitted_at >= ORPHAN_AFTER:
                freed.append(slot.doc_id)
        elif document.ended and document.job_id == slot.job_id and document.updated_at >= slot.admitted_at:
            freed.append(slot.doc_id)
    return freed
