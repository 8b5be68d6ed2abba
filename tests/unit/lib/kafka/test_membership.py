"""MembershipWatch: when a consumer without a member id counts as stuck outside its group."""

from __future__ import annotations

import pytest

from docstream.kafka.membership import MembershipWatch


def test_a_consumer_in_its_group_is_never_stuck() -> None:
    watch = MembershipWatch(30.0)
    assert not any(watch.observe("member-1", t) for t in (0.0, 100.0, 1000.0))
    assert watch.outside_for(1000.0) == 0.0


def test_outside_the_group_longer_than_the_timeout_is_stuck() -> None:
    watch = MembershipWatch(30.0)
    assert not watch.observe("member-1", 0.0)
    assert not watch.observe("", 10.0)  # the session timed out: the clock starts here
    assert not watch.observe(None, 39.9)
    assert watch.outside_for(39.9) == pytest.approx(29.9)
    assert watch.observe("", 40.0)


def test_a_rejoin_resets_the_clock() -> None:
    watch = MembershipWatch(30.0)
    assert not watch.observe("", 0.0)
    assert not watch.observe("member-2", 25.0)  # rejoined in time
    assert not watch.observe("", 26.0)
    assert not watch.observe("", 55.0)
    assert watch.observe("", 56.0)


def test_after_a_restart_the_new_consumer_gets_the_whole_timeout() -> None:
    watch = MembershipWatch(30.0)
    watch.observe("", 0.0)
    assert watch.observe("", 30.0)
    watch.restart(30.0)
    assert not watch.observe("", 59.0)
    assert watch.observe("", 60.0)


def test_the_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        MembershipWatch(0)
