"""`memwright index rebuild` and `memwright index check` (issue 5).

Both read MEMWRIGHT_PG_DSN and the MEMWRIGHT_QDRANT_* / MEMWRIGHT_EMBED* variables the
indexer uses. The embedded Qdrant Edge store (no MEMWRIGHT_QDRANT_URL) is opened by one
process at a time: stop the indexer first (a Qdrant server needs no such pause). `--demo`
points both at what `make demo` left behind.

Exit codes: 0 in sync (or rebuilt), 1 drift found, 2 a usage or configuration error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import asyncpg
from prometheus_client import REGISTRY, write_to_textfile
from qdrant_client.http.exceptions import ResponseHandlingException

from memwright.embeddings import make_embedder
from memwright.index.apply import converge
from memwright.index.backend import QdrantUnavailable, open_backend
from memwright.index.drift import KINDS, Drift, find_drift
from memwright.index.rebuild import Progress, rebuild
from memwright.index.relay import outbox_stats
from memwright.index.vectors import VectorIndex
from memwright.settings import PostgresSettings, QdrantSettings
from memwright.store.db import create_pool

DEMO_DB = "memwright_demo"


@dataclass(frozen=True)
class IndexToolSettings(PostgresSettings, QdrantSettings):
    """What the index tools need: PostgreSQL, the Qdrant store and the embedder."""


def _parser(command: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"memwright index {command}")
    p.add_argument(
        "--demo",
        action="store_true",
        help=f"use what `make demo` left: database {DEMO_DB} on MEMWRIGHT_PG_DSN's server and the Qdrant store "
        "that demo recorded in it",
    )
    if command == "rebuild":
        p.description = (
            "Build a fresh Qdrant collection from PostgreSQL and move the alias to it in one step: "
            "searches never see an empty or half-built index."
        )
        p.add_argument("--batch", type=int, default=256, help="memories per embedding/upsert batch (default 256)")
        p.add_argument("--keep-old", action="store_true", help="keep the previous collection instead of dropping it")
        p.add_argument("--quiet", action="store_true", help="no progress lines")
    else:
        p.description = (
            "Compare PostgreSQL with Qdrant: missing, stale and orphaned points per user and overall. Exits 1 on drift."
        )
        p.add_argument(
            "--settle",
            type=float,
            default=2.0,
            help="seconds to wait before reading differences again, so events in flight are not drift (default 2)",
        )
        p.add_argument("--users", type=int, default=20, help="how many users with drift to list (default 20)")
        p.add_argument("--json", action="store_true", help="print the report as JSON (every user and memory id)")
        p.add_argument("--repair", action="store_true", help="converge the drifted memories, then check again")
        p.add_argument(
            "--metrics-file",
            type=Path,
            help="also write the drift gauges in Prometheus text format (node exporter textfile collector)",
        )
    return p


def _settings(demo: bool) -> IndexToolSettings:
    settings: IndexToolSettings = IndexToolSettings.from_env()
    if not demo:
        return settings
    dsn = settings.pg_dsn.rsplit("/", 1)[0] + "/" + DEMO_DB
    return replace(settings, pg_dsn=dsn, qdrant_path=_existing(asyncio.run(demo_store(dsn))), qdrant_url="")


async def demo_store(dsn: str) -> str:
    """The Qdrant store of the demo that made the demo database (recorded with it by `memwright
    demo`): never another run's store, which would report drift that is not there."""
    conn = await asyncpg.connect(dsn)
    try:
        comment = await conn.fetchval(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = $1", DEMO_DB
        )
    finally:
        await conn.close()
    store = json.loads(comment or "{}").get("qdrant_path")
    if not store:
        raise ValueError(f"database {DEMO_DB} does not say which Qdrant store is its own; run `make demo`")
    return store


def _existing(store: str) -> str:
    if not Path(store).is_dir():
        raise ValueError(
            f"the demo that made database {DEMO_DB} kept its Qdrant store in {store}, which is gone "
            "(a test run's demo, or .local removed); run `make demo` again"
        )
    return store


def _say(line: str = "", err: bool = False) -> None:
    print(line, file=sys.stderr if err else sys.stdout, flush=True)


def _where(settings: IndexToolSettings) -> str:
    store = settings.qdrant_url or f"embedded Qdrant Edge store {settings.qdrant_path}"
    return f"PostgreSQL database {settings.pg_dsn.rsplit('/', 1)[-1]!r}, {store}"


# ---- rebuild ------------------------------------------------------------------------------


class _ProgressLine:
    """One line per second at most, and the last one."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.shown_at = -1.0

    def __call__(self, p: Progress) -> None:
        if self.quiet or (p.seconds - self.shown_at < 1.0 and p.done < p.total):
            return
        self.shown_at = p.seconds
        share = f" ({100 * p.done / p.total:3.0f}%)" if p.total else ""
        _say(f"  [{p.seconds:6.1f}s] {p.done:,}/{p.total:,} memories{share}, {p.rate:,.0f}/s")


async def _rebuild(settings: IndexToolSettings, args: argparse.Namespace) -> int:
    embedder = await make_embedder(settings)
    pool = await create_pool(settings.pg_dsn, 1, 2)
    try:
        backend = open_backend(settings)
        try:
            alias = settings.qdrant_collection
            before = await backend.alias_target(alias)
            _say(f"rebuilding Qdrant collection {alias!r} from {_where(settings)}")
            _say(
                f"  embedder {embedder.name} ({embedder.dim} dimensions); "
                f"searches use {before or 'nothing yet'} until the switch"
            )
            done = await rebuild(
                pool,
                backend,
                alias,
                embedder,
                batch=args.batch,
                keep_old=args.keep_old,
                progress=_ProgressLine(args.quiet),
            )
            _say(f"  alias {alias!r} now points at {done.collection!r} (was {done.previous or 'unset'})")
            if done.repaired:
                _say(f"  repaired {done.repaired} point(s) for changes committed during the rebuild")
            if done.previous and done.previous != alias:
                _say(f"  {'dropped' if done.dropped else 'kept'} the previous collection {done.previous!r}")
            _say(
                f"rebuilt {done.memories:,} memories in {done.seconds:.1f}s "
                f"({done.rate:,.0f} memories/s, embedder {embedder.name}); total {done.total_seconds:.1f}s"
            )
            return 0
        finally:
            await backend.close()
    finally:
        await pool.close()


# ---- check --------------------------------------------------------------------------------


def _report(drift: Drift, settings: IndexToolSettings, users: int) -> None:
    _say(f"checked {_where(settings)} collection {settings.qdrant_collection!r}")
    _say(f"  {drift.memories:,} memories in PostgreSQL, {drift.points:,} points in Qdrant ({drift.seconds:.1f}s)")
    per_user = drift.by_user()
    if per_user:
        width = max(len("user"), *(len(u) for u in list(per_user)[:users]))
        _say(f"  {'user':<{width}}  {'missing':>7}  {'stale':>7}  {'orphaned':>8}")
        for user, counts in list(per_user.items())[:users]:
            _say(f"  {user:<{width}}  {counts['missing']:>7}  {counts['stale']:>7}  {counts['orphaned']:>8}")
        if len(per_user) > users:
            _say(f"  ... and {len(per_user) - users} more user(s) (--users N or --json to see all)")
    if drift.pending:
        _say(f"  {drift.pending} difference(s) still have a change in the outbox: lag, not drift")
    summary = ", ".join(f"{len(getattr(drift, k))} {k}" for k in KINDS)
    if drift.total:
        _say(
            f"DRIFT: {summary} in {len(per_user)} user(s). Run `memwright index rebuild` to rebuild the "
            "collection from PostgreSQL (or `memwright index check --repair` to fix only these points)."
        )
    else:
        _say(f"in sync: {summary}")


async def _check(settings: IndexToolSettings, args: argparse.Namespace) -> int:
    embedder = await make_embedder(settings)
    pool = await create_pool(settings.pg_dsn, 1, 2)
    try:
        backend = open_backend(settings)
        try:
            alias = settings.qdrant_collection
            if await backend.alias_target(alias) is None:
                count = int(await pool.fetchval("SELECT count(*) FROM memories"))
                _say(f"Qdrant has no collection {alias!r} ({_where(settings)}); {count} memories in PostgreSQL")
                if count:
                    _say("DRIFT: every memory is missing. Run `memwright index rebuild`.")
                return 1 if count else 0
            index = VectorIndex(backend, alias, embedder)
            drift = await find_drift(pool, index, settle=args.settle)
            if args.repair and drift.total:
                outcome = await converge(pool, index, drift.ids(), trust_versions=False)
                _say(
                    f"repaired {sum(1 for a in outcome.values() if a in ('upsert', 'delete'))} point(s); checking again"
                )
                drift = await find_drift(pool, index, settle=args.settle)
            depth, age = await outbox_stats(pool)
        finally:
            await backend.close()
    finally:
        await pool.close()
    drift.publish()
    if args.metrics_file:
        write_to_textfile(str(args.metrics_file), REGISTRY)
    if args.json:
        _say(json.dumps({**drift.as_dict(), "outbox_depth": depth, "outbox_oldest_seconds": age}, indent=2))
    else:
        _report(drift, settings, args.users)
        if depth:
            _say(f"  outbox: {depth} change(s) not yet relayed, oldest {age:.0f}s")
    return 1 if drift.total else 0


def main(command: str, argv: list[str]) -> int:
    args = _parser(command).parse_args(argv)
    try:
        settings = _settings(args.demo)
        return asyncio.run(_rebuild(settings, args) if command == "rebuild" else _check(settings, args))
    except QdrantUnavailable as exc:
        _say(f"memwright index {command}: {exc}", err=True)
        return 2
    except asyncpg.InvalidCatalogNameError as exc:
        _say(f"memwright index {command}: {exc}; check MEMWRIGHT_PG_DSN (with --demo, run `make demo` first)", err=True)
        return 2
    except asyncpg.UndefinedTableError as exc:
        _say(f"memwright index {command}: {exc}; the schema is missing, run `memwright migrate`", err=True)
        return 2
    except (OSError, ResponseHandlingException) as exc:
        _say(f"memwright index {command}: cannot reach PostgreSQL or Qdrant ({exc}); is the stack running?", err=True)
        return 2
