"""A deterministic embedder for tests: no model, no network, stable across runs and machines.

Every text gets a unit vector derived from its SHA-256 alone; `vectors` pins chosen texts to
chosen directions, so a test can say "these two mean the same" without a language model.
Every call is recorded in `calls`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence


def _unit(values: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


class TestEmbedder:
    __test__ = False  # not a pytest test class
    name = "test"

    def __init__(self, dim: int = 8, vectors: Mapping[str, Sequence[float]] | None = None) -> None:
        if dim < 1:
            raise ValueError("a TestEmbedder needs at least one dimension")
        self.dim = dim
        self.pinned = {text: _unit(v) for text, v in (vectors or {}).items()}
        bad = [t for t, v in self.pinned.items() if len(v) != dim]
        if bad:
            raise ValueError(f"pinned vectors must have {dim} dimensions: {bad}")
        self.calls: list[list[str]] = []

    def vector(self, text: str) -> list[float]:
        if text in self.pinned:
            return list(self.pinned[text])
        stream = hashlib.shake_256(text.encode()).digest(2 * self.dim)
        return _unit([int.from_bytes(stream[2 * i : 2 * i + 2], "little") / 32767.5 - 1.0 for i in range(self.dim)])

    def embed_sync(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [self.vector(t) for t in texts]

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return self.embed_sync(texts)
