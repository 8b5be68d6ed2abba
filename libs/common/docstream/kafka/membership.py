"""MembershipWatch: tells when a subscribed consumer has stayed outside its group for too long.

librdkafka drops a consumer's member id when its session times out (a broker outage longer than
``session.timeout.ms``) and gets a new one when it joins again, normally seconds after the broker
is back. A consumer that stays without a member id far longer than any outage-and-rejoin is stuck
(seen once after a broker restart, docs/reliability.md): its caller replaces it with a new consumer.
Pure: the caller passes the member id it read and the time.
"""

from __future__ import annotations

__all__ = ["MembershipWatch"]


class MembershipWatch:
    """Says when the member id has been empty for ``rejoin_timeout_s`` in a row.

    Args:
        rejoin_timeout_s: longest time outside the group (no member id) that is still normal; it
            covers a broker restart plus the rejoin. The clock starts again after ``restart``.
    """

    def __init__(self, rejoin_timeout_s: float) -> None:
        if rejoin_timeout_s <= 0:
            raise ValueError("rejoin_timeout_s must be positive")
        self.rejoin_timeout_s = rejoin_timeout_s
        self._outside_since: float | None = None

    def observe(self, member_id: str | None, now: float) -> bool:
        """Record one reading; True when the consumer has been outside the group for too long."""
        if member_id:
            self._outside_since = None
            return False
        if self._outside_since is None:
            self._outside_since = now
        return now - self._outside_since >= self.rejoin_timeout_s

    def outside_for(self, now: float) -> float:
        """Seconds without a member id so far (0 while in the group)."""
        return 0.0 if self._outside_since is None else now - self._outside_since

    def restart(self, now: float) -> None:
        """A new consumer replaced the old one at ``now``: its join gets the whole timeout."""
        self._outside_since = now
