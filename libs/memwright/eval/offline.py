"""Run a dataset through a policy in-process: the same tool layer, working memory and
compaction as the curator, with the run's commit simulated in memory (no Kafka, no
PostgreSQL). For iterating on a policy in seconds and for unit tests; `memwright eval`
itself always drives the real pipeline (see runner.py).

Each conversation is one run per user, in dataset order, so hypotheses must survive
across runs exactly as they do in the curator (working memory saved and reloaded).
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta

from memwright.agent.run import Policy
from memwright.agent.tools import Memory, MemoryTools, Message
from memwright.agent.working import WorkingMemory
from memwright.eval.dataset import UserCase
from memwright.eval.scoring import DEFAULT_BUDGET, Observed, ObservedMemory


class BudgetExceeded(AssertionError):
    """What the database trigger would have refused (invariant 5)."""


def _accepted(sent_at: str | None, fallback: datetime) -> datetime:
    if sent_at:
        return datetime.fromisoformat(sent_at.replace("Z", "+00:00"))
    return fallback


async def run_user(policy: Policy, case: UserCase) -> tuple[list[Memory], WorkingMemory]:
    budget = case.budget or DEFAULT_BUDGET
    memories: list[Memory] = []
    working = WorkingMemory()
    stored: dict[str, Message] = {}
    seq = 0
    clock = datetime(2026, 1, 1, tzinfo=UTC)
    for conversation in case.conversations:
        new: list[Message] = []
        for m in conversation.messages:
            seq += 1
            clock = max(clock + timedelta(seconds=1), _accepted(m.sent_at, clock))
            msg = Message(m.message_id, conversation.conversation_id, m.text, m.role, clock, seq)
            stored[m.message_id] = msg
            new.append(msg)
        # load_snapshot: new messages plus the messages behind the hypotheses
        shown = {m.message_id: m for m in new}
        for h in working.hypotheses:
            for mid in h.message_ids:
                if mid in stored:
                    shown.setdefault(mid, stored[mid])
        loaded = WorkingMemory.from_row(working.summary, working.hypotheses_json(), working.transcript)
        tools = MemoryTools(case.user_id, copy.deepcopy(memories), shown, budget, loaded)
        results = await policy.run(tools, new)
        tools.working.record({"messages": [m.message_id for m in new], "results": results[:50]})
        tools.working.compact()
        # commit_run: the staged state becomes the state; the database would refuse more
        agent = [m for m in tools.memories.values() if m.author == "agent"]
        if len(agent) > budget:
            raise BudgetExceeded(f"{case.user_id}: {len(agent)} memories over a budget of {budget}")
        memories = list(tools.memories.values())
        working = tools.working
    return memories, working


async def run_offline(policy: Policy, cases: list[UserCase]) -> Observed:
    observed = Observed()
    for case in cases:
        memories, _ = await run_user(policy, case)
        observed.memories[case.user_id] = [ObservedMemory(m.text, list(m.evidence), m.author) for m in memories]
        observed.messages[case.user_id] = case.message_ids
        observed.budgets[case.user_id] = case.budget or DEFAULT_BUDGET
    return observed
