"""Which chunk the model takes next when several jobs wait: priority lanes, and tenants shared fairly inside a
lane (the inference pipeline's Q0, ``docstream_inference.stages.FairInbox``; the lanes are
``docstream.lanes``). Pure: the caller pushes what it
polled and takes what the rule gives; no clock, no I/O.

Two lanes, ``interactive`` and ``batch``. While both hold work, interactive goes first, but batch keeps a
guaranteed share of the tokens served (``batch_share``), so a steady stream of interactive jobs never starves a
backfill. Measured in tokens, not records: a chunk of 500 tokens costs the model about 500 tokens' time.

Inside a lane each tenant has its own FIFO queue, served by deficit round robin (Shreedhar and Varghese, 1995):
each turn a tenant's deficit grows by ``quantum`` times its weight, and it is served while its next chunk costs
no more than its deficit. Over any stretch where two tenants both have work, the tokens each is served differ
by at most a quantum plus one chunk from their weights' ratio, whatever their backlogs: a tenant's 100,000-page
backfill does not hold another tenant's 3-page job behind it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from docstream.lanes import BATCH, INTERACTIVE, LANES, Lane

__all__ = ["FairQueue", "Waiting"]

_T = TypeVar("_T", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Waiting(Generic[_T]):
    """One item waiting for the model: its lane, its tenant, its cost in tokens (at least 1) and the item."""

    lane: Lane
    tenant: str
    tokens: int
    item: _T


def _step(quantum: int, weights: Mapping[str, float], tenant: str) -> int:
    return max(1, round(quantum * weights.get(tenant, weights.get("", 1.0))))


@dataclass
class _Tenants(Generic[_T]):
    """One lane: a FIFO per tenant, the tenants with work in round-robin order, and their deficits."""

    queues: dict[str, deque[Waiting[_T]]] = field(default_factory=dict)
    order: deque[str] = field(default_factory=deque)
    deficit: dict[str, int] = field(default_factory=dict)
    tokens: int = 0
    count: int = 0

    def push(self, waiting: Waiting[_T]) -> None:
        queue = self.queues.get(waiting.tenant)
        if queue is None:
            queue = self.queues[waiting.tenant] = deque()
            self.order.append(waiting.tenant)
            self.deficit[waiting.tenant] = 0
        queue.append(waiting)
        self.tokens += waiting.tokens
        self.count += 1

    def peek(self, quantum: int, weights: Mapping[str, float]) -> Waiting[_T]:
        """The item ``take`` would give, changing nothing: tenant i of the round-robin order, short of its head's
        cost by s tokens, is served at visit ceil(s / its quantum) * tenants + i; the first such visit wins."""
        size = len(self.order)
        best: tuple[int, Waiting[_T]] | None = None
        for position, tenant in enumerate(self.order):
            head = self.queues[tenant][0]
            step = _step(quantum, weights, tenant)
            short = head.tokens - self.deficit[tenant]
            visit = (-(-short // step) if short > 0 else 0) * size + position
            if best is None or visit < best[0]:
                best = (visit, head)
        assert best is not None
        return best[1]

    def remove(self, unwanted: Callable[[Waiting[_T]], bool]) -> list[Waiting[_T]]:
        """Take out every item ``unwanted`` names, in each tenant's order; the others keep their places."""
        removed: list[Waiting[_T]] = []
        for tenant in list(self.order):
            queue = self.queues[tenant]
            kept = deque(w for w in queue if not unwanted(w))
            if len(kept) == len(queue):
                continue
            removed.extend(w for w in queue if unwanted(w))
            self.tokens -= sum(w.tokens for w in queue) - sum(w.tokens for w in kept)
            self.count -= len(queue) - len(kept)
            if kept:
                self.queues[tenant] = kept
            else:
                del self.queues[tenant], self.deficit[tenant]
                self.order.remove(tenant)
        return removed

    def take(self, quantum: int, weights: Mapping[str, float]) -> Waiting[_T]:
        """The next item by deficit round robin (the lane holds one)."""
        while True:
            tenant = self.order[0]
            queue = self.queues[tenant]
            head = queue[0]
            if head.tokens <= self.deficit[tenant]:
                queue.popleft()
                self.deficit[tenant] -= head.tokens
                self.tokens -= head.tokens
                self.count -= 1
                if not queue:  # a tenant with nothing waiting keeps no credit (DRR)
                    del self.queues[tenant], self.deficit[tenant]
                    self.order.popleft()
                return head
            self.deficit[tenant] += _step(quantum, weights, tenant)
            self.order.rotate(-1)


class FairQueue(Generic[_T]):
    """The waiting chunks of every lane and tenant, and the rule that picks the next.

    Args:
        batch_share: the least share of the tokens served that the batch lane gets while both lanes hold work
            (0 < share < 1).
        quantum: tokens a tenant's deficit grows by per round-robin turn, at weight 1 (about one chunk).
        weights: tenants' weights inside a lane: a weight of 2 is served twice the tokens; a tenant not named has the
            weight under ``""`` (default 1.0).
    """

    def __init__(self, *, batch_share: float = 0.2, quantum: int = 256,
                 weights: Mapping[str, float] | None = None) -> None:
        if not 0 < batch_share < 1:
            raise ValueError("batch_share is between 0 and 1")
        if quantum < 1:
            raise ValueError("quantum is at least 1 token")
        if any(w <= 0 for w in (weights or {}).values()):
            raise ValueError("a tenant's weight is positive")
        self._share = batch_share
        self._quantum = quantum
        self._weights = dict(weights or {})
        self._lanes: dict[Lane, _Tenants[_T]] = {lane: _Tenants() for lane in LANES}
        self._served: dict[Lane, int] = dict.fromkeys(LANES, 0)

    def __len__(self) -> int:
        return sum(lane.count for lane in self._lanes.values())

    def tokens(self, lane: Lane) -> int:
        """Tokens waiting in ``lane``."""
        return self._lanes[lane].tokens

    def count(self, lane: Lane) -> int:
        """Items waiting in ``lane``."""
        return self._lanes[lane].count

    def tenant_tokens(self, lane: Lane) -> dict[str, int]:
        """Tokens waiting in ``lane`` per tenant."""
        return {tenant: sum(w.tokens for w in queue) for tenant, queue in self._lanes[lane].queues.items()}

    def remove(self, unwanted: Callable[[Waiting[_T]], bool]) -> list[Waiting[_T]]:
        """Take out every waiting item ``unwanted`` names (a revoked partition's, or all at a stop); the others keep
        their order and their tenants' deficits."""
        return [w for lane in LANES for w in self._lanes[lane].remove(unwanted)]

    def push(self, waiting: Waiting[_T]) -> None:
        """Add an item behind its tenant's earlier ones."""
        if waiting.tokens < 1:
            waiting = Waiting(waiting.lane, waiting.tenant, 1, waiting.item)
        self._lanes[waiting.lane].push(waiting)

    def _lane(self) -> Lane | None:
        busy = [lane for lane in LANES if self._lanes[lane].queues]
        if len(busy) < 2:
            return busy[0] if busy else None
        served = self._served[INTERACTIVE] + self._served[BATCH]
        return BATCH if self._served[BATCH] < self._share * served else INTERACTIVE

    def take(self) -> Waiting[_T] | None:
        """The next item to run, or None when nothing waits."""
        lane = self._lane()
        if lane is None:
            return None
        waiting = self._lanes[lane].take(self._quantum, self._weights)
        if all(self._lanes[other].queues for other in LANES):
            self._served[lane] += waiting.tokens
        else:  # one lane alone: its turn is not a share of anything, and the shares start over when both wait
            self._served = dict.fromkeys(LANES, 0)
        return waiting

    def take_batch(self, max_items: int, max_tokens: int) -> list[Waiting[_T]]:
        """Up to ``max_items`` items of at most ``max_tokens`` tokens together (at least one item when any waits),
        in the rule's order: a micro-batch for the model."""
        batch: list[Waiting[_T]] = []
        total = 0
        while len(batch) < max_items:
            lane = self._lane()
            if lane is None:
                break
            head = self._lanes[lane].peek(self._quantum, self._weights)
            if batch and total + head.tokens > max_tokens:
                break
            taken = self.take()
            assert taken is not None
            batch.append(taken)
            total += taken.tokens
        return batch
