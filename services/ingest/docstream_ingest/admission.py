"""Admission of a submission against its tenant's quotas, from the store (docs/operations.md "Quotas and
admission"): the same answer from every API process and CLI, since each reads the tenant's figures under the
tenant's admission lease and writes its documents in flight before letting the next one read.

The rule itself is pure (``docstream.tenants.admission``); this module is its edge: the store, the clock, the wait. An
admission that finds the tenant at a limit first reconciles its slots (``reconcile_slots``), and a submission that
fails after its admission gives its slots back (``release``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from datetime import datetime

from docstream.errors import QuotaExceeded, StoreError
from docstream.logging import get_logger
from docstream.settings import FairnessSettings
from docstream.store.base import TERMINAL_DOC_STATES, ResultStore, TenantLedger
from docstream.tenants.admission import (
    DAILY,
    DOCUMENTS,
    ENQUEUED,
    Capacity,
    SlotDocument,
    TenantLoad,
    capacity,
    day_of,
    ended_slots,
    slots_to_check,
)

__all__ = ["GRADUAL_STEP", "RECONCILE_BUDGET", "Admitting", "admit", "admit_some", "reconcile_slots", "release",
           "tenant_capacity"]

_log = get_logger(__name__)

GRADUAL_STEP = 8
"""Documents a gradual admission lets in per round when only a token limit holds the tenant (a document's tokens
are known once it is chunked)."""

RECONCILE_BUDGET = 64
"""Documents rows one reconciliation reads at most (point reads, under the tenant's admission lease)."""

_RECONCILE_SLOTS = 10_000
"""In-flight rows one reconciliation reads at most (one partition, as ``tenant_load`` reads it)."""


def tenant_capacity(store: TenantLedger, fairness: FairnessSettings, tenant: str, now: datetime) -> Capacity:
    """What ``tenant`` may submit now (no store read for a tenant without quotas)."""
    limits = fairness.tenant(tenant).limits()
    if not limits.any:
        return capacity(limits, TenantLoad(), now)
    return capacity(limits, store.tenant_load(tenant, day_of(now)), now)


def _refusal(cap: Capacity, tenant: str, count: int, limit: str) -> QuotaExceeded:
    limits, load = cap.limits, cap.load
    if limit == DOCUMENTS:
        most = limits.max_documents_in_flight
        if most is not None and count > most:
            message = (f"{count} documents are more than tenant {tenant}'s {DOCUMENTS} ({most}): submit them with "
                       "--admit gradually (docstream submit), or in parts")
        else:
            message = (f"tenant {tenant} has {load.documents_in_flight} of {most} documents in flight: "
                       f"{count} more do not fit")
    elif limit == ENQUEUED:
        message = (f"tenant {tenant} has {load.enqueued_tokens} tokens enqueued, at its {ENQUEUED} "
                   f"({limits.max_enqueued_tokens})")
    else:
        message = f"tenant {tenant} used {load.tokens_today} tokens today, its {DAILY} ({limits.max_tokens_per_day})"
    return QuotaExceeded(f"{message}; nothing was submitted", limit=limit, retry_after_s=cap.retry_after_s)


def reconcile_slots(store: ResultStore, tenant: str, now: datetime, *, budget: int = RECONCILE_BUDGET,
                    start: int | None = None) -> list[str]:
    """Free the slots of the tenant's documents that ended while their slot stayed taken (docs/operations.md "Quotas
    and admission"): at most ``budget`` documents rows are read, from a random place among the slots unless
    ``start`` says where (``docstream.tenants.admission.slots_to_check``).

    Returns:
        The doc_ids whose slots were freed.

    Raises:
        StoreError: the store failed.
    """
    slots = store.list_in_flight(tenant, _RECONCILE_SLOTS)
    if not slots:
        return []
    checked = slots_to_check(slots, budget, random.randrange(len(slots)) if start is None else start)
    documents: dict[str, SlotDocument | None] = {}
    for slot in checked:
        row = store.get_document(slot.doc_id)
        documents[slot.doc_id] = None if row is None else SlotDocument(row.job_id, row.status in TERMINAL_DOC_STATES,
                                                                       row.updated_at)
    freed = ended_slots(checked, documents, now)
    if freed:
        store.release_documents(tenant, freed)
        _log.info("quota_slots_reconciled", tenant=tenant, freed=len(freed), checked=len(checked),
                  in_flight=len(slots))
    return freed


def release(store: TenantLedger, fairness: FairnessSettings, tenant: str, doc_ids: Sequence[str]) -> None:
    """Give back the slots of admitted documents that will not run (their submission failed after admission). A
    store failure here is logged, not raised: the caller is handling the failure that brought it here.
    """
    if not fairness.limited(tenant) or not doc_ids:
        return
    try:
        store.release_documents(tenant, doc_ids)
    except StoreError as exc:
        _log.warning("quota_slots_not_released", tenant=tenant, documents=len(doc_ids), error_code=exc.code,
                     error=str(exc))


def _reconciled_capacity(store: ResultStore, fairness: FairnessSettings, tenant: str, count: int,
                         now: datetime) -> Capacity:
    """The tenant's capacity; when ``count`` documents do not fit by a limit that ending documents free, after
    reconciling its slots."""
    cap = tenant_capacity(store, fairness, tenant, now)
    if cap.refusal_limit(count) in (DOCUMENTS, ENQUEUED) and reconcile_slots(store, tenant, now):
        cap = tenant_capacity(store, fairness, tenant, now)
    return cap


def admit(store: ResultStore, fairness: FairnessSettings, tenant: str, job_id: str, doc_ids: Sequence[str],
          now: datetime) -> None:
    """Admit every one of ``doc_ids`` or none: the tenant's documents in flight from now on.

    Raises:
        QuotaExceeded: a limit holds them back; nothing was written.
        StoreError: the store failed, or another admission of the tenant held its lease too long
            (``admission_busy``).
    """
    if not fairness.limited(tenant) or not doc_ids:
        return
    with store.admission_lease(tenant):
        cap = _reconciled_capacity(store, fairness, tenant, len(doc_ids), now)
        limit = cap.refusal_limit(len(doc_ids))
        if limit is not None:
            raise _refusal(cap, tenant, len(doc_ids), limit)
        store.admit_documents(tenant, job_id, doc_ids, now)


def admit_some(store: ResultStore, fairness: FairnessSettings, tenant: str, job_id: str, doc_ids: Sequence[str],
               now: datetime) -> tuple[int, Capacity]:
    """Admit as many of ``doc_ids``, in order, as the tenant's quotas allow now (gradual admission).

    Returns:
        How many were admitted (the first that many), and the capacity they were admitted under.

    Raises:
        StoreError: as ``admit``.
    """
    if not fairness.limited(tenant):
        return len(doc_ids), tenant_capacity(store, fairness, tenant, now)
    with store.admission_lease(tenant):
        cap = _reconciled_capacity(store, fairness, tenant, len(doc_ids), now)
        if cap.limited_by is not None:
            return 0, cap
        room = cap.documents if cap.documents is not None else GRADUAL_STEP
        taken = list(doc_ids[:room])
        store.admit_documents(tenant, job_id, taken, now)
        return len(taken), cap


Admitting = Callable[[int, int, Capacity], None]
"""A gradual admission's progress: documents admitted so far, of how many, and the capacity now."""
