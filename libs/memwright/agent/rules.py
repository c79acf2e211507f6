"""The offline rules policy: drives the same tool layer as the LLM policy, with no network.

- An explicit preference ("always …", "never …", "from now on …") becomes a memory at once,
  citing the message that said it; a restatement adds evidence to the existing memory.
- A weak signal ("I'm a …", "I use …", "I like …") becomes a hypothesis; it graduates to a
  memory only when it has been seen in two different conversations.
- Anything else is a one-off and is forgotten.
"""

from __future__ import annotations

import re

from memwright.agent.tools import MemoryTools, Message

PROMOTE_AFTER_CONVERSATIONS = 2
DUPLICATE_SCORE = 0.8

_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")
_EXPLICIT = re.compile(
    r"^(?:(?:please|also|and|remember|note|ok|okay)[:,]?\s+)*"
    r"(?:always|never|from now on|going forward|in future|don't ever|do not ever)\b",
    re.IGNORECASE,
)
_TRANSIENT = {
    "tired", "sorry", "sure", "not sure", "here", "back", "ok", "okay", "fine", "done", "confused",
    "curious", "happy", "glad", "ready", "busy", "late", "lost", "stuck", "new here", "bored", "hungry",
}
_WEAK = [
    (re.compile(r"\bI(?:'m| am) (?P<article>an? )?(?P<what>[a-z][a-z' -]{2,40}?)(?=[.,!?;]|$| and | but | so )", re.I),
     "User is {article}{what}"),
    (re.compile(r"\bI (?:really |usually |mostly |often )?(?P<verb>like|love|enjoy|prefer|use|work with|work on|"
                r"live in|work at|work as) (?P<what>[a-z0-9][a-z0-9' +#.-]{1,40}?)(?=[.,!?;]|$| and | but | so )", re.I),
     "User {verb} {what}"),
    (re.compile(r"\bmy (?P<what>(?:favou?rite|preferred) [a-z ]{2,20} (?:is|are) [a-z0-9 ]{2,30}?)(?=[.,!?;]|$)", re.I),
     "User's {what}"),
]
_VERB_3RD = {"like": "likes", "love": "loves", "enjoy": "enjoys", "prefer": "prefers", "use": "uses",
             "work with": "works with", "work on": "works on", "live in": "lives in", "work at": "works at",
             "work as": "works as"}


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCES.split(text) if s.strip()]


def explicit_preference(sentence: str) -> str | None:
    if not _EXPLICIT.search(sentence):
        return None
    clean = re.sub(r"^(?:(?:please|also|and|remember|note|ok|okay)[:,]?\s+)+", "", sentence, flags=re.I)
    clean = clean.rstrip(" .!") + "."
    return clean[0].upper() + clean[1:]


def weak_statements(sentence: str) -> list[str]:
    found = []
    for pattern, template in _WEAK:
        for m in pattern.finditer(sentence):
            what = m.group("what").strip().lower()
            if what in _TRANSIENT or what.split()[0] in {"going", "trying", "looking", "wondering", "not", "just", "so", "very"}:
                continue
            groups = m.groupdict()
            verb = _VERB_3RD.get((groups.get("verb") or "").lower(), "")
            article = (groups.get("article") or "").lower()
            found.append(template.format(what=what, verb=verb, article=article))
    return found


class RulesPolicy:
    name = "rules"

    async def run(self, tools: MemoryTools, new_messages: list[Message]) -> list[str]:
        results: list[str] = []
        for msg in new_messages:
            if msg.role != "user":
                continue
            for sentence in sentences(msg.text):
                pref = explicit_preference(sentence)
                if pref:
                    results.append(self._remember(tools, pref, [msg.message_id]))
                    continue
                for statement in weak_statements(sentence):
                    results.append(tools.note_hypothesis(statement, [msg.message_id]))
        results += self._promote(tools)
        tools.working.summary = (tools.working.summary + "\n" + self._summary_line(new_messages, tools)).strip()
        return results

    def _remember(self, tools: MemoryTools, text: str, evidence: list[str]) -> str:
        close = tools.similar(text, limit=1, min_score=DUPLICATE_SCORE)
        if close:
            existing = close[0][0]
            if existing.author == "user" or set(evidence) <= set(existing.evidence):
                return f"Already remembered as {existing.memory_id}."
            return tools.update_memory(existing.memory_id, existing.text, evidence, "restated by the user")
        result = tools.create_memory(text, evidence)
        if result.startswith("Refused") and tools.agent_memory_count() >= tools.budget:
            # The rules policy never merges or deletes on its own guesswork: the preference is
            # kept as a hypothesis (nothing is lost) and the budget refusal is counted.
            for mid in evidence:
                tools.note_hypothesis(text, [mid])
        return result

    def _promote(self, tools: MemoryTools) -> list[str]:
        results = []
        for h in list(tools.working.hypotheses):
            if len(h.conversations) < PROMOTE_AFTER_CONVERSATIONS:
                continue
            evidence = [m for m in h.message_ids if m in tools.shown]
            outcome = self._remember(tools, h.statement.rstrip(".") + ".", evidence)
            if not outcome.startswith("Refused"):
                tools.drop_hypothesis(h.id, f"promoted after {len(h.conversations)} conversations")
            results.append(outcome)
        return results

    @staticmethod
    def _summary_line(new_messages: list[Message], tools: MemoryTools) -> str:
        conversations = sorted({m.conversation_id for m in new_messages})
        counts: dict[str, int] = {}
        for c in tools.changes:
            counts[c.action] = counts.get(c.action, 0) + 1
        done = ", ".join(f"{n} {a}" for a, n in sorted(counts.items())) or "no memory change"
        return f"{len(new_messages)} message(s) in {', '.join(conversations)}: {done}."
