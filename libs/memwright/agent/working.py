"""The agent's working memory and its hypotheses (invariant 8).

A user's memory agent is long-lived: its working memory (running summary, hypotheses,
recent transcript) is saved with every committed run and loaded by the next one, across
all of that user's projects and conversations.

A hypothesis is a weak signal held loosely: its statement, how often it was seen, the
distinct conversations, the message ids behind it, first and last seen. The agent
promotes it to a memory once it repeats across conversations, drops it when it is
contradicted or promoted, and lets it fade when it does not repeat within a horizon.

Compaction keeps the working memory within its size budget by shortening the
transcript and the summary. It never drops or alters a hypothesis; the tool layer
bounds how many hypotheses there can be (HYPOTHESES_MAX, HYPOTHESES_MAX_CHARS).
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

TRANSCRIPT_KEEP = 50  # transcript entries kept at most (one per run)
SUMMARY_MAX = 2000  # characters of running summary kept at most
WORKING_MAX_CHARS = 64_000  # size budget of the whole working memory, serialised as JSON
HYPOTHESES_MAX = 100  # live hypotheses at most; note_hypothesis refuses a new one beyond
HYPOTHESES_MAX_CHARS = WORKING_MAX_CHARS * 3 // 4  # ... or a note that would take them past this
HYPOTHESIS_MESSAGES_MAX = 20  # message and conversation ids kept per hypothesis (the count keeps counting)
# a hypothesis not seen again within this horizon fades: people come back to a hobby or a worry over weeks
# and months. For a user with many hints the room (HYPOTHESES_MAX) binds first: the rules policy then lets
# the oldest seen once fade early (rules._note)
FADE_AFTER = timedelta(days=90)


def hypothesis_id(statement: str) -> str:
    return "h-" + hashlib.sha1(" ".join(statement.lower().split()).encode()).hexdigest()[:10]


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=str))


@dataclass
class Hypothesis:
    id: str
    statement: str
    count: int
    conversations: list[str]
    message_ids: list[str]
    first_seen: str
    last_seen: str

    def observe(self, conversation_id: str, message_id: str, at: str) -> None:
        if message_id in self.message_ids:
            return  # the same message seen again is not a repetition
        self.count += 1
        if len(self.message_ids) < HYPOTHESIS_MESSAGES_MAX:
            self.message_ids.append(message_id)
        if conversation_id not in self.conversations and len(self.conversations) < HYPOTHESIS_MESSAGES_MAX:
            self.conversations.append(conversation_id)
        self.first_seen = min(self.first_seen, at)
        self.last_seen = max(self.last_seen, at)

    def describe(self) -> str:
        return (
            f'{self.id} "{self.statement}" seen {self.count} time(s) in '
            f"{len(self.conversations)} conversation(s) ({', '.join(self.conversations)}); "
            f"messages {', '.join(self.message_ids)}; first {self.first_seen}, last {self.last_seen}"
        )


@dataclass
class WorkingMemory:
    summary: str = ""
    hypotheses: list[Hypothesis] = field(default_factory=list)
    transcript: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_row(
        cls, summary: str, hypotheses: list[dict[str, Any]], transcript: list[dict[str, Any]]
    ) -> WorkingMemory:
        return cls(summary, [Hypothesis(**h) for h in hypotheses], list(transcript))

    def hypotheses_json(self) -> list[dict[str, Any]]:
        return [asdict(h) for h in self.hypotheses]

    # ---- hypotheses --------------------------------------------------------------------
    def find(self, hid: str) -> Hypothesis | None:
        return next((h for h in self.hypotheses if h.id == hid), None)

    def note(self, statement: str, conversation_id: str, message_id: str, at: str) -> Hypothesis:
        hid = hypothesis_id(statement)
        existing = self.find(hid)
        if existing is None:
            existing = Hypothesis(hid, " ".join(statement.split()), 0, [], [], at, at)
            self.hypotheses.append(existing)
        existing.observe(conversation_id, message_id, at)
        return existing

    def drop(self, hid: str) -> Hypothesis | None:
        found = self.find(hid)
        if found is not None:
            self.hypotheses.remove(found)
        return found

    def hypotheses_chars(self) -> int:
        return _size(self.hypotheses_json())

    def hypotheses_chars_after(self, statement: str, observations: list[tuple[str, str, str]]) -> int:
        """What hypotheses_chars() would be after noting `statement` with (conversation, message, at)
        observations; the tool layer refuses a note that would not fit."""
        probe = WorkingMemory(hypotheses=copy.deepcopy(self.hypotheses))
        for conversation_id, message_id, at in observations:
            probe.note(statement, conversation_id, message_id, at)
        return probe.hypotheses_chars()

    def stale(self, now: datetime, horizon: timedelta = FADE_AFTER) -> list[Hypothesis]:
        """Hypotheses last seen longer than `horizon` before `now`: the agent lets them fade
        (with drop_hypothesis, so the transcript says so). Compaction never does this."""
        cutoff = (now - horizon).isoformat()
        return [h for h in self.hypotheses if h.last_seen < cutoff]

    # ---- transcript, summary and compaction -------------------------------------------
    def record(self, entry: dict[str, Any]) -> None:
        self.transcript.append(entry)

    def size(self) -> int:
        """Characters of the working memory as it is stored (JSON)."""
        return _size({"summary": self.summary, "hypotheses": self.hypotheses_json(), "transcript": self.transcript})

    def compact(
        self, keep: int = TRANSCRIPT_KEEP, summary_max: int = SUMMARY_MAX, max_chars: int = WORKING_MAX_CHARS
    ) -> None:
        """Bring the working memory within its size budget.

        Shortens, in this order: the transcript (oldest entries first), then the summary
        (oldest text first). Hypotheses are never dropped or altered (invariant 8), so the
        result is within `max_chars` unless the hypotheses alone are larger, in which case
        the transcript and summary are emptied and every hypothesis stays.
        """
        if len(self.transcript) > keep:
            self.transcript = self.transcript[len(self.transcript) - keep :]
        if len(self.summary) > summary_max:
            self.summary = ("…" + self.summary[len(self.summary) - summary_max + 1 :])[:summary_max]
        excess = self.size() - max_chars
        if excess <= 0:
            return
        # Drop the oldest transcript entries, each costing its JSON size plus a separator.
        drop = 0
        while drop < len(self.transcript) and excess > 0:
            excess -= _size(self.transcript[drop]) + (2 if drop < len(self.transcript) - 1 else 0)
            drop += 1
        self.transcript = self.transcript[drop:]
        excess = self.size() - max_chars
        if excess > 0 and self.summary:
            # Keep the most recent part of the summary; the JSON escaping of a character can
            # take more than one, so measure again until it fits or nothing is left.
            while excess > 0 and self.summary:
                cut = max(1, excess)
                self.summary = self.summary[cut:]
                excess = self.size() - max_chars
