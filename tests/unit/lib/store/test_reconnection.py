"""The Cassandra driver's reconnection schedule: capped, and never ending."""

from __future__ import annotations

import itertools

import pytest
from pydantic import ValidationError

from docstream.settings import CassandraSettings
from docstream.store.cassandra import CassandraStore, reconnection_policy


def test_the_schedule_doubles_from_half_a_second_up_to_the_cap_with_jitter_and_never_ends() -> None:
    delays = list(itertools.islice(reconnection_policy(5.0).new_schedule(), 1000))

    assert len(delays) == 1000  # the driver's default stops after 64 attempts
    assert 0.5 <= delays[0] <= 0.575
    assert all(0.5 <= d <= 5.0 for d in delays)
    assert delays[-1] == pytest.approx(5.0, rel=0.15)


def test_a_cap_below_half_a_second_waits_the_cap_each_time() -> None:
    delays = list(itertools.islice(reconnection_policy(0.2).new_schedule(), 10))

    assert delays == [0.2] * 10


def test_the_store_gives_the_driver_the_settings_cap() -> None:
    store = CassandraStore(CassandraSettings(reconnect_max_delay_s=7.0))

    policy = store._new_cluster().reconnection_policy

    assert policy.max_delay == 7.0
    assert policy.max_attempts is None


@pytest.mark.parametrize("value", [0, -1, 601])
def test_a_cap_out_of_range_is_refused(value: float) -> None:
    with pytest.raises(ValidationError, match="reconnect_max_delay_s"):
        CassandraSettings(reconnect_max_delay_s=value)
