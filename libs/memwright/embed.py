"""Embedders. The offline default is feature hashing of words and word pairs: no
network, deterministic, good enough to spot near-duplicate memories. Production
uses an OpenAI-compatible /v1/embeddings endpoint (see index/embedders in issue 5).
"""

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


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))
