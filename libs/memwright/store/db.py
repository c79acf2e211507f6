"""Connection pools."""

from __future__ import annotations

import json

import asyncpg


async def _init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def create_pool(
    dsn: str, min_size: int = 1, max_size: int = 10, server_settings: dict[str, str] | None = None
) -> asyncpg.Pool:
    """`server_settings` (e.g. application_name) are session defaults: the pool's reset keeps them."""
    pool = await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        init=_init_connection,
        command_timeout=60,
        server_settings=server_settings,
    )
    assert pool is not None
    return pool


async def connect(dsn: str, server_settings: dict[str, str] | None = None) -> asyncpg.Connection:
    conn = await asyncpg.connect(dsn, command_timeout=60, server_settings=server_settings)
    await _init_connection(conn)
    return conn
