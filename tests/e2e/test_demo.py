"""`memwright demo` forms exactly the memories the demo stream promises (demo/expected.json)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from http.cookiejar import CookieJar

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
    assert "ana's memories, and why: http://127.0.0.1:" in done.stdout and "/console/sign-in#token=" in done.stdout
    assert "make demo KEEP=1" in done.stdout


def test_the_demo_with_keep_serves_the_console_until_interrupted(stack: dict[str, str], tmp_path) -> None:
    env = {**os.environ, **stack, "MEMWRIGHT_LOCAL_DIR": str(tmp_path), "MEMWRIGHT_DEMO_KEEP": "1"}
    demo = subprocess.Popen(
        [sys.executable, "-m", "memwright", "demo", "--window", "1"],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert demo.stdout is not None
        seen, link = [], ""
        for line in demo.stdout:  # the test's timeout bounds this
            seen.append(line)
            if "memories, and why: " in line:
                link = line.split("memories, and why: ", 1)[1].strip()
            if "press Ctrl-C" in line:
                break
        assert link, "".join(seen[-40:])
        url, token = link.split("#token=")
        # what the sign-in page's script does with the link: post the fragment's token
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
        with opener.open(url, data=urllib.parse.urlencode({"token": token}).encode(), timeout=30) as page:
            assert page.url.endswith("/console/users/ana")
            text = page.read().decode()
        assert "What memwright remembers about ana" in text and "metric" in text
        demo.send_signal(signal.SIGINT)  # Ctrl-C
        assert demo.wait(timeout=60) == 0, "".join(seen[-40:]) + demo.stdout.read()
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()


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
