"""Small helpers shared by the e2e tests."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


def signal(user_id: str, text: str, conversation_id: str = "c1", message_id: str | None = None) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "user_id": user_id,
        "message_id": message_id or f"m-{uuid.uuid4().hex[:12]}",
        "conversation_id": conversation_id,
        "text": text,
    }


def new_user() -> str:
    return f"u-{uuid.uuid4().hex[:10]}"


async def eventually(
    probe: Callable[[], Awaitable[T | None]], timeout: float = 30.0, what: str = "condition", interval: float = 0.25
) -> T:
    """Poll `probe` every `interval` seconds until it returns something truthy; fail with `what`
    after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = await probe()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(interval)
