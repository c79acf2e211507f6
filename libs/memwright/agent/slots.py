"""Which single-valued slot a sentence fills: the default policy's slot reader.

Some things about a user hold one value at a time: where they live, their time zone, their job,
their phone, their computer's system, the layout, length, tone, spelling, language and units they
want replies in, their way of eating. A memory that holds one of them is wrong once the user states
another ("We're up in Alfama now" after "User lives in Hackney."), however the new value is worded
and whether or not it comes with "now" or "switched": the update is found by the slot, not by the
words. A trip or a one-off "put this in a table" fills no slot. The reader reads what a sentence is
about, not whose it is: "My husband is a plumber." reads as a job, and the policy's own test of
whether a sentence may change a memory (rules.py `_may_change`: not someone else's news, no
request, nothing hedged) decides that.

The reader is a softmax over the local model's vector (all-MiniLM-L6-v2) with one class per slot and
"none". `python -m memwright.agent.train` fits it, deterministically, on data/slots.jsonl (sentences
written for it: {"text", "slot"}) and writes data/slot_head.npz.

The rules policy always reads the slots of the replies (length, layout, tone, spelling) and where
the user lives (rules.py `SLOTS_READ_BY_DEFAULT`); the user's other facts only when asked
(`MEMWRIGHT_RULES_SLOTS=true`, `RulesPolicy(read_slots=True)`): on the sets it was not tuned on,
reading them has not yet paid for itself (docs/quality.md, fifteenth and twenty-second rounds).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from memwright.agent.loading import load_once

SLOT_FILE = Path(__file__).parent / "data" / "slot_head.npz"
DIMENSIONS = 384  # the local model's (all-MiniLM-L6-v2)
NONE = "none"


class SlotHead:
    """p(slot) = softmax(vector @ w + b) over `labels`."""

    def __init__(self, w: np.ndarray, b: np.ndarray, labels: tuple[str, ...], version: str) -> None:
        self.w = np.asarray(w, dtype=np.float64)
        self.b = np.asarray(b, dtype=np.float64).reshape(-1)
        self.labels = labels
        self.version = version

    @classmethod
    def load(cls, path: Path = SLOT_FILE) -> SlotHead:
        with np.load(path, allow_pickle=False) as data:
            head = cls(data["w"], data["b"], tuple(str(x) for x in data["labels"]), str(data["version"]))
        if head.w.shape != (DIMENSIONS, len(head.labels)) or NONE not in head.labels:
            raise ValueError(f"{path} holds weights of shape {head.w.shape} for {head.labels}; retrain it")
        return head

    def probs(self, vectors: np.ndarray) -> np.ndarray:
        z = np.atleast_2d(vectors) @ self.w + self.b
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        return np.asarray(p / p.sum(axis=1, keepdims=True))

    def slot(self, vector: np.ndarray, at: float) -> str | None:
        """The slot `vector` fills with probability at least `at`; None for none or when unsure."""
        p = self.probs(vector)[0]
        best = int(p.argmax())
        return self.labels[best] if self.labels[best] != NONE and p[best] >= at else None


_shared_head = load_once(SlotHead.load)


def shared_head() -> SlotHead | None:
    """The process's reader, loaded once; None when its weights are missing (then no slot is read)."""
    return _shared_head()
