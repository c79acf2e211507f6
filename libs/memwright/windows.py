"""Per-user tumbling windows on processing time, for the sweeper.

Windows are aligned to multiples of the window size; a window closes when the
wall clock passes its end (not when a later record happens to arrive), so a
user's last signals are swept even if the topic goes quiet. A window whose write
failed waits until its `retry_at` without holding back any other user's window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from memwright.events import Signal


@dataclass
class Window:
    user_id: str
    start: float
    end: float
    signals: list[Signal] = field(default_factory=list)
    receipts: list[Any] = field(default_factory=list)  # whatever the caller acks after the write, one per signal
    failures: int = 0  # failed writes in a row, of any kind (sets the backoff)
    attempts: int = 0  # failed writes that count towards the bound (not "PostgreSQL unavailable")
    retry_at: float = 0.0  # not due again before this time
    last_error: str = ""

    def rest(self, first: int) -> Window:
        """The signals from index `first` on, as a window with the same times and failure record."""
        return Window(
            self.user_id,
            self.start,
            self.end,
            self.signals[first:],
            self.receipts[first:],
            self.failures,
            self.attempts,
            self.retry_at,
            self.last_error,
        )


class WindowBuffer:
    def __init__(self, size_seconds: float) -> None:
        self.size = size_seconds
        self.open: dict[str, Window] = {}

    def add(self, signal: Signal, receipt: Any, now: float) -> None:
        window = self.open.get(signal.user_id)
        if window is None:
            start = math.floor(now / self.size) * self.size
            window = self.open[signal.user_id] = Window(signal.user_id, start, start + self.size)
        window.signals.append(signal)
        window.receipts.append(receipt)

    def due(self, now: float) -> list[Window]:
        """Windows whose end has passed and that are not waiting to retry, oldest first."""
        return sorted((w for w in self.open.values() if w.end <= now and w.retry_at <= now), key=lambda w: w.end)

    def detach(self, window: Window) -> None:
        """Take a window out before writing it: signals that arrive during the write open a new one."""
        if self.open.get(window.user_id) is window:
            del self.open[window.user_id]

    def restore(self, window: Window) -> None:
        """Put back a window whose write failed, ahead of anything that arrived meanwhile."""
        newer = self.open.get(window.user_id)
        if newer is not None:
            window.signals += newer.signals
            window.receipts += newer.receipts
        self.open[window.user_id] = window

    def oldest_closed_end(self, now: float) -> float | None:
        """The end of the oldest window that has closed and is still here (unwritten), or None."""
        return min((w.end for w in self.open.values() if w.end <= now), default=None)

    def all(self) -> list[Window]:
        return list(self.open.values())
