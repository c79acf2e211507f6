"""`memwright index check` and `memwright index rebuild` as an operator runs them: drift reported
per user with exit 1, rebuilt and repaired to exit 0, and a plain message (exit 2) when a running
indexer holds the embedded store. What the commands do on each backend is proven by
test_index_contract.py."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import asyncpg
from memwright.index.edge import EdgeBackend

from tests.conftest import ROOT
from tests.integration.helpers import as_user
from tests.integration.helpers import seed_memories as seed

# ---- the commands, as an operator runs them -----------------------------------------------


def memwright(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memwright", *args],
        env={**os.environ, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_index_commands_report_drift_exit_1_and_rebuild_to_exit_0(
    db: asyncpg.Pool, pg_dsn: str, tmp_path: Path
) -> None:
    env = {
        "MEMWRIGHT_PG_DSN": pg_dsn,
        "MEMWRIGHT_QDRANT_PATH": str(tmp_path / "qdrant"),
        "MEMWRIGHT_QDRANT_URL": "",
        "MEMWRIGHT_LOG_JSON": "0",
    }
    ids = await seed(db, {"ana": 30, "ben": 30})

    nothing = await asyncio.to_thread(memwright, "index", "check", env=env)
    assert nothing.returncode == 1 and "no collection 'memories'" in nothing.stdout, nothing.stdout + nothing.stderr

    built = await asyncio.to_thread(memwright, "index", "rebuild", env=env)
    assert built.returncode == 0, built.stdout + built.stderr
    assert "60/60 memories (100%)" in built.stdout
    assert "rebuilt 60 memories in" in built.stdout and "memories/s, embedder hashing" in built.stdout

    clean = await asyncio.to_thread(memwright, "index", "check", env=env)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "in sync: 0 missing, 0 stale, 0 orphaned" in clean.stdout

    await as_user(db, "DELETE FROM memories WHERE memory_id = $1", uuid.UUID(ids["ben"][0]))
    await as_user(db, "UPDATE memories SET version = 2 WHERE memory_id = $1", uuid.UUID(ids["ana"][0]))
    drifted = await asyncio.to_thread(memwright, "index", "check", "--settle", "0", env=env)
    assert drifted.returncode == 1, drifted.stdout + drifted.stderr
    assert "DRIFT: 0 missing, 1 stale, 1 orphaned in 2 user(s)" in drifted.stdout
    lines = drifted.stdout.splitlines()
    assert any(line.split() == ["ana", "0", "1", "0"] for line in lines), drifted.stdout
    assert any(line.split() == ["ben", "0", "0", "1"] for line in lines), drifted.stdout

    as_json = await asyncio.to_thread(memwright, "index", "check", "--settle", "0", "--json", env=env)
    report = json.loads(as_json.stdout)
    assert report["ids"]["orphaned"] == [ids["ben"][0]] and report["users"]["ana"] == {"stale": 1}

    metrics_file = tmp_path / "drift.prom"
    repaired = await asyncio.to_thread(
        memwright, "index", "check", "--settle", "0", "--repair", "--metrics-file", str(metrics_file), env=env
    )
    assert repaired.returncode == 0 and "repaired 2 point(s)" in repaired.stdout, repaired.stdout
    assert 'memwright_indexer_drift_points{kind="stale"} 0.0' in metrics_file.read_text()


async def test_commands_say_plainly_that_a_running_indexer_holds_the_embedded_store(
    pg_dsn: str, tmp_path: Path
) -> None:
    path = tmp_path / "qdrant"
    held = EdgeBackend.open(path)  # as a running indexer would
    try:
        env = {"MEMWRIGHT_PG_DSN": pg_dsn, "MEMWRIGHT_QDRANT_PATH": str(path), "MEMWRIGHT_QDRANT_URL": ""}
        done = await asyncio.to_thread(memwright, "index", "rebuild", env=env)
    finally:
        await held.close()
    assert done.returncode == 2
    assert "is open in another process" in done.stderr and "Stop the indexer" in done.stderr, done.stderr
    assert f"pid {os.getpid()}" in done.stderr, done.stderr
    # once the holder let go, the command runs
    again = await asyncio.to_thread(memwright, "index", "rebuild", env=env)
    assert again.returncode == 0, again.stdout + again.stderr
