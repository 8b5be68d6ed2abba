"""The order make test's workers take the test files in (tests/fixtures/ordering.py). Pure."""

from __future__ import annotations

from tests.fixtures.ordering import UNKNOWN_S, file_seconds, longest_first


def test_files_go_longest_first_and_each_file_keeps_its_items_in_order() -> None:
    items = ["a::1", "b::1", "a::2", "c::1", "b::2"]
    file_of = {i: i.split("::")[0] for i in items}
    ordered = longest_first(items, file_of, seconds={"a": 1.0, "b": 30.0, "c": 5.0})
    assert ordered == ["b::1", "b::2", "c::1", "a::1", "a::2"]


def test_a_file_without_a_figure_counts_as_unknown_and_ties_keep_their_first_order() -> None:
    seconds = {"slow": UNKNOWN_S + 1, "quick": UNKNOWN_S - 1, "same": UNKNOWN_S}
    assert longest_first(["quick", "new", "same", "slow"], seconds=seconds) == ["slow", "new", "same", "quick"]


def test_a_durations_report_sums_call_setup_and_teardown_per_file() -> None:
    report = [
        "============================= slowest durations =============================",
        "73.62s call     tests/integration/test_replay.py::test_replay",
        "2.50s setup    tests/integration/test_replay.py::test_replay",
        "0.40s teardown tests/integration/test_x.py::TestX::test_y[kafka]",
        "(12 durations < 0.005s hidden.  Use -vv to show these durations.)",
        "1.00s call     tests/integration/test_x.py::test_z",
    ]
    assert file_seconds(report) == {"tests/integration/test_replay.py": 76.1, "tests/integration/test_x.py": 1.4}
