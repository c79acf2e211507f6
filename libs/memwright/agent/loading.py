"""Weights a process loads once and shares: the update reader's and the slot reader's."""

from __future__ import annotations

import threading
import zipfile
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def load_once(load: Callable[[], T]) -> Callable[[], T | None]:
    """`load`, called at most once per process (under a lock) and its result shared; None when the
    weights are missing, stale or torn (then the policy does without them)."""
    lock = threading.Lock()
    loaded: list[T | None] = []

    def shared() -> T | None:
        with lock:
            if not loaded:
                try:
                    loaded.append(load())
                except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
                    loaded.append(None)
            return loaded[0]

    return shared
