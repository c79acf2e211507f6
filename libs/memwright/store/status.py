"""The status of one message: where the signal is and what came of it.

A signal goes accepted (ingest -> Kafka) -> swept (a row in `messages`) -> curated (the user's
memory agent ran over it: `agents.watermark` passed its `seq`). Only the last two can be read
here: a signal still in Kafka has no row yet, so `message_status` answers None for it (the api
says "not swept yet: it may still be on its way, or was never sent").

What came of a curated message, read from one snapshot:
  remembered      evidence of a memory the user still has (its receipts link to the message)
  held            in one of the agent's hypotheses (seen n times in k conversations)
  deleted         evidence of a memory the user deleted (invariant 12: not written again from it)
  forgotten       evidence of a memory the agent deleted (contradicted, or asked to forget)
  refused         refused by a guard: a refusal of its run names the message, or the guard (invariant
                  11) refuses its text, which no policy may keep, whatever the run tried
  not_remembered  a one-off: nothing was kept

Refusals (the guard's, the budget's) are recorded per run, not per message: the run's
transcript entry in `agent_state.transcript` keeps the tool results ("Refused: ...") and the ids
of the messages the run read, and the transcript keeps the last 50 runs. A refusal whose text
names the message (the deleted-memory check does) is attributed to it; any other refusal of the
run that read the message is shown as `run_refusals`, unattributed, and the outcome stays
`not_remembered`, unless the guard, asked now, refuses the message's text (a secret, an
instruction, a claim of authority): then it is `refused` with the guard's reason.

Every statement has the user id in its WHERE clause (tenant isolation).
"""

from __future__ import annotations

import json
import re
from typing import Any

import asyncpg

from memwright.agent import guard
from memwright.store.memories import preview

OUTCOMES = ("pending", "remembered", "held", "deleted", "forgotten", "refused", "not_remembered")
MEMORY_STATES = ("current", "deleted_by_user", "deleted_by_agent", "consolidated")

# tenant isolation: the message is found by (user_id, message_id), never by its id alone
MESSAGE = """
SELECT m.message_id, m.conversation_id, m.project_id, m.role, m.text, m.seq, m.sent_at, m.accepted_at, m.swept_at,
       coalesce(a.watermark, 0) AS watermark
FROM messages m LEFT JOIN agents a ON a.user_id = m.user_id
WHERE m.user_id = $1 AND m.message_id = $2
"""

# the committed run whose watermark range covers the message's seq: the run that curated it
CURATING_RUN = """
SELECT run_id, policy, finished_at FROM curation_runs
WHERE user_id = $1 AND status = 'committed' AND watermark_from < $2 AND watermark_to >= $2
ORDER BY finished_at DESC LIMIT 1
"""

# a run of this user's agent in flight now (the message may be in it)
RUNNING = "SELECT run_id, started_at FROM curation_runs WHERE user_id = $1 AND status = 'running' LIMIT 1"

# the backlog row: since when the user's oldest uncurated signal waits (invariant 4)
WAITING = "SELECT waiting_since FROM backlog WHERE user_id = $1"

# every memory the message is a receipt of (links outlive the memory), with the memory now (or
# NULL when gone) and the memory's last audit row (who deleted it, why, and whether it cited this message)
LINKED_MEMORIES = """
SELECT e.memory_id, e.linked_at, mem.text, mem.author, mem.kind,
       last.action, last.actor, last.reason, last.at, last.before->>'text' AS before_text,
       $2 = ANY(last.evidence) AS cited_by_last
FROM memory_evidence e
LEFT JOIN memories mem ON mem.memory_id = e.memory_id AND mem.user_id = e.user_id
LEFT JOIN LATERAL (
    SELECT action, actor, reason, at, before, evidence FROM memory_audit
    WHERE memory_id = e.memory_id AND user_id = e.user_id ORDER BY audit_id DESC LIMIT 1
) last ON true
WHERE e.user_id = $1 AND e.message_id = $2
ORDER BY e.linked_at, e.memory_id
"""

# the agent's hypotheses that hold the message (working memory, invariant 8)
HYPOTHESES = """
SELECT h FROM agent_state s, jsonb_array_elements(s.hypotheses) h
WHERE s.user_id = $1 AND h->'message_ids' ? $2
"""

# the transcript entries (one per run, the last 50) of the runs that read the message
TRANSCRIPT = """
SELECT t FROM agent_state s, jsonb_array_elements(s.transcript) t
WHERE s.user_id = $1 AND t->'messages' ? $2
"""

# the user's latest erasure, to explain a message that is not there
LAST_ERASURE = "SELECT max(erased_at) FROM user_erasures WHERE user_id = $1"


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _memory_state(r: asyncpg.Record) -> str:
    if r["text"] is not None:
        return "current"
    if r["actor"] == "user":
        return "deleted_by_user"
    if (r["reason"] or "").startswith("consolidated into "):
        return "consolidated"
    return "deleted_by_agent"


def _memory(user_id: str, r: asyncpg.Record) -> dict[str, Any]:
    state = _memory_state(r)
    mid = str(r["memory_id"])
    gone = state != "current"
    text = r["before_text"] if gone else r["text"]
    entry: dict[str, Any] = {
        "memory_id": mid,
        "state": state,
        "link": None if gone else f"/v1/users/{user_id}/memories/{mid}",
        "history": f"/v1/users/{user_id}/memories/{mid}/history",
        "preview": preview(text) if text else None,
        "linked_at": r["linked_at"].isoformat(),
        "deleted_at": r["at"].isoformat() if gone and r["at"] else None,
        "reason": r["reason"] if gone else None,
        # the message is cited by the change that deleted the memory ("forget that ...")
        "asked_to_delete": bool(gone and r["cited_by_last"] and r["action"] == "delete"),
    }
    if state == "consolidated":
        successor = re.match(r"consolidated into ([0-9a-f-]{36})", r["reason"] or "")
        entry["consolidated_into"] = successor.group(1) if successor else None
    return entry


def _hypothesis(h: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": h.get("id"),
        "statement": h.get("statement"),
        "count": h.get("count", 0),
        "conversations": len(h.get("conversations", [])),
        "conversation_ids": list(h.get("conversations", [])),
        "first_seen": h.get("first_seen"),
        "last_seen": h.get("last_seen"),
    }


def _refusals(entries: list[dict[str, Any]], message_id: str) -> tuple[list[str], list[str]]:
    """(refusals naming the message, the other refusals of the runs that read it)."""
    named: list[str] = []
    others: list[str] = []
    pattern = re.compile(r"(?<![A-Za-z0-9_.:@-])" + re.escape(message_id) + r"(?![A-Za-z0-9_:@-]|\.[A-Za-z0-9])")
    for entry in entries:
        for result in entry.get("results", []):
            if isinstance(result, str) and result.startswith("Refused"):
                reason = result.removeprefix("Refused:").strip()
                (named if pattern.search(result) else others).append(reason)
    return named, others


def _outcome(memories: list[dict[str, Any]], hypotheses: list[dict[str, Any]], refused: list[str]) -> str:
    states = {m["state"] for m in memories if not m["asked_to_delete"]}
    if "current" in states:
        return "remembered"
    if hypotheses:
        return "held"
    if "deleted_by_user" in states:
        return "deleted"
    if states or any(m["asked_to_delete"] for m in memories):
        return "forgotten"
    if refused:
        return "refused"
    return "not_remembered"


def _summary(outcome: str, memories: list[dict[str, Any]], hypotheses: list[dict[str, Any]], role: str) -> str:
    current = [m["memory_id"] for m in memories if m["state"] == "current"]
    if outcome == "pending":
        return "swept into the evidence store; waiting for the user's memory agent to read it"
    if outcome == "remembered":
        return f"remembered: evidence of memory {', '.join(current)}"
    if outcome == "held":
        h = hypotheses[0]
        return (
            f'held in hypothesis {h["id"]} ("{h["statement"]}"), seen {h["count"]} time(s) in '
            f"{h['conversations']} conversation(s); remembered once it repeats, ideally across conversations"
        )
    if outcome == "deleted":
        gone = [m["memory_id"] for m in memories if m["state"] == "deleted_by_user"]
        return (
            f"part of memory {', '.join(gone)}, which the user deleted; it is not written again from this "
            "message (only a new message in a later conversation can bring it back)"
        )
    if outcome == "forgotten":
        asked = [m["memory_id"] for m in memories if m["asked_to_delete"]]
        if asked:
            return f"the agent deleted memory {', '.join(asked)} because of this message"
        gone = [m["memory_id"] for m in memories if m["state"] != "current"]
        return f"was evidence of memory {', '.join(gone)}, which the agent later deleted (see its history)"
    if outcome == "refused":
        return "not remembered: refused by a guard (see refusals for the reason)"
    if role != "user":
        return "not remembered: only the user's own messages are evidence, this one is the assistant's"
    return "not remembered: the agent read it and kept nothing (a one-off)"


async def message_status(conn: asyncpg.Connection, user_id: str, message_id: str) -> dict[str, Any] | None:
    """The message's stage and outcome, read from one snapshot; None when it was not swept."""
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        msg = await conn.fetchrow(MESSAGE, user_id, message_id)
        if msg is None:
            return None
        curated = msg["seq"] <= msg["watermark"]
        status: dict[str, Any] = {
            "user_id": user_id,
            "message_id": message_id,
            "conversation_id": msg["conversation_id"],
            "project_id": msg["project_id"],
            "role": msg["role"],
            "stage": "curated" if curated else "swept",
            "outcome": "pending",
            "summary": _summary("pending", [], [], msg["role"]),
            "accepted_at": msg["accepted_at"].isoformat(),
            "swept_at": msg["swept_at"].isoformat(),
            "curated": None,
            "memories": [],
            "hypotheses": [],
            "refusals": [],
            "run_refusals": [],
            "notes": [],
        }
        if not curated:
            running = await conn.fetchrow(RUNNING, user_id)
            waiting = await conn.fetchval(WAITING, user_id)
            status["waiting_since"] = waiting.isoformat() if waiting else None
            status["run_in_progress"] = str(running["run_id"]) if running else None
            return status
        run = await conn.fetchrow(CURATING_RUN, user_id, msg["seq"])
        if run is not None:
            status["curated"] = {
                "run_id": str(run["run_id"]),
                "policy": run["policy"],
                "at": run["finished_at"].isoformat() if run["finished_at"] else None,
            }
        memories = [_memory(user_id, r) for r in await conn.fetch(LINKED_MEMORIES, user_id, message_id)]
        hypotheses = [_hypothesis(_json(r["h"])) for r in await conn.fetch(HYPOTHESES, user_id, message_id)]
        entries = [_json(r["t"]) for r in await conn.fetch(TRANSCRIPT, user_id, message_id)]
    named, others = _refusals(entries, message_id)
    outcome = _outcome(memories, hypotheses, named)
    verdict = guard.check(msg["text"]) if outcome == "not_remembered" and msg["role"] == "user" else None
    if verdict is not None:  # invariant 11: no policy may keep this text, whether or not the run tried
        outcome, named = "refused", [verdict.reason]
        status["notes"].append(
            "the guard (invariant 11) refuses this text for every policy; it was judged now, as the run records "
            "refusals per run, not per message"
        )
    status.update(
        outcome=outcome,
        summary=_summary(outcome, memories, hypotheses, msg["role"]),
        memories=memories,
        hypotheses=hypotheses,
        refusals=named,
        run_refusals=others,
    )
    if outcome == "not_remembered":
        status["notes"].append(
            "refusals (the guard's, the budget's) are recorded per run, not per message: run_refusals lists "
            "those of the run that read this message, which may be about other messages of that run"
            if others
            else "no refusal was recorded in the run that read this message"
            if entries
            else "the run that read this message is no longer in the agent's transcript (it keeps the last 50 runs)"
        )
    return status


async def last_erasure(conn: asyncpg.Connection | asyncpg.Pool, user_id: str) -> str | None:
    """When the user's data was last erased (ISO time), or None."""
    at = await conn.fetchval(LAST_ERASURE, user_id)
    return at.isoformat() if at else None


async def status_or_reason(conn: asyncpg.Connection, user_id: str, message_id: str) -> dict[str, Any] | str:
    """The message's status, or (a str) why there is none: the api's 404, the MCP tool's error."""
    found = await message_status(conn, user_id, message_id)
    return found if found is not None else not_swept(message_id, await last_erasure(conn, user_id))


def not_swept(message_id: str, erased_at: str | None) -> str:
    """The 404's reason: a message that is not in the evidence store cannot be told apart from one
    still in Kafka ("accepted": ingest answered 202, the sweeper has not written it yet)."""
    reason = (
        f"message {message_id} is not in this user's evidence store yet. It may still be on its way: ingest "
        "accepted it into Kafka and the sweeper writes it when the user's window closes (60 s by default, "
        "MEMWRIGHT_WINDOW_SECONDS); ask again after that. Or it was never sent for this user, or the "
        "sweeper sent it to the dead-letter topic as malformed"
    )
    if erased_at is not None:
        reason += f"; this user's data was erased at {erased_at}, and messages accepted before that are dropped"
    return reason + "."
