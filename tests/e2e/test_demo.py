"""`memwright demo` forms exactly the memories the demo stream promises (demo/expected.json)."""

from __future__ import annotations

import os
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
