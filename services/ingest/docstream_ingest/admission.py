"""Admission of a submission against its tenant's quotas, from the store (docs/operations.md "Quotas and
admission"): the same answer from every API process and CLI, since each reads the tenant's figures under the
tenant's admission lease and writes its documents in flight before letting the next one read.

The rule itself is pure (``docstream.admission``); this module is its edge: the store, the clock, the wait.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from docstream.admission import DAILY, DOCUMENTS, ENQUEUED, Capacity, TenantLoad, capacity, day_of
from docstream.errors import QuotaExceeded
from docstream.settings import FairnessSettings
from docstream.store.base import ResultStore

__all__ = ["GRADUAL_STEP", "Admitting", "admit", "admit_some", "tenant_capacity"]

GRADUAL_STEP = 8
"""Documents a gradual admission lets in per round when only a token limit holds the tenant (a document's tokens
are known once it is chunked)."""


def tenant_capacity(store: ResultStore, fairness: FairnessSettings, tenant: str, now: datetime) -> Capacity:
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
        cap = tenant_capacity(store, fairness, tenant, now)
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
        cap = tenant_capacity(store, fairness, tenant, now)
        if cap.limited_by is not None:
            return 0, cap
        room = cap.documents if cap.documents is not None else GRADUAL_STEP
        taken = list(doc_ids[:room])
        store.admit_documents(tenant, job_id, taken, now)
        return len(taken), cap


Admitting = Callable[[int, int, Capacity], None]
"""A gradual admission's progress: documents admitted so far, of how many, and the capacity now."""
