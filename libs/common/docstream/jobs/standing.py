"""Where a job stands in its lane: the tokens ahead of it and when it should start (docs/operations.md "Where a job
stands"). Pure: the caller reads the lanes' queues and the service's rate from the store and hands them in.

The reducer keeps, for every job that has not ended, the tokens of its chunked documents that have not ended
(``lane_queue``), and each inference process writes the tokens per second it wrote over the last minute, under its
consumer group (``throughput``). From those:

* **tokens ahead** of a job are what the model serves before it starts, under the rule of
  ``docstream.lanes``: the tokens waiting in the jobs of its lane submitted before it, plus what the other lane
  is served meanwhile. Interactive goes first and batch keeps ``batch_share`` of the tokens while both wait, so
  ahead of an interactive job with ``A`` tokens before it in its lane the batch lane is served
  ``min(B, A * s / (1 - s))`` of its ``B`` waiting, and ahead of a batch job the interactive lane is served
  ``min(I, A * (1 - s) / s)``. The lane is read first in, first out, which is Kafka's order beyond the
  read-ahead; inside the read-ahead deficit round robin interleaves tenants, so a job of a tenant with little
  work waiting starts sooner than this says, and one behind its own tenant's backfill later.
* **estimated start**: when the model has served the tokens ahead, at the rate of the job's inference group (the
  sum over its processes; the slowest group of a job of several tasks). No rate (nothing written lately) and tokens
  ahead: not known. Across partitions some of the job's chunks may start sooner: each partition is first in,
  first out on its own.

A job with a document ended has started. Counts are at document grain: a document counts all its tokens until it
ends.

**What a tenant sees** (``tenant_standing``, the API's job views and ``/ui``): the tokens ahead are a sum over every
tenant's jobs, rounded up to two significant figures and to at least ``TENANT_TOKENS_STEP``, and the start is
estimated from that figure; so a job behind one other tenant's job shows its position, not that job's exact size.
``docstream status`` (an operator's tool, reading the store) shows the exact figure.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from docstream.jobs.progress import aware
from docstream.lanes import INTERACTIVE, Lane
from docstream.records import JobOptions
from docstream.store.base import JobRow, QueuedJobRow

__all__ = ["RATE_EVERY_S", "RATE_TTL_S", "TENANT_TOKENS_STEP", "QueueStanding", "TokenRate", "coarse_tokens",
           "queue_standing", "tenant_standing"]

RATE_EVERY_S = 10.0
"""How often an inference process writes its rate (``ResultStore.record_throughput``)."""
RATE_TTL_S = 60
"""How long a written rate counts: a process that stopped writing drops out of the sum."""
TENANT_TOKENS_STEP = 1_000
"""The least step of the tokens ahead a tenant sees."""


@dataclass(frozen=True, slots=True)
class QueueStanding:
    """Where a job stands.

    Attributes:
        lane: ``interactive`` or ``batch``.
        started: a document of the job has ended (so the model is on it, or was).
        tokens_ahead: tokens the model serves before the job starts; 0 once started; None once the job ended.
        waiting_tokens: the job's own tokens chunked and waiting (0 before its documents are chunked).
        start_in_s: seconds until it should start; 0 once started or with nothing ahead; None when not known
            (no rate yet) or once it ended.
        estimated_start: ``now + start_in_s``, or None.
    """

    lane: Lane
    started: bool
    tokens_ahead: int | None
    waiting_tokens: int
    start_in_s: float | None
    estimated_start: datetime | None


def _order(created_at: datetime, job_id: str) -> tuple[datetime, str]:
    return aware(created_at), job_id


def queue_standing(job: JobRow, lane_rows: Sequence[QueuedJobRow], other_rows: Sequence[QueuedJobRow],
                   tokens_per_s: float, batch_share: float, now: datetime) -> QueueStanding:
    """Where ``job`` stands at ``now``.

    Args:
        job: the job's row (its lane is in its options).
        lane_rows: the ``lane_queue`` rows of the job's lane (its own among them once a document was chunked).
        other_rows: the rows of the other lane.
        tokens_per_s: the service's rate (``ResultStore.throughput``); 0 when not known.
        batch_share: ``fairness.batch_share``.
        now: the time the estimate is for.
    """
    lane = JobOptions.from_mapping(job.options).lane
    own = next((r for r in lane_rows if r.job_id == job.job_id), None)
    waiting = own.waiting_tokens if own is not None else 0
    if job.status != "running":
        return QueueStanding(lane, True, None, 0, None, None)
    started = (own is not None and own.ended_documents > 0) or (job.completed + job.partial + job.failed) > 0
    if started:
        return QueueStanding(lane, True, 0, waiting, 0.0, aware(now))
    mine = _order(job.created_at, job.job_id)
    before = sum(max(0, r.waiting_tokens) for r in lane_rows
                 if r.job_id != job.job_id and _order(r.created_at, r.job_id) < mine)
    other = sum(max(0, r.waiting_tokens) for r in other_rows)
    ahead = before + _served_meanwhile(lane, before, other, batch_share)
    if ahead == 0:
        return QueueStanding(lane, False, 0, waiting, 0.0, aware(now))
    if tokens_per_s <= 0:
        return QueueStanding(lane, False, ahead, waiting, None, None)
    start_in = ahead / tokens_per_s
    return QueueStanding(lane, False, ahead, waiting, start_in, aware(now) + timedelta(seconds=start_in))


def coarse_tokens(tokens: int) -> int:
    """``tokens`` rounded up to two significant figures and to a multiple of ``TENANT_TOKENS_STEP``; 0 stays 0.

    ``1`` → 1,000; ``12,345`` → 13,000; ``60,000`` → 60,000; ``1,234,567`` → 1,300,000.
    """
    if tokens <= 0:
        return 0
    step = max(TENANT_TOKENS_STEP, int(10 ** (len(str(tokens)) - 2)))
    return -(-tokens // step) * step


def tenant_standing(standing: QueueStanding) -> QueueStanding:
    """``standing`` as the job's tenant sees it: the tokens ahead (other tenants' work among them) coarsened by
    ``coarse_tokens``, and the start estimated from the coarsened figure; its own ``waiting_tokens`` exact."""
    ahead = standing.tokens_ahead
    if standing.started or not ahead:
        return standing
    shown = coarse_tokens(ahead)
    if standing.start_in_s is None or standing.estimated_start is None:
        return QueueStanding(standing.lane, False, shown, standing.waiting_tokens, None, None)
    start_in = standing.start_in_s * shown / ahead
    return QueueStanding(standing.lane, False, shown, standing.waiting_tokens, start_in,
                         standing.estimated_start + timedelta(seconds=start_in - standing.start_in_s))


def _served_meanwhile(lane: Lane, before: int, other: int, batch_share: float) -> int:
    """Tokens of the other lane the model serves while it serves ``before`` tokens of this one."""
    share = min(max(batch_share, 0.0), 1.0)
    # interactive: batch keeps its share of what is served while both wait; batch: interactive goes first, and
    # with no batch share a batch job waits for all of it
    mine, theirs = (1.0 - share, share) if lane == INTERACTIVE else (share, 1.0 - share)
    if mine <= 0.0:
        return other
    served = before * theirs / mine
    return other if served >= other else int(served)


@dataclass(slots=True)
class TokenRate:
    """Tokens per second over a sliding window, from samples of a running total on an injected clock (monotonic
    seconds): the total's growth between the oldest sample in the window and the newest, over the time between
    them. One sample older than the window is kept, so that the window is always spanned."""

    window_s: float = 60.0
    _samples: deque[tuple[float, int]] = field(default_factory=deque)

    def observe(self, at: float, total: int) -> None:
        """The running total at ``at`` (tokens written so far)."""
        self._samples.append((at, total))
        while len(self._samples) > 2 and self._samples[1][0] <= at - self.window_s:
            self._samples.popleft()

    def rate(self) -> float:
        """Tokens per second over the window; 0.0 before two samples."""
        if len(self._samples) < 2:
            return 0.0
        (first_at, first), (last_at, last) = self._samples[0], self._samples[-1]
        return max(0, last - first) / (last_at - first_at) if last_at > first_at else 0.0
