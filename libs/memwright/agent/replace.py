"""Whether a new sentence replaces a memory or sits beside it: the default policy's update reader.

Closeness in meaning says that two texts are about the same thing, not that the new one makes the
old one wrong. "I'm on Android these days" replaces "User uses an iPhone."; "I read on a Kindle
too" sits beside it; the two are about as close to it. The reader looks at the pair: a logistic
regression over the two local-model vectors (their element-wise product and absolute difference),
their cosine, and whether the sentence says something changed (data/words.toml `change`).

`python -m memwright.agent.train` fits it, deterministically, on data/pairs.jsonl (pairs written for
it: {"memory", "said", "replaces"}) and on pairs read off the train split (an update's old and new
message replace; two items of one user sit beside each other), and writes data/replace_head.npz.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from memwright.agent.lexicon import says_changed
from memwright.agent.loading import load_once

REPLACE_FILE = Path(__file__).parent / "data" / "replace_head.npz"
FEATURES = "product,difference,cosine,changed"
DIMENSIONS = 384  # the local model's (all-MiniLM-L6-v2)


def pair_features(memory: np.ndarray, said: np.ndarray, changed: list[bool]) -> np.ndarray:
    """One row per pair: memory[i] with said[i] (unit vectors), and whether said[i] says it changed."""
    memory = np.atleast_2d(memory)
    said = np.atleast_2d(said)
    cos = np.sum(memory * said, axis=1, keepdims=True)
    flag = np.asarray(changed, dtype=np.float64).reshape(-1, 1)
    return np.hstack([memory * said, np.abs(memory - said), cos, flag])


class ReplaceHead:
    """p(replaces) = sigmoid(features @ w + b)."""

    def __init__(self, w: np.ndarray, b: float, version: str) -> None:
        self.w = np.asarray(w, dtype=np.float64).reshape(-1)
        self.b = float(b)
        self.version = version

    @classmethod
    def load(cls, path: Path = REPLACE_FILE) -> ReplaceHead:
        with np.load(path, allow_pickle=False) as data:
            if str(data["features"]) != FEATURES:
                raise ValueError(f"{path} was trained on features {data['features']}; retrain it")
            head = cls(data["w"], float(data["b"]), str(data["version"]))
        if head.w.shape != (2 * DIMENSIONS + 2,):
            raise ValueError(f"{path} holds {head.w.shape[0]} weights, not {2 * DIMENSIONS + 2}; retrain it")
        return head

    def probs(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(1.0 / (1.0 + np.exp(-(x @ self.w + self.b))))

    def replaces(self, memory: np.ndarray, said: np.ndarray, said_text: str) -> np.ndarray:
        """p(replaces) of each memory vector (rows of `memory`) by the sentence `said`."""
        memory = np.atleast_2d(memory)
        rows = np.repeat(np.atleast_2d(said), len(memory), axis=0)
        return self.probs(pair_features(memory, rows, [says_changed(said_text)] * len(memory)))


_shared_head = load_once(ReplaceHead.load)


def shared_head() -> ReplaceHead | None:
    """The process's reader, loaded once; None when its weights are missing (then closeness alone decides)."""
    return _shared_head()
