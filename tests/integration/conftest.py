"""Fixtures shared by the integration tests of the api's memory routes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest
from aiohttp.test_utils import TestClient, TestServer
from memwright.services.api.app import build_app

from tests.integration.test_api_memories import SETTINGS, Api


@pytest.fixture
async def api(db: asyncpg.Pool) -> AsyncIterator[Api]:
    """The api on the test database, in this process (test_api_security.py has its own)."""
    await db.execute("TRUNCATE user_erasures")
    async with TestClient(TestServer(build_app(SETTINGS, db))) as client:
        yield Api(client, SETTINGS)
    # an erasure drops later-arriving messages accepted before it: leave none for other tests
    await db.execute("TRUNCATE user_erasures")
