"""The agent's working memory and its hypotheses (invariant 8)."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from typing import Any

TRANSCRIPT_KEEP = 50
SUMMARY_MAX = 2000


def hypothesis_id(statement: str) -> str:
    return "h-" + hashlib.sha1(statement.strip().lower().encode()).hexdigest()[:10]


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
        self.message_ids.append(message_id)
        if conversation_id not in self.conversations:
            self.conversations.append(conversation_id)
        self.last_seen = max(self.last_seen, at)


@dataclass
class WorkingMemory:
    summary: str = ""
    hypotheses: list[Hypothesis] = field(default_factory=list)
    transcript: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_row(cls, summary: str, hypotheses: list[dict[str, Any]], transcript: list[dict[str, Any]]) -> WorkingMemory:
        return cls(summary, [Hypothesis(**h) for h in hypotheses], list(transcript))

    def hypotheses_json(self) -> list[dict[str, Any]]:
        return [asdict(h) for h in self.hypotheses]

    def find(self, hid: str) -> Hypothesis | None:
        return next((h for h in self.hypotheses if h.id == hid), None)

    def note(self, statement: str, conversation_id: str, message_id: str, at: str) -> Hypothesis:
        hid = hypothesis_id(statement)
        existing = self.find(hid)
        if existing is None:
            existing = Hypothesis(hid, statement.strip(), 0, [], [], at, at)
            self.hypotheses.append(existing)
        existing.observe(conversation_id, message_id, at)
        return existing

    def drop(self, hid: str) -> Hypothesis | None:
        found = self.find(hid)
        if found is not None:
            self.hypotheses.remove(found)
        return found

    def record(self, entry: dict[str, Any]) -> None:
        self.transcript.append(entry)

    def compact(self, keep: int = TRANSCRIPT_KEEP, summary_max: int = SUMMARY_MAX) -> None:
        """Shorten the transcript and the summary. Hypotheses are never touched (invariant 8)."""
        if len(self.transcript) > keep:
            self.transcript = self.transcript[-keep:]
        if len(self.summary) > summary_max:
            self.summary = "…" + self.summary[-(summary_max - 1):]
