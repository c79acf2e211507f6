"""Per-user tumbling windows close on the wall clock, not on the next record."""

from __future__ import annotations

from memwright.events import Signal
from memwright.windows import WindowBuffer


def s(user: str, mid: str) -> Signal:
    return Signal(user, mid, "c1", "text")


def test_windows_are_per_user_and_close_when_their_end_passes() -> None:
    buf = WindowBuffer(10)
    buf.add(s("a", "1"), "r1", now=100.5)
    buf.add(s("b", "2"), "r2", now=105)
    buf.add(s("a", "3"), "r3", now=109.9)
    assert buf.due(109.99) == []
    [wa, wb] = sorted(buf.due(110.0), key=lambda w: w.user_id)
    assert (wa.start, wa.end, [x.message_id for x in wa.signals], wa.receipts) == (100, 110, ["1", "3"], ["r1", "r3"])
    assert wb.user_id == "b"


def test_a_window_stays_open_until_it_is_written() -> None:
    buf = WindowBuffer(1)
    buf.add(s("a", "1"), "r1", now=0.2)
    [w] = buf.due(5)
    assert buf.due(5) == [w]  # a failed write keeps it
    buf.closed(w)
    assert buf.due(5) == []
    buf.add(s("a", "2"), "r2", now=5.1)
    assert [w.start for w in buf.all()] == [5]
