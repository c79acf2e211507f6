"""The status of a message on the real PostgreSQL (the api in-process): not swept yet (404 that says
it may be on its way), swept and waiting, then what came of it: remembered (with the memory's
link), held in a hypothesis, a one-off, part of a memory the user deleted, refusals of the run
that read it; and only the user's own token reaches it."""

from __future__ import annotations

from dataclasses import replace

import asyncpg
from memwright.store.sweeps import write_window

from tests.integration.helpers import sig, sweep
from tests.integration.test_api_memories import Api, agent_memory, curate


def status_path(message_id: str, user: str = "alice") -> str:
    return f"/v1/users/{user}/messages/{message_id}"


async def test_a_message_not_swept_yet_is_a_404_that_says_it_may_be_on_its_way(api: Api, db: asyncpg.Pool) -> None:
    answer = await api.call("GET", status_path("alice-never"), expect=404)
    assert "on its way" in answer["error"] and "never sent" in answer["error"]
    await api.call("GET", status_path("bad id with spaces"), expect=400)
    await db.execute("INSERT INTO user_erasures (user_id, requested_by) VALUES ('alice', 'alice')")
    answer = await api.call("GET", status_path("alice-never"), expect=404)
    assert "on its way" in answer["error"] and "erased at" in answer["error"]


async def test_a_swept_message_waits_for_the_agent_then_an_explicit_preference_is_remembered_with_its_link(
    api: Api, db: asyncpg.Pool
) -> None:
    [message_id] = await sweep(db, "alice", "Always answer in metric units")
    waiting = await api.call("GET", status_path(message_id))
    assert (waiting["stage"], waiting["outcome"], waiting["curated"]) == ("swept", "pending", None)
    assert waiting["waiting_since"] is not None and waiting["conversation_id"] == "c1"
    await curate(db)
    done = await api.call("GET", status_path(message_id))
    assert (done["stage"], done["outcome"]) == ("curated", "remembered")
    assert done["curated"]["run_id"] and done["curated"]["policy"] == "rules"
    [memory] = done["memories"]
    assert memory["state"] == "current" and "metric" in memory["preview"]
    detail = await api.call("GET", memory["link"])  # the link is the memory with its receipts
    assert [r["message_id"] for r in detail["receipts"]] == [message_id]
    assert memory["memory_id"] in done["summary"]


async def test_a_weak_signal_is_held_in_a_hypothesis_with_its_counts(api: Api, db: asyncpg.Pool) -> None:
    [message_id] = await sweep(db, "alice", "I'm a vegetarian, so which restaurants would work?", conv="trip")
    await curate(db)
    status = await api.call("GET", status_path(message_id))
    assert status["outcome"] == "held" and status["memories"] == []
    [held] = status["hypotheses"]
    assert "vegetarian" in held["statement"].lower()
    assert (held["count"], held["conversations"], held["conversation_ids"]) == (1, 1, ["trip"])
    assert "seen 1 time(s) in 1 conversation(s)" in status["summary"]


async def test_a_one_off_is_not_remembered_and_says_so(api: Api, db: asyncpg.Pool) -> None:
    [message_id] = await sweep(db, "alice", "What time is it in Lisbon right now?")
    await curate(db)
    status = await api.call("GET", status_path(message_id))
    assert (status["stage"], status["outcome"]) == ("curated", "not_remembered")
    assert status["memories"] == [] and status["hypotheses"] == [] and status["refusals"] == []
    assert "one-off" in status["summary"] and len(status["notes"]) == 1


async def test_a_message_behind_a_memory_the_user_deleted_says_so(api: Api, db: asyncpg.Pool) -> None:
    memory_id, message_id = await agent_memory(db, "alice")
    await api.call("DELETE", f"/v1/users/alice/memories/{memory_id}?reason=not%20true")
    status = await api.call("GET", status_path(message_id))
    assert status["outcome"] == "deleted"
    [memory] = status["memories"]
    assert (memory["memory_id"], memory["state"], memory["link"]) == (memory_id, "deleted_by_user", None)
    assert memory["reason"] == "not true" and memory["deleted_at"] and "metric" in memory["preview"]
    assert memory["history"] == f"/v1/users/alice/memories/{memory_id}/history"


async def test_a_secret_is_refused_by_the_guard_with_its_reason_and_the_secret_is_not_echoed(
    api: Api, db: asyncpg.Pool
) -> None:
    [message_id] = await sweep(db, "alice", "Always remember that my bank password is hunter2.")
    await curate(db)
    status = await api.call("GET", status_path(message_id))
    assert (status["stage"], status["outcome"], status["memories"]) == ("curated", "refused", [])
    [reason] = status["refusals"]
    assert "password" in reason and "hunter2" not in reason
    assert "refusals per run, not per message" in status["notes"][0]


async def test_a_refusal_of_the_run_is_shown_and_attributed_only_when_it_names_the_message(
    api: Api, db: asyncpg.Pool
) -> None:
    [message_id] = await sweep(db, "alice", "What time is it in Lisbon right now?")
    await curate(db)
    # the run's transcript entry as a refusal leaves it: the tool result, not the message it was about
    await db.execute(
        """UPDATE agent_state SET transcript = jsonb_build_array(jsonb_build_object(
               'run_id', 'r1', 'messages', jsonb_build_array($2::text),
               'results', jsonb_build_array('Refused: You are out of room: 40 of 40 memories are used.')))
           WHERE user_id = $1""",
        "alice",
        message_id,
    )
    status = await api.call("GET", status_path(message_id))
    assert status["outcome"] == "not_remembered" and status["refusals"] == []
    assert status["run_refusals"] == ["You are out of room: 40 of 40 memories are used."]
    assert "recorded per run, not per message" in status["notes"][0]
    # a refusal that names the message (the deleted-memory check does) is the message's own
    await db.execute(
        """UPDATE agent_state SET transcript = jsonb_build_array(jsonb_build_object(
               'run_id', 'r2', 'messages', jsonb_build_array($2::text),
               'results', jsonb_build_array('Refused: Messages ' || $2 || ' were the evidence of a deleted memory.')))
           WHERE user_id = $1""",
        "alice",
        message_id,
    )
    status = await api.call("GET", status_path(message_id))
    assert status["outcome"] == "refused" and len(status["refusals"]) == 1 and status["run_refusals"] == []


async def test_an_assistant_message_is_never_evidence(api: Api, db: asyncpg.Pool) -> None:
    signal = replace(sig("alice", "alice-a1", "Always answer in metric units"), role="assistant")
    async with db.acquire() as conn:
        await write_window(conn, "alice", [signal])
    await curate(db)
    status = await api.call("GET", status_path("alice-a1"))
    assert (status["role"], status["outcome"]) == ("assistant", "not_remembered")
    assert "assistant" in status["summary"]


async def test_another_users_message_is_not_found_and_their_token_cannot_ask(api: Api, db: asyncpg.Pool) -> None:
    [message_id] = await sweep(db, "alice", "Always answer in metric units")
    await api.call("GET", status_path(message_id, "bob"), user="bob", expect=404)  # bob's own path: not his
    await api.call("GET", status_path(message_id), user="bob", expect=403)  # alice's path: not his token
    async with api.client.get(status_path(message_id), headers=api.auth("alice", "memories:write")) as r:
        assert r.status == 403  # memories:read is the scope


async def test_a_message_that_made_the_agent_delete_a_memory_says_so(api: Api, db: asyncpg.Pool) -> None:
    memory_id, first = await agent_memory(db, "alice")
    [asked] = await sweep(db, "alice", "Forget that I want metric units.", conv="c2")
    await curate(db)
    assert await db.fetchval("SELECT count(*) FROM memories WHERE user_id = 'alice'") == 0
    status = await api.call("GET", status_path(asked))
    assert status["outcome"] == "forgotten" and memory_id in status["summary"]
    [memory] = status["memories"]
    assert (memory["memory_id"], memory["state"], memory["asked_to_delete"]) == (memory_id, "deleted_by_agent", True)
    before = await api.call("GET", status_path(first))  # the message it was inferred from
    assert before["outcome"] == "forgotten" and before["memories"][0]["asked_to_delete"] is False
