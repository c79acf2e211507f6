"""Per-user tumbling windows on processing time, for the sweeper.

Windows are aligned to multiples of the window size; a window closes when the
wall clock passes its end (not when a later record happens to arrive), so a
user's last signals are swept even if the topic goes quiet.
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
    receipts: list[Any] = field(default_factory=list)  # whatever the caller acks after the write


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
        """Windows whose end has passed, oldest first."""
        return sorted((w for w in self.open.values() if w.end <= now), key=lambda w: w.end)

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

    def all(self) -> list[Window]:
        return list(self.open.values())
