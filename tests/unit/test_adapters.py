"""The adapters' shared parts without services: what counts as memwright being down (go on) versus
a refusal (raise); the hooks' configuration errors, each naming its variable; what a hook reads
from stdin; and the memory-change event of each kind of audit row (schema-valid, content-free
once erased)."""

from __future__ import annotations

import io
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from memwright.adapters import is_outage, message_id
from memwright.adapters.hooks import HookConfig, HookConfigError, read_input, run
from memwright.auth import mint
from memwright.changes import change_schema, from_audit
from memwright.client import MemwrightError
from memwright.settings import AuthSettings

SECRET = "s" * 32
VALIDATOR = Draft202012Validator(change_schema(), format_checker=Draft202012Validator.FORMAT_CHECKER)


def token(subject: str) -> str:
    return mint(AuthSettings(jwt_secret=SECRET), subject, ["memories:read", "signals:write"])


@pytest.mark.parametrize(
    ("status", "outage"),
    [(None, True), (429, True), (500, True), (503, True), (400, False), (401, False), (403, False)],
)
def test_only_an_unreachable_or_overloaded_service_is_an_outage(status: int | None, outage: bool) -> None:
    assert is_outage(MemwrightError(status, "x")) is outage


def test_message_ids_are_stable_and_tell_turns_apart() -> None:
    assert message_id("alice", "s1", 0, "hi") == message_id("alice", "s1", 0, "hi")
    assert (
        len({message_id("alice", "s1", 0, "hi"), message_id("alice", "s1", 1, "hi"), message_id("bob", "s1", 0, "hi")})
        == 3
    )


def test_the_user_is_the_tokens_subject_unless_given() -> None:
    env = {"MEMWRIGHT_TOKEN": token("alice"), "MEMWRIGHT_API_URL": "http://api"}
    assert HookConfig.from_env(env, need_api=True, need_ingest=False).user_id == "alice"
    service = {**env, "MEMWRIGHT_TOKEN": token("service:chat")}
    with pytest.raises(HookConfigError, match=r"service token .*set MEMWRIGHT_USER_ID"):
        HookConfig.from_env(service, need_api=True, need_ingest=False)
    assert HookConfig.from_env({**service, "MEMWRIGHT_USER_ID": "bob"}, True, False).user_id == "bob"


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"MEMWRIGHT_TOKEN": ""}, "MEMWRIGHT_TOKEN is not set"),
        ({"MEMWRIGHT_TOKEN": "not-a-jwt"}, "MEMWRIGHT_TOKEN is not a JWT"),
        ({"MEMWRIGHT_INGEST_URL": ""}, "MEMWRIGHT_INGEST_URL is not set"),
        ({"MEMWRIGHT_INGEST_URL": "localhost:8081"}, "MEMWRIGHT_INGEST_URL='localhost:8081' is not an http"),
        ({"MEMWRIGHT_HOOK_TIMEOUT_S": "soon"}, "MEMWRIGHT_HOOK_TIMEOUT_S='soon' must be a number"),
        ({"MEMWRIGHT_HOOK_TIMEOUT_S": "0"}, "MEMWRIGHT_HOOK_TIMEOUT_S='0' must be a number"),
    ],
)
def test_a_configuration_mistake_exits_1_naming_the_variable(change: dict[str, str], named: str) -> None:
    env = {"MEMWRIGHT_TOKEN": token("alice"), "MEMWRIGHT_INGEST_URL": "http://ingest", **change}
    err = io.StringIO()
    code = run("user-prompt", env=env, stdin=io.StringIO('{"prompt": "hi"}'), stdout=io.StringIO(), stderr=err)
    assert code == 1 and named in err.getvalue()


@pytest.mark.parametrize("url", ["http://", "http://[::1"])
def test_a_url_aiohttp_cannot_use_exits_1_never_2_which_would_block_the_prompt(url: str) -> None:
    env = {"MEMWRIGHT_TOKEN": token("alice"), "MEMWRIGHT_INGEST_URL": url}
    err = io.StringIO()
    code = run("user-prompt", env=env, stdin=io.StringIO('{"prompt": "hi"}'), stdout=io.StringIO(), stderr=err)
    assert code == 1 and "going on without memory" in err.getvalue()


def test_the_hook_configuration_never_shows_the_token() -> None:
    secret = token("alice")
    config = HookConfig.from_env({"MEMWRIGHT_TOKEN": secret, "MEMWRIGHT_API_URL": "http://api"}, True, False)
    assert secret not in repr(config)


def test_a_hook_reads_claude_codes_json_or_plain_text() -> None:
    assert read_input(io.StringIO('{"prompt": "hi", "session_id": "s"}')) == {"prompt": "hi", "session_id": "s"}
    assert read_input(io.StringIO("just text")) == {"prompt": "just text"}
    assert read_input(io.StringIO('["a list"]')) == {"prompt": '["a list"]'}


def audit_row(**row: Any) -> dict[str, Any]:
    base = {
        "audit_id": 7,
        "memory_id": uuid.UUID(int=1),
        "user_id": "alice",
        "action": "create",
        "actor": "agent",
        "run_id": uuid.UUID(int=2),
        "before": None,
        "after": {"text": "Always answer in metric units.", "version": 1, "author": "agent", "kind": "preference"},
        "evidence": ["m1"],
        "reason": "new evidence",
        "at": datetime(2026, 12, 3, 16, 0, tzinfo=UTC),
        "erased_at": None,
    }
    return {**base, **row}


def test_each_audit_row_becomes_one_valid_event_of_its_kind() -> None:
    old = {"text": "Use metric.", "version": 1, "author": "agent", "kind": "preference"}
    new = {**old, "text": "Use metric units.", "version": 2}
    rows = {
        "created": audit_row(),
        "graduated": audit_row(
            before={
                "hypothesis": {
                    "id": "h-1",
                    "statement": "x",
                    "count": 2,
                    "conversations": ["a", "b"],
                    "message_ids": ["m1", "m2"],
                }
            }
        ),
        "updated": audit_row(action="update", before=old, after=new),
        "deleted": audit_row(action="delete", before=new, after=None, evidence=[]),
        "consolidated": audit_row(action="consolidate", before={"replaces": [str(uuid.UUID(int=3))]}),
        "erased": audit_row(
            action="erase",
            actor="user",
            run_id=None,
            before=None,
            after=None,
            evidence=[],
            reason="",
            erased_at=datetime(2026, 12, 4, tzinfo=UTC),
        ),
    }
    events = {name: from_audit(row) for name, row in rows.items()}
    for event in events.values():
        VALIDATOR.validate(event.data)
        assert event.record()[0] == b"alice" and event.id == event.data["id"] == "audit-7"
    assert {name: e.type for name, e in events.items()} == {
        "created": "created",
        "graduated": "graduated",
        "updated": "updated",
        "deleted": "deleted",
        "consolidated": "created",
        "erased": "deleted",
    }
    assert events["graduated"].data["hypothesis"]["count"] == 2 and events["created"].data["hypothesis"] is None
    assert (events["updated"].data["previous_text"], events["updated"].data["text"]) == (
        "Use metric.",
        "Use metric units.",
    )
    assert events["deleted"].data["text"] is None and events["deleted"].data["version"] == 2
    assert events["consolidated"].data["replaces"] == [str(uuid.UUID(int=3))]
    erased = events["erased"].data
    assert erased["erased"] and erased["author"] is None and erased["text"] is erased["previous_text"] is None


async def test_the_session_tells_repeated_turns_apart_past_the_history_limit() -> None:
    from agents import SQLiteSession
    from agents.memory.session_settings import SessionSettings
    from memwright.adapters.openai_agents import MemwrightSession

    class Ingest:
        def __init__(self) -> None:
            self.ids: list[str] = []

        async def send(self, user_id: str, message_id: str, *args: Any, **kwargs: Any) -> None:
            self.ids.append(message_id)

    ingest = Ingest()
    history = SQLiteSession("s1", session_settings=SessionSettings(limit=2))
    session = MemwrightSession("s1", ingest, "alice", history=history)  # type: ignore[arg-type]
    for _ in range(4):
        await session.add_items([{"role": "user", "content": "yes"}])
    assert len(set(ingest.ids)) == 4  # the same words in four turns are four messages
