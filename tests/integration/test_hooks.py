"""`memwright hook session-start | user-prompt`, run as Claude Code runs them (the commands of
examples/claude_code/settings.json, its JSON on stdin) against the real services: ingest producing
to the real Kafka, the api on the real PostgreSQL. The block goes to stdout, the prompt to ingest
(found afterwards by the message status route); a configuration mistake exits 1 naming the
variable; memwright down exits 0 with a note, so the user's prompt is never held up."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest
from memwright.client import MemwrightClient

from tests.integration.conftest import TurnServices
from tests.integration.test_api_memories import agent_memory

SETTINGS_JSON = Path(__file__).parents[2] / "examples" / "claude_code" / "settings.json"
BIN = str(Path(sys.executable).parent)


@dataclass(frozen=True)
class Ran:
    code: int
    stdout: str
    stderr: str


def command(event: str) -> str:
    """The command examples/claude_code/settings.json gives Claude Code for `event`."""
    [entry] = json.loads(SETTINGS_JSON.read_text())["hooks"][event]
    [hook] = entry["hooks"]
    assert hook["type"] == "command"
    return str(hook["command"])


async def run_hook(cmd: str, env: dict[str, str], payload: object) -> Ran:
    """Run a hook command in a shell, as Claude Code does: JSON on stdin, memwright on the PATH."""
    memwright_env = {k: v for k, v in os.environ.items() if not k.startswith("MEMWRIGHT_")}
    proc = await asyncio.create_subprocess_shell(
        cmd,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**memwright_env, "PATH": f"{BIN}:{os.environ['PATH']}", **env},
    )
    out, err = await proc.communicate(json.dumps(payload).encode())
    assert proc.returncode is not None
    return Ran(proc.returncode, out.decode(), err.decode())


def hook_env(services: TurnServices, user: str = "alice") -> dict[str, str]:
    return {
        "MEMWRIGHT_API_URL": services.api_url,
        "MEMWRIGHT_INGEST_URL": services.ingest_url,
        "MEMWRIGHT_TOKEN": services.token(user),
    }


START = {"session_id": "sess-1", "hook_event_name": "SessionStart", "source": "startup", "cwd": "/tmp"}


def prompt(text: str, prompt_id: str = "prompt-1") -> dict[str, str]:
    return {"session_id": "sess-1", "prompt_id": prompt_id, "hook_event_name": "UserPromptSubmit", "prompt": text}


async def test_session_start_prints_the_users_block(turn_services: TurnServices, db: asyncpg.Pool) -> None:
    memory_id, _ = await agent_memory(db, "alice")
    ran = await run_hook(command("SessionStart"), hook_env(turn_services), START)
    assert ran.code == 0, ran.stderr
    assert ran.stdout.startswith('<user_memories user="alice" count="1">') and memory_id in ran.stdout


async def test_user_prompt_sends_the_prompt_to_ingest_and_prints_nothing(turn_services: TurnServices) -> None:
    ran = await run_hook(command("UserPromptSubmit"), hook_env(turn_services), prompt("Always answer in metric units"))
    assert (ran.code, ran.stdout, ran.stderr) == (0, "", "")
    [signal] = await turn_services.sweep(1)
    assert (signal.user_id, signal.conversation_id, signal.message_id) == ("alice", "sess-1", "prompt-1")
    assert signal.text == "Always answer in metric units"
    async with MemwrightClient(turn_services.api_url, turn_services.token()) as client:
        assert (await client.message_status("alice", "prompt-1")).stage == "swept"


async def test_user_prompt_with_context_also_prints_the_block_and_takes_plain_text(
    turn_services: TurnServices, db: asyncpg.Pool
) -> None:
    memory_id, _ = await agent_memory(db, "alice")
    ran = await run_hook("memwright hook user-prompt --context", hook_env(turn_services), "plain text, not JSON")
    assert ran.code == 0 and memory_id in ran.stdout
    [signal] = await turn_services.sweep(1)
    assert (signal.text, signal.conversation_id) == ('"plain text, not JSON"', "default")


@pytest.mark.parametrize(
    ("event", "drop", "named"),
    [
        ("SessionStart", "MEMWRIGHT_TOKEN", "MEMWRIGHT_TOKEN is not set"),
        ("SessionStart", "MEMWRIGHT_API_URL", "MEMWRIGHT_API_URL is not set"),
        ("UserPromptSubmit", "MEMWRIGHT_INGEST_URL", "MEMWRIGHT_INGEST_URL is not set"),
    ],
)
async def test_a_missing_variable_exits_1_and_names_it(
    turn_services: TurnServices, event: str, drop: str, named: str
) -> None:
    env = {k: v for k, v in hook_env(turn_services).items() if k != drop}
    ran = await run_hook(command(event), env, START if event == "SessionStart" else prompt("hi"))
    assert ran.code == 1 and named in ran.stderr and ran.stdout == ""


async def test_a_token_for_another_user_exits_1_with_the_servers_reason(turn_services: TurnServices) -> None:
    env = {**hook_env(turn_services, user="mallory"), "MEMWRIGHT_USER_ID": "alice"}
    ran = await run_hook(command("SessionStart"), env, START)
    assert ran.code == 1 and "403" in ran.stderr and ran.stdout == ""
    garbled = await run_hook(command("SessionStart"), {**hook_env(turn_services), "MEMWRIGHT_TOKEN": "x"}, START)
    assert garbled.code == 1 and "MEMWRIGHT_TOKEN is not a JWT" in garbled.stderr


async def test_memwright_down_exits_0_with_a_note_and_holds_nothing_up(turn_services: TurnServices) -> None:
    down = {
        **hook_env(turn_services),
        "MEMWRIGHT_API_URL": "http://127.0.0.1:9",
        "MEMWRIGHT_INGEST_URL": "http://127.0.0.1:9",
    }
    for event, payload in (("SessionStart", START), ("UserPromptSubmit", prompt("hi"))):
        ran = await run_hook(command(event), down, payload)
        assert ran.code == 0 and ran.stdout == ""
        assert "unreachable, going on without memory" in ran.stderr and "127.0.0.1:9" in ran.stderr
