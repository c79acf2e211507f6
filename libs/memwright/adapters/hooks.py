"""Harness hooks: `memwright hook session-start` and `memwright hook user-prompt`.

For tools that run a command at the start of a session and on every prompt (Claude Code's
SessionStart and UserPromptSubmit hooks; any harness that can pipe the prompt to a command):

- `session-start` prints the user's start-of-turn block to stdout (Claude Code adds a hook's stdout
  to the model's context on exit 0).
- `user-prompt` reads the prompt from stdin (Claude Code's JSON with a `prompt` field, or plain
  text) and sends it to ingest as one signal; it prints nothing, or with `--context` the fresh
  block as well (for harnesses with no session-start hook, or to refresh the block every turn).

Configured from the environment: MEMWRIGHT_TOKEN (the user's token), MEMWRIGHT_API_URL (the
block), MEMWRIGHT_INGEST_URL (the prompt), MEMWRIGHT_USER_ID (default: the token's subject; needed
with a service token), MEMWRIGHT_CONVERSATION_ID (default: the harness's session id),
MEMWRIGHT_PROJECT_ID, MEMWRIGHT_HOOK_TIMEOUT_S (default 3: a hook holds up the user's prompt).

Exit codes. 0: done, or memwright could not be reached (down, overloaded, timed out): a note goes
to stderr and the harness carries on without memory, because a memory service that is down must
not stop anyone typing. 1: a configuration mistake (a variable missing or malformed, the token
refused, the request refused): the message names what to fix; Claude Code shows it and still runs
the prompt. Never 2, which Claude Code reads as "block this prompt". A URL that points at nothing
looks like a service that is down: the note names the URL it tried.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

import jwt

from memwright.adapters import is_outage
from memwright.client import MemwrightClient, MemwrightError
from memwright.settings import PREFIX

OK, CONFIG_ERROR = 0, 1


class HookConfigError(Exception):
    """A variable is missing or malformed; the message names it."""


@dataclass(frozen=True)
class HookConfig:
    token: str = field(repr=False)  # never printed
    user_id: str
    api_url: str | None
    ingest_url: str | None
    conversation_id: str | None
    project_id: str | None
    timeout_s: float

    @classmethod
    def from_env(cls, env: Mapping[str, str], need_api: bool, need_ingest: bool) -> HookConfig:
        def get(name: str) -> str | None:
            return env.get(PREFIX + name) or None

        token = get("TOKEN")
        if token is None:
            raise HookConfigError(f"{PREFIX}TOKEN is not set; export the user's token (memwright token <user-id>)")
        user_id = get("USER_ID") or _subject(token)
        urls = {"API_URL": get("API_URL"), "INGEST_URL": get("INGEST_URL")}
        for name, needed in (("API_URL", need_api), ("INGEST_URL", need_ingest)):
            url = urls[name]
            if url is None and needed:
                example = "http://localhost:8082" if name == "API_URL" else "http://localhost:8081"
                raise HookConfigError(f"{PREFIX}{name} is not set; export it (e.g. {example})")
            if url is not None and not url.startswith(("http://", "https://")):
                raise HookConfigError(f"{PREFIX}{name}={url!r} is not an http(s) URL")
        raw_timeout = get("HOOK_TIMEOUT_S") or "3"
        try:
            timeout_s = float(raw_timeout)
        except ValueError:
            timeout_s = 0.0
        if not timeout_s > 0:
            raise HookConfigError(f"{PREFIX}HOOK_TIMEOUT_S={raw_timeout!r} must be a number of seconds above 0")
        return cls(
            token, user_id, urls["API_URL"], urls["INGEST_URL"], get("CONVERSATION_ID"), get("PROJECT_ID"), timeout_s
        )

    def client(self) -> MemwrightClient:
        # one quick retry: a hook holds up the user's prompt, and memory can wait for the next one
        return MemwrightClient(
            self.api_url or "", self.token, self.ingest_url, timeout_s=self.timeout_s, retries=1, max_retry_after_s=1.0
        )


def _subject(token: str) -> str:
    """The user a user token is for (its `sub`; read, not verified: the services verify it)."""
    try:
        subject = jwt.decode(token, options={"verify_signature": False}).get("sub")
    except jwt.PyJWTError:
        raise HookConfigError(f"{PREFIX}TOKEN is not a JWT; mint one with `memwright token <user-id>`") from None
    if not isinstance(subject, str) or not subject:
        raise HookConfigError(f"{PREFIX}TOKEN has no subject; set {PREFIX}USER_ID to the user's id")
    if subject.startswith("service:"):
        raise HookConfigError(f"{PREFIX}TOKEN is a service token ({subject}); set {PREFIX}USER_ID to the user's id")
    return subject


def read_input(stdin: TextIO) -> dict[str, Any]:
    """What the harness passed: Claude Code's JSON object, or plain text taken as the prompt."""
    raw = "" if stdin.isatty() else stdin.read()
    try:
        payload = json.loads(raw)
    except ValueError:
        return {"prompt": raw}
    return payload if isinstance(payload, dict) else {"prompt": raw}


async def _block(client: MemwrightClient, config: HookConfig) -> str:
    return (await client.context(config.user_id)).block


async def _send(client: MemwrightClient, config: HookConfig, payload: Mapping[str, Any]) -> None:
    prompt = str(payload.get("prompt") or "").strip()
    if not prompt:
        return  # nothing the user typed: nothing to remember
    conversation = config.conversation_id or str(payload.get("session_id") or "") or "default"
    # Claude Code names each prompt (prompt_id): a hook run twice for one prompt sends one signal
    message_id = str(payload.get("prompt_id") or uuid.uuid4())
    await client.send(config.user_id, message_id, conversation, prompt, project_id=config.project_id)


async def _hook(event: str, config: HookConfig, payload: Mapping[str, Any], print_block: bool, out: TextIO) -> None:
    async with config.client() as client:
        if event == "user-prompt":
            await _send(client, config, payload)
        if print_block:
            print(await _block(client, config), file=out)


def run(
    event: str,
    with_context: bool = False,
    env: Mapping[str, str] | None = None,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run one hook (`session-start` or `user-prompt`); return its exit code."""
    env = os.environ if env is None else env
    stdin, stdout, stderr = stdin or sys.stdin, stdout or sys.stdout, stderr or sys.stderr
    start = event == "session-start"
    try:
        config = HookConfig.from_env(env, need_api=start or with_context, need_ingest=not start)
    except HookConfigError as exc:
        print(f"memwright hook {event}: {exc}", file=stderr)
        return CONFIG_ERROR
    try:
        asyncio.run(_hook(event, config, read_input(stdin), start or with_context, stdout))
    except MemwrightError as exc:
        if not is_outage(exc):
            print(f"memwright hook {event}: refused: {exc} (check {PREFIX}TOKEN and {PREFIX}USER_ID)", file=stderr)
            return CONFIG_ERROR
        print(f"memwright hook {event}: memwright is unreachable, going on without memory: {exc}", file=stderr)
    except Exception as exc:  # never exit 2 (the harness would block the prompt): an unusable URL, a bad answer
        print(f"memwright hook {event}: failed, going on without memory: {exc!r}", file=stderr)
        return CONFIG_ERROR
    return OK
