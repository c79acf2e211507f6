"""Versioned SQL migrations: files NNNN_name.sql applied in order, each in a transaction.

Applied versions are recorded in schema_migrations with a checksum; a changed
file that was already applied is an error, not a silent re-run.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources

from memwright.store.db import connect

LOCK_KEY = 7_246_001  # advisory lock: two migrators never run at once


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def load_migrations() -> list[Migration]:
    folder = resources.files("memwright.store").joinpath("migrations")
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            version, _, name = entry.name.removesuffix(".sql").partition("_")
            found.append(Migration(int(version), name, entry.read_text()))
    return sorted(found, key=lambda m: m.version)


async def migrate(dsn: str) -> list[int]:
    """Apply pending migrations; return the versions applied now (empty when up to date)."""
    conn = await connect(dsn)
    applied_now = []
    try:
        await conn.execute("SELECT pg_advisory_lock($1)", LOCK_KEY)
        await conn.execute(
            """CREATE TABLE IF NOT EXISTS schema_migrations (
                   version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,
                   applied_at timestamptz NOT NULL DEFAULT now())"""
        )
        done = {
            r["version"]: r["checksum"] for r in await conn.fetch("SELECT version, checksum FROM schema_migrations")
        }
        for m in load_migrations():
            if m.version in done:
                if done[m.version] != m.checksum:
                    raise RuntimeError(
                        f"migration {m.version:04d}_{m.name}.sql changed after it was applied; "
                        "add a new migration instead of editing an applied one"
                    )
                continue
            async with conn.transaction():
                await conn.execute(m.sql)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                    m.version,
                    m.name,
                    m.checksum,
                )
            applied_now.append(m.version)
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", LOCK_KEY)
        await conn.close()
    return applied_now


def sibling_dsn(dsn: str, database: str) -> str:
    """The DSN of another database on the same server, with the same credentials."""
    return dsn.rsplit("/", 1)[0] + "/" + database


async def create_database(admin_dsn: str, database: str, *, replace: bool = False) -> str:
    """Create database `database` beside `admin_dsn`'s (dropping it first if `replace`), migrate it,
    and return its DSN. Demo, eval, bench and tests each run on a database of their own."""
    conn = await connect(admin_dsn)
    try:
        if replace:
            await conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{database}"')
    finally:
        await conn.close()
    dsn = sibling_dsn(admin_dsn, database)
    await migrate(dsn)
    return dsn


async def drop_database(admin_dsn: str, database: str) -> None:
    conn = await connect(admin_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    finally:
        await conn.close()
