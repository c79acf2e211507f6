"""`memwright demo` forms exactly the memories the demo stream promises (demo/expected.json)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from tests.conftest import ROOT


def test_the_demo_forms_the_expected_memories_with_receipts(stack: dict[str, str], tmp_path) -> None:
    env = {**os.environ, **stack, "MEMWRIGHT_LOCAL_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "memwright", "demo", "--window", "1"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "because ana-1 in ana-trip" in done.stdout
    assert "UNEXPECTED" not in done.stdout


def test_index_check_demo_pairs_the_demo_database_with_its_own_store(stack: dict[str, str], tmp_path) -> None:
    """The demo database says which Qdrant store is its own: an older demo's store in another
    local folder (here: an empty one, as after `make demo` long ago) is never compared with it."""
    env = {**os.environ, **stack, "MEMWRIGHT_LOCAL_DIR": str(tmp_path / "this")}
    demo = subprocess.run(
        [sys.executable, "-m", "memwright", "demo", "--window", "1"], env=env, cwd=ROOT, capture_output=True, text=True,
        timeout=240,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    older = tmp_path / "older"
    (older / "demo" / "qdrant-1").mkdir(parents=True)

    def check(local: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "memwright", "index", "check", "--demo"],
            env={**env, "MEMWRIGHT_LOCAL_DIR": local}, cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    done = check(str(older))
    assert done.returncode == 0, f"drift that is not there:\n{done.stdout}\n{done.stderr}"
    assert str(tmp_path / "this") in done.stdout + done.stderr, "the check should name the store it used"

    shutil.rmtree(tmp_path / "this" / "demo")  # the store is gone (a test's temporary folder, removed)
    done = check(str(older))
    assert done.returncode == 2 and "is gone" in done.stderr and "make demo" in done.stderr, done.stderr
