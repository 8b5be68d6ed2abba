"""docstream_sink.points.plan_repair: what ``sink verify --repair`` writes beside a live sink, from the store's
first read, the scan and the store's second read. Pure."""

from __future__ import annotations

from docstream_sink.points import Repair, SinkPoint, compare, plan_repair


def _point(point_id: str, doc_id: str, vector: tuple[float, ...] = (1.0, 0.0)) -> SinkPoint:
    return SinkPoint(point_id, "t", "s3://b/a.pdf", doc_id, list(vector))


def _plan(expected: list[SinkPoint], held: list[SinkPoint], current: list[SinkPoint]) -> Repair:
    first = {p.id: p for p in expected}
    scanned = {p.id: (p.doc_id, p.vector) for p in held}
    now: dict[str, dict[str, SinkPoint]] = {}
    for point in current:
        now.setdefault(point.doc_id, {})[point.id] = point
    return plan_repair(compare(first.values(), scanned), first, scanned, now)


def test_a_point_the_sink_wrote_after_the_first_read_is_kept_and_one_behind_its_back_is_deleted() -> None:
    # d2 completed after the store's first read; the sink wrote x before the scan: the second read claims it
    plan = _plan(expected=[_point("a", "d1")], held=[_point("a", "d1"), _point("x", "d2"), _point("z", "junk")],
                 current=[_point("x", "d2")])
    assert plan == Repair(delete=(("z", "junk"),), settled=("x",))


def test_a_version_the_sink_wrote_during_the_scan_is_neither_overwritten_nor_deleted() -> None:
    # the first read wanted v1's a, b, c; during the scan the sink wrote v2 (a kept its text, b changed to n) and
    # deleted v1's other points; the second read: v1 is no longer current, v2 is
    plan = _plan(expected=[_point("a", "v1"), _point("b", "v1")], held=[_point("a", "v2"), _point("n", "v2")],
                 current=[_point("a", "v2"), _point("n", "v2")])
    assert plan == Repair(settled=("b", "a", "n"))  # missing b, stale a, extra n: all the sink's own


def test_differences_the_second_read_still_asks_for_are_repaired_with_its_points() -> None:
    expected = [_point("m", "d1"), _point("s", "d1"), _point("v", "d1")]
    held = [_point("s", "d0"), _point("v", "d1", (0.0, 1.0)), _point("e", "d1")]
    current = [_point("m", "d1", (0.6, 0.8)), _point("s", "d1"), _point("v", "d1")]  # m re-embedded since
    plan = _plan(expected, held, current)
    assert plan.upsert == tuple(current) and plan.settled == ()
    assert plan.delete == (("e", "d1"),)  # held under a current document that does not claim it
