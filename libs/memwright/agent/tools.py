"""The memory tool layer: the only way any policy (rules or LLM) changes memories.

Every call returns a plain-language result an LLM can act on; a refused call is a
result, not an exception. Changes are staged against a snapshot of the user's
memories and committed together at the end of the run (see run.py).

Invariants enforced here (and again in PostgreSQL):
  5  budget: create is refused at the cap, with the agent's options spelled out
  6  receipts: create/update/consolidate must cite messages of this user shown to the agent
  7  protection: memories written by the user cannot be updated, consolidated or deleted
 11  data, never instructions: no text that holds a secret, tells the assistant how to treat its
     rules or claims authority becomes a memory or a hypothesis (guard.py says which)
 12  deleted stays deleted: a memory the user deleted is not written again from the evidence it
     had; only a message from a later conversation, after the deletion, can bring it back
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from memwright import metrics
from memwright.agent import guard
from memwright.agent.working import HYPOTHESES_MAX, HYPOTHESES_MAX_CHARS, Hypothesis, WorkingMemory, hypothesis_id
from memwright.embeddings import cosine, hashing_embed

MAX_MEMORY_CHARS = 500
NEAR_DELETED = 0.75  # similarity at which a text says again what a deleted memory said
Action = Literal["create", "update", "consolidate", "delete"]


@dataclass(frozen=True)
class Message:
    message_id: str
    conversation_id: str
    text: str
    role: str
    accepted_at: datetime
    seq: int


@dataclass
class Memory:
    memory_id: str
    author: str  # "user" | "agent"
    kind: str
    text: str
    version: int
    evidence: list[str] = field(default_factory=list)

    def snapshot(self) -> dict[str, Any]:
        return {"text": self.text, "version": self.version, "author": self.author, "kind": self.kind}


@dataclass(frozen=True)
class DeletedMemory:
    """An agent-written memory the user deleted (invariant 12): what it said, the messages it
    was inferred from (its receipts outlive it), their conversations, and when it went."""

    memory_id: str
    text: str
    evidence: tuple[str, ...]
    conversations: frozenset[str]
    deleted_at: datetime

    def is_new_evidence(self, message: Message) -> bool:
        """A message from a later conversation: sent after the deletion, in none of the
        conversations the deleted memory was inferred from."""
        return message.accepted_at > self.deleted_at and message.conversation_id not in self.conversations

    def describe(self) -> str:
        return (
            f"{self.memory_id} deleted by the user on {self.deleted_at:%Y-%m-%d %H:%M} UTC: {self.text} "
            f"(its evidence: {', '.join(self.evidence) or 'none'})"
        )


@dataclass
class Change:
    action: Action
    memory_id: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    evidence: list[str]
    reason: str
    replaces: list[str] = field(default_factory=list)  # consolidate: the memories it replaces


class MemoryTools:
    def __init__(
        self,
        user_id: str,
        memories: list[Memory],
        shown: dict[str, Message],
        budget: int,
        working: WorkingMemory,
        deleted: list[DeletedMemory] | None = None,
    ) -> None:
        self.user_id = user_id
        self.memories: dict[str, Memory] = {m.memory_id: m for m in memories}
        self.shown = shown  # message_id -> Message: everything the agent has been shown this run
        self.budget = budget
        self.working = working
        self.deleted = list(deleted or [])  # memories the user deleted: not to come back from old evidence
        self.changes: list[Change] = []
        self.refusals: list[tuple[str, str]] = []  # (tool, reason), for metrics and the transcript
        self.budget_refusals = 0
        # compares texts by meaning when a policy brings a sentence model (the local MiniLM); else
        # by words (the hashing embedder)
        self._embedder: Any = None
        self._vector_cache: dict[str, list[float]] = {}  # text -> vector, by the embedder in use

    @property
    def embedder(self) -> Any:
        return self._embedder

    @embedder.setter
    def embedder(self, embedder: Any) -> None:
        if embedder is not self._embedder:
            self._vector_cache.clear()  # vectors of another model are not comparable
        self._embedder = embedder

    # ---- reading -----------------------------------------------------------------------
    def agent_memories(self) -> list[Memory]:
        """The memories the agent may change (never the user's own)."""
        return [m for m in self.memories.values() if m.author == "agent"]

    def agent_memory_count(self) -> int:
        return len(self.agent_memories())

    def list_memories(self) -> str:
        if not self.memories and not self.deleted:
            return "No memories yet."
        lines = [f"{self.agent_memory_count()}/{self.budget} agent-written memories used."]
        for m in self.memories.values():
            lines.append(f"- {m.memory_id} [{m.author}] {m.text}")
        if self.deleted:
            lines.append("Deleted by the user (never write them again from their evidence):")
            lines += [f"- {d.describe()}" for d in self.deleted]
        return "\n".join(lines)

    def get_memory(self, memory_id: str) -> str:
        m = self.memories.get(memory_id)
        if m is None:
            return self._refuse("get_memory", f"No memory {memory_id} exists for this user.")
        evidence = ", ".join(m.evidence) or "none"
        return f"{m.memory_id} [{m.author}, v{m.version}] {m.text}\nEvidence: {evidence}"

    def _vectors(self, texts: list[str]) -> list[list[float]]:
        """The texts' vectors; each text is embedded once per run (memories are compared again and
        again: at 40 memories a search_similar with the local model went from ~415 ms to ~24 ms)."""
        missing = list(dict.fromkeys(t for t in texts if t not in self._vector_cache))
        if missing:
            if self._embedder is not None:
                found = list(self._embedder.embed_sync(missing))
            else:
                found = [hashing_embed(t) for t in missing]
            self._vector_cache.update(zip(missing, found, strict=True))
        return [self._vector_cache[t] for t in texts]

    def similar(self, text: str, limit: int = 5, min_score: float = 0.0) -> list[tuple[Memory, float]]:
        memories = list(self.memories.values())
        if not memories:
            return []
        query, *vectors = self._vectors([text] + [m.text for m in memories])
        scored = [(m, cosine(query, v)) for m, v in zip(memories, vectors, strict=True)]
        scored = [s for s in scored if s[1] >= min_score]
        return sorted(scored, key=lambda s: -s[1])[:limit]

    def search_similar(self, text: str, limit: int = 5) -> str:
        hits = self.similar(text, limit)
        if not hits:
            return "No memories to compare with."
        return "\n".join(f"- {m.memory_id} score={score:.2f} [{m.author}] {m.text}" for m, score in hits)

    # ---- changing ----------------------------------------------------------------------
    def create_memory(self, text: str, evidence: list[str], kind: str = "preference") -> str:
        problem = self._check_text(text) or self._check_evidence(evidence) or self._check_not_deleted(text, evidence)
        if problem:
            return self._refuse("create_memory", problem)
        if self.agent_memory_count() >= self.budget:
            self.budget_refusals += 1
            return self._refuse("create_memory", self._budget_full_message(text))
        memory = Memory(str(uuid.uuid4()), "agent", kind, text.strip(), 1, sorted(set(evidence)))
        self.memories[memory.memory_id] = memory
        held = self._held_in(evidence)
        if held is None:
            change = Change("create", memory.memory_id, None, memory.snapshot(), memory.evidence, "new evidence")
        else:  # it graduated: its before-state is the hypothesis that held its messages
            before = {"hypothesis": asdict(held)}
            reason = f"graduated from hypothesis {held.id}"
            change = Change("create", memory.memory_id, before, memory.snapshot(), memory.evidence, reason)
        self.changes.append(change)
        return f"Created memory {memory.memory_id}."

    def _held_in(self, evidence: list[str]) -> Hypothesis | None:
        """The hypothesis in working memory that holds any of these messages, if one does."""
        cited = set(evidence)
        return next((h for h in self.working.hypotheses if cited & set(h.message_ids)), None)

    def update_memory(self, memory_id: str, text: str, evidence: list[str], reason: str) -> str:
        m = self.memories.get(memory_id)
        problem = (
            self._check_exists(memory_id)
            or self._check_agent_owned(memory_id, "update")
            or self._check_text(text)
            or self._check_evidence(evidence)
            or self._check_not_deleted(text, evidence)
        )
        if problem or m is None:
            return self._refuse("update_memory", problem or "unknown memory")
        before = m.snapshot()
        m.text = text.strip()
        m.version += 1
        m.evidence = sorted(set(m.evidence) | set(evidence))
        self.changes.append(Change("update", memory_id, before, m.snapshot(), sorted(set(evidence)), reason))
        return f"Updated memory {memory_id} (now version {m.version})."

    def consolidate_memories(
        self, memory_ids: list[str], text: str, reason: str, evidence: list[str] | None = None
    ) -> str:
        """The merged memory keeps every source's receipts. `evidence` may be empty (a merge made
        to free room adds no message); a message cited there joins the receipts, so cite one only
        when the merged text says what it said."""
        ids = list(dict.fromkeys(memory_ids))
        evidence = evidence or []
        if len(ids) < 2:
            return self._refuse("consolidate_memories", "Consolidation needs at least two different memory ids.")
        for mid in ids:
            problem = self._check_exists(mid) or self._check_agent_owned(mid, "consolidate")
            if problem:
                return self._refuse("consolidate_memories", problem)
        problem = (
            self._check_text(text)
            or (self._check_evidence(evidence) if evidence else None)
            or self._check_not_deleted(text, evidence)
        )
        if problem:
            return self._refuse("consolidate_memories", problem)
        sources = [self.memories.pop(mid) for mid in ids]
        union = sorted(set(evidence).union(*(s.evidence for s in sources)))  # receipts are kept
        merged = Memory(str(uuid.uuid4()), "agent", sources[0].kind, text.strip(), 1, union)
        self.memories[merged.memory_id] = merged
        for s in sources:
            self.changes.append(
                Change("delete", s.memory_id, s.snapshot(), None, [], f"consolidated into {merged.memory_id}: {reason}")
            )
        self.changes.append(
            Change("consolidate", merged.memory_id, {"replaces": ids}, merged.snapshot(), union, reason, replaces=ids)
        )
        return f"Consolidated {', '.join(ids)} into memory {merged.memory_id}."

    def delete_memory(self, memory_id: str, reason: str, evidence: list[str] | None = None) -> str:
        """Delete one agent-written memory. `evidence` is optional: when the user asked for it
        ("forget that ..."), cite that message so the audit trail says why."""
        problem = self._check_exists(memory_id) or self._check_agent_owned(memory_id, "delete")
        if not problem and evidence:
            problem = self._check_evidence(evidence)
        if problem:
            return self._refuse("delete_memory", problem)
        if not reason.strip():
            return self._refuse("delete_memory", "Say why the memory is deleted (reason).")
        m = self.memories.pop(memory_id)
        self.changes.append(Change("delete", memory_id, m.snapshot(), None, sorted(set(evidence or [])), reason))
        return f"Deleted memory {memory_id}."

    def note_hypothesis(self, statement: str, evidence: list[str]) -> str:
        problem = (
            self._check_text(statement)
            or self._check_evidence(evidence)
            or self._check_not_deleted(statement, evidence)
        )
        if not problem:
            problem = self._check_hypothesis_room(statement, evidence)
        if problem:
            return self._refuse("note_hypothesis", problem)
        h = None
        for mid in evidence:
            msg = self.shown[mid]
            h = self.working.note(statement, msg.conversation_id, mid, msg.accepted_at.isoformat())
        assert h is not None
        return (
            f"Hypothesis {h.id} seen {h.count} time(s) in {len(h.conversations)} conversation(s). "
            "Promote it with create_memory only once it repeats, ideally across conversations."
        )

    def fade_hypotheses(self, new_messages: list[Message], horizon: timedelta) -> list[str]:
        """Drop the hypotheses not seen again within `horizon` before this batch (every policy does)."""
        if not new_messages:
            return []
        now = min(m.accepted_at for m in new_messages)
        return [
            self.drop_hypothesis(h.id, f"faded: not seen again within {horizon.days} days")
            for h in self.working.stale(now, horizon)
        ]

    def drop_hypothesis(self, hypothesis_id: str, reason: str) -> str:
        if self.working.drop(hypothesis_id) is None:
            return self._refuse("drop_hypothesis", f"No hypothesis {hypothesis_id}.")
        return f"Dropped hypothesis {hypothesis_id} ({reason})."

    # ---- checks ------------------------------------------------------------------------
    def _refuse(self, tool: str, reason: str) -> str:
        self.refusals.append((tool, reason))
        return f"Refused: {reason}"

    def _check_exists(self, memory_id: str) -> str | None:
        if memory_id not in self.memories:
            return f"No memory {memory_id} exists for this user; call list_memories for the ids."
        return None

    def _check_agent_owned(self, memory_id: str, verb: str) -> str | None:
        if self.memories[memory_id].author == "user":
            return f"Memory {memory_id} was written by the user; you can read it but not {verb} it."
        return None

    def _check_hypothesis_room(self, statement: str, evidence: list[str]) -> str | None:
        """Compaction never drops a hypothesis (invariant 8), so their room is bounded here: a
        note that would take the hypotheses past HYPOTHESES_MAX or HYPOTHESES_MAX_CHARS is refused."""
        held = len(self.working.hypotheses)
        new = self.working.find(hypothesis_id(statement)) is None
        observations = [(self.shown[m].conversation_id, m, self.shown[m].accepted_at.isoformat()) for m in evidence]
        if (new and held >= HYPOTHESES_MAX) or self.working.hypotheses_chars_after(
            statement, observations
        ) > HYPOTHESES_MAX_CHARS:
            return (
                f"Working memory has no room for this: it holds {held} hypotheses (at most {HYPOTHESES_MAX}, "
                f"{HYPOTHESES_MAX_CHARS} characters). Promote the ones that repeated (create_memory), or "
                "drop_hypothesis stale or contradicted ones, then note this."
            )
        return None

    @staticmethod
    def _check_text(text: str) -> str | None:
        if not text or not text.strip():
            return "The text is empty."
        if len(text) > MAX_MEMORY_CHARS:
            return f"The text is {len(text)} characters; keep a memory under {MAX_MEMORY_CHARS}."
        verdict = guard.check(text)  # invariant 11: a memory is data, never an instruction
        if verdict is not None:
            metrics.CURATOR_GUARD_REFUSALS.labels(verdict.kind).inc()
            return f"This cannot be remembered: {verdict.reason}. Leave it out; do not rephrase it."
        return None

    def _check_not_deleted(self, text: str, evidence: list[str]) -> str | None:
        """Invariant 12: the user deleted a memory, so neither its evidence alone nor its text
        without a message from a later conversation may write it again."""
        cited = [self.shown[e] for e in evidence]
        for d in self.deleted:
            if any(d.is_new_evidence(m) for m in cited):
                continue
            gone = f'memory {d.memory_id} ("{d.text}")'
            when = f"{d.deleted_at:%Y-%m-%d %H:%M} UTC"
            reused = [e for e in evidence if e in set(d.evidence)]
            if reused:  # any of its old messages, even beside others that are not new either
                why = f"Messages {', '.join(reused)} were the evidence of {gone}, which the user deleted on {when}"
            elif self._says_again(text, d.text):
                why = f"This says again what {gone} said before the user deleted it on {when}"
            else:
                continue
            metrics.CURATOR_GUARD_REFUSALS.labels("deleted").inc()
            return (
                f"{why}. A memory the user deleted is not written again from the messages it came from; only "
                "a new message in a later conversation can bring it back, and none is cited. Leave it (and drop "
                "a hypothesis that only holds those messages)."
            )
        return None

    def _says_again(self, text: str, deleted: str) -> bool:
        """Whether `text` says what a deleted memory said: in words (hashing) or, with the policy's
        model loaded, in meaning."""
        if cosine(hashing_embed(text), hashing_embed(deleted)) >= NEAR_DELETED:
            return True
        if self.embedder is None:
            return False
        mine, theirs = self._vectors([text, deleted])
        return cosine(mine, theirs) >= NEAR_DELETED

    def _check_evidence(self, evidence: list[str]) -> str | None:
        if not evidence:
            return "Cite at least one message id as evidence (the user's messages you were shown)."
        unknown = [e for e in evidence if e not in self.shown]
        if unknown:
            return (
                f"Evidence {', '.join(unknown)} is not among this user's messages shown to you; "
                "cite only ids from the new messages or from your hypotheses."
            )
        not_user = [e for e in evidence if self.shown[e].role != "user"]
        if not_user:
            return f"Evidence {', '.join(not_user)} is not a message written by the user."
        return None

    def _budget_full_message(self, text: str) -> str:
        lines = [
            f"You are out of room: {self.agent_memory_count()} of {self.budget} agent-written memories are used, "
            "and nothing is ever evicted for you. Choose one:",
            "  1. consolidate_memories two that overlap into one,",
            "  2. delete_memory one that is no longer true or useful,",
            "  3. update_memory an existing one to include this instead.",
        ]
        pairs = self.overlapping_pairs(limit=3)
        if pairs:
            lines.append("Candidate pairs to consolidate:")
            lines += [f"  - {a.memory_id} + {b.memory_id} (similarity {s:.2f})" for a, b, s in pairs]
        close = [m for m, s in self.similar(text, 3) if m.author == "agent"]
        if close:
            lines.append("Closest to the new text (candidates to update): " + ", ".join(m.memory_id for m in close))
        return "\n".join(lines)

    def overlapping_pairs(self, limit: int = 3) -> list[tuple[Memory, Memory, float]]:
        agent = self.agent_memories()
        vectors = dict(zip((m.memory_id for m in agent), self._vectors([m.text for m in agent]), strict=True))
        pairs = [
            (a, b, cosine(vectors[a.memory_id], vectors[b.memory_id]))
            for i, a in enumerate(agent)
            for b in agent[i + 1 :]
        ]
        return sorted(pairs, key=lambda p: -p[2])[:limit]
