"""Q0's wait for room: the consumer thread sleeps until the batch stage has taken enough, without polling."""

from __future__ import annotations

import threading

from docstream_inference.stages import Inbox


def test_a_wait_for_room_ends_when_a_take_brings_the_queue_down_to_the_level() -> None:
    inbox: Inbox[int] = Inbox(maxsize=4)
    for item in range(4):
        inbox.put_nowait(item)
    results: list[bool] = []
    waiter = threading.Thread(target=lambda: results.append(inbox.wait_at_most(2, timeout_s=30)))
    waiter.start()
    inbox.get_nowait()  # 3 left: above the level, the wait goes on
    waiter.join(0.2)
    assert waiter.is_alive()
    inbox.get_nowait()  # 2 left
    waiter.join(10)
    assert not waiter.is_alive() and results == [True]


def test_a_wait_for_room_at_or_below_the_level_returns_at_once_and_one_above_it_times_out() -> None:
    inbox: Inbox[int] = Inbox(maxsize=4)
    inbox.put_nowait(1)
    assert inbox.wait_at_most(1, timeout_s=0) is True
    inbox.put_nowait(2)
    assert inbox.wait_at_most(1, timeout_s=0.05) is False
    assert inbox.qsize() == 2  # waiting takes nothing
