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


def test_a_window_waiting_to_retry_is_not_due_and_does_not_hold_back_later_windows() -> None:
    buf = WindowBuffer(1)
    buf.add(s("a", "1"), "r1", now=0.2)
    buf.add(s("b", "2"), "r2", now=1.2)
    [wa, wb] = buf.due(5)
    assert (wa.user_id, wb.user_id) == ("a", "b")
    buf.detach(wa)
    wa.retry_at = 7.5
    buf.restore(wa)
    assert [w.user_id for w in buf.due(5)] == ["b"]
    assert [w.user_id for w in buf.due(7.5)] == ["a", "b"]
    assert buf.oldest_closed_end(5) == 1, "still the oldest unwritten window while it waits"


def test_the_rest_of_a_window_keeps_its_times_and_failure_record() -> None:
    buf = WindowBuffer(1)
    for i in range(3):
        buf.add(s("a", str(i)), f"r{i}", now=0.2)
    [w] = buf.due(5)
    w.attempts, w.failures, w.retry_at = 2, 3, 9.0
    rest = w.rest(1)
    assert ([m.message_id for m in rest.signals], rest.receipts) == (["1", "2"], ["r1", "r2"])
    assert (rest.start, rest.end, rest.attempts, rest.failures, rest.retry_at) == (0, 1, 2, 3, 9.0)
