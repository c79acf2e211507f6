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


def test_signals_arriving_during_a_write_go_to_the_next_window() -> None:
    buf = WindowBuffer(1)
    buf.add(s("a", "1"), "r1", now=0.2)
    [w] = buf.due(5)
    buf.detach(w)  # being written
    buf.add(s("a", "2"), "r2", now=5.1)
    assert [x.message_id for x in w.signals] == ["1"]
    assert [(x.start, [m.message_id for m in x.signals]) for x in buf.all()] == [(5, ["2"])]


def test_a_failed_write_puts_its_window_back_ahead_of_newer_signals() -> None:
    buf = WindowBuffer(1)
    buf.add(s("a", "1"), "r1", now=0.2)
    [w] = buf.due(5)
    buf.detach(w)
    buf.add(s("a", "2"), "r2", now=5.1)
    buf.restore(w)
    [back] = buf.due(5)
    assert back.start == 0 and [m.message_id for m in back.signals] == ["1", "2"] and back.receipts == ["r1", "r2"]
