"""Connection pools."""

from __future__ import annotations

import json

import asyncpg


async def _init_connection(conn: asyncpg.Connection) -> None:
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def create_pool(dsn: str, min_size: int = 1, max_size: int = 10) -> asyncpg.Pool:
    pool = await asyncpg.create_pool(
        dsn, min_size=min_size, max_size=max_size, init=_init_connection, command_timeout=60
    )
    assert pool is not None
    return pool


async def connect(dsn: str) -> asyncpg.Connection:
    conn = await asyncpg.connect(dsn, command_timeout=60)
    await _init_connection(conn)
    return conn
