"""A user's export as a download: one answer for the JSON route and the console's button."""

from __future__ import annotations

import asyncpg
from aiohttp import web
from memwright.store import erasure


async def download(pool: asyncpg.Pool, user_id: str) -> web.Response:
    """Everything kept about `user_id` (erasure.export), as a JSON file to save."""
    async with pool.acquire() as conn:
        document = await erasure.export(conn, user_id)
    return web.json_response(
        document, headers={"Content-Disposition": f'attachment; filename="memwright-export-{user_id}.json"'}
    )
