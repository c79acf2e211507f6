"""Every refusal of the tool layer (invariants 5, 6 and 7): a refused call is a plain-language
result that says what to do, never an exception, and it stages nothing."""

from __future__ import annotations

from memwright.agent.tools import MAX_MEMORY_CHARS

from tests.fakes.agent import make_tools, memory, msg

MESSAGES = [
    msg("m1", "Always answer in metric units."),
    msg("m2", "Never use emojis."),
    msg("a1", "Sure!", role="assistant"),
]


def full_tools():
    """A user at a budget of 3, with two overlapping memories and one of their own."""
    mems = [
        memory("Never use emojis in replies.", evidence=["old-1"]),
        memory("Never use emojis or exclamation marks in replies.", evidence=["old-2"]),
        memory("Always cite sources.", evidence=["old-3"]),
        memory("I am allergic to nuts.", author="user"),
    ]
    return make_tools(MESSAGES, mems, budget=3), mems


def assert_refused(result: str, tools, *phrases: str) -> None:
    assert result.startswith("Refused: "), result
    for phrase in phrases:
        assert phrase in result, (phrase, result)
    assert tools.refusals and tools.refusals[-1][1] in result


# ---- budget (invariant 5) ----------------------------------------------------------------


def test_create_at_the_budget_is_refused_with_the_options_and_candidate_pairs() -> None:
    tools, mems = full_tools()
    result = tools.create_memory("Always answer in metric units.", ["m1"])
    assert_refused(result, tools, "out of room", "3 of 3", "nothing is ever evicted")
    for option in ("consolidate_memories", "delete_memory", "update_memory"):
        assert option in result
    first_pair_line = next(line for line in result.splitlines() if " + " in line)
    assert mems[0].memory_id in first_pair_line and mems[1].memory_id in first_pair_line  # the overlapping two
    assert "candidates to update" in result
    assert mems[3].memory_id not in result  # the user's own memory is never offered
    assert tools.changes == [] and tools.budget_refusals == 1 and len(tools.memories) == 4


def test_user_written_memories_do_not_count_against_the_budget() -> None:
    tools = make_tools(MESSAGES, [memory("I am allergic to nuts.", author="user")], budget=1)
    assert tools.create_memory("Always answer in metric units.", ["m1"]).startswith("Created memory")
    assert tools.list_memories().startswith("1/1 agent-written memories used.")


def test_after_a_consolidation_there_is_room_again() -> None:
    tools, mems = full_tools()
    merged = tools.consolidate_memories(
        [mems[0].memory_id, mems[1].memory_id], "Never use emojis or exclamation marks.", ["m2"], "overlap"
    )
    assert merged.startswith("Consolidated")
    assert tools.create_memory("Always answer in metric units.", ["m1"]).startswith("Created memory")
    assert tools.agent_memory_count() == 3


# ---- receipts (invariant 6) --------------------------------------------------------------


def test_a_change_without_evidence_is_refused() -> None:
    tools = make_tools(MESSAGES)
    assert_refused(tools.create_memory("Always answer in metric units.", []), tools, "Cite at least one message id")


def test_unknown_or_foreign_evidence_is_refused_everywhere() -> None:
    tools, mems = full_tools()
    tools.budget = 40
    agent_id = mems[2].memory_id
    calls = {
        "create_memory": lambda ev: tools.create_memory("Always answer in metric units.", ev),
        "update_memory": lambda ev: tools.update_memory(agent_id, "Always cite sources with links.", ev, "more"),
        "consolidate_memories": lambda ev: tools.consolidate_memories(
            [mems[0].memory_id, mems[1].memory_id], "Never use emojis.", ev, "overlap"
        ),
        "note_hypothesis": lambda ev: tools.note_hypothesis("User likes metric units", ev),
        "delete_memory": lambda ev: tools.delete_memory(agent_id, "the user asked", ev),
    }
    for tool, call in calls.items():
        # "bob-m1" is another user's message: it is not among this user's messages, so it is unknown here
        for evidence in (["m404"], ["bob-m1"], ["m1", "m404"]):
            result = call(evidence)
            assert_refused(result, tools, "is not among this user's messages shown to you")
            assert tools.refusals[-1][0] == tool
    assert tools.changes == [] and tools.working.hypotheses == []


def test_an_assistant_message_is_not_evidence() -> None:
    tools = make_tools(MESSAGES)
    assert_refused(
        tools.create_memory("User likes short answers.", ["a1"]), tools, "a1 is not a message written by the user"
    )


def test_evidence_and_audit_are_recorded_with_every_change() -> None:
    tools, mems = full_tools()
    tools.budget = 40
    tools.create_memory("Always answer in metric units.", ["m1"])
    tools.update_memory(mems[2].memory_id, "Always cite sources, with links.", ["m2"], "more detail")
    tools.delete_memory(mems[0].memory_id, "the user asked to forget it", ["m2"])
    create, update, delete = tools.changes
    assert (create.action, create.evidence, create.before) == ("create", ["m1"], None)
    assert (update.action, update.evidence, update.before["text"]) == ("update", ["m2"], "Always cite sources.")
    assert tools.memories[mems[2].memory_id].evidence == ["m2", "old-3"]  # receipts accumulate
    assert (delete.action, delete.evidence, delete.reason) == ("delete", ["m2"], "the user asked to forget it")


# ---- protection (invariant 7) ------------------------------------------------------------


def test_user_written_memories_can_be_read_but_not_changed() -> None:
    tools, mems = full_tools()
    tools.budget = 40
    mine = mems[3].memory_id
    assert tools.get_memory(mine).startswith(f"{mine} [user, v1] I am allergic to nuts.")
    assert_refused(tools.update_memory(mine, "x", ["m1"], "r"), tools, "written by the user", "not update")
    assert_refused(tools.consolidate_memories([mine, mems[2].memory_id], "x", ["m1"], "r"), tools, "not consolidate")
    assert_refused(tools.delete_memory(mine, "stale"), tools, "not delete")
    assert tools.changes == [] and tools.memories[mine].text == "I am allergic to nuts."


# ---- everything else ---------------------------------------------------------------------


def test_unknown_ids_empty_text_and_missing_reasons_are_refused() -> None:
    tools, mems = full_tools()
    tools.budget = 40
    assert_refused(tools.get_memory("nope"), tools, "No memory nope exists")
    assert_refused(tools.update_memory("nope", "x", ["m1"], "r"), tools, "call list_memories")
    assert_refused(tools.delete_memory("nope", "r"), tools, "No memory nope")
    assert_refused(tools.consolidate_memories([mems[0].memory_id], "x", ["m1"], "r"), tools, "at least two")
    assert_refused(tools.consolidate_memories([mems[0].memory_id, "nope"], "x", ["m1"], "r"), tools, "No memory")
    assert_refused(tools.create_memory("   ", ["m1"]), tools, "The text is empty")
    assert_refused(tools.create_memory("x" * (MAX_MEMORY_CHARS + 1), ["m1"]), tools, "keep a memory under")
    assert_refused(tools.delete_memory(mems[0].memory_id, "  "), tools, "Say why")
    assert_refused(tools.drop_hypothesis("h-404", "r"), tools, "No hypothesis h-404")
    assert tools.changes == []
