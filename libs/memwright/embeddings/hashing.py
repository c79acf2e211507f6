"""Feature hashing of words and word pairs: no model, no network, deterministic, good enough to
spot near-duplicate wordings (not paraphrases: use the local model for meaning)."""

from __future__ import annotations

import hashlib
import itertools
import math
import re

HASHING_DIM = 256
_WORD = re.compile(r"[a-z0-9]+")


def _tokens(text: str) -> list[str]:
    words = _WORD.findall(text.lower())
    return words + [f"{a}_{b}" for a, b in itertools.pairwise(words)]


def hashing_embed(text: str, dim: int = HASHING_DIM) -> list[float]:
    vec = [0.0] * dim
    for tok in _tokens(text):
        digest = hashlib.blake2b(tok.encode(), digest_size=8).digest()
        bucket = int.from_bytes(digest[:4], "little") % dim
        vec[bucket] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


class HashingEmbedder:
    name = "hashing"
    dim = HASHING_DIM

    def embed_sync(self, texts: list[str]) -> list[list[float]]:
        return [hashing_embed(t, self.dim) for t in texts]

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return self.embed_sync(texts)
