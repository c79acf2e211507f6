"""Embedders: the offline hashing embedder (default) and any OpenAI-compatible endpoint.

Embeddings are cached by text hash, so an unchanged text is never embedded twice.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Protocol

from memwright.embed import HASHING_DIM, hashing_embed
from memwright.settings import QdrantSettings


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Embedder(Protocol):
    name: str
    dim: int

    async def embed(self, texts: list[str]) -> list[list[float]]: ...


class HashingEmbedder:
    name = "hashing"
    dim = HASHING_DIM

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return [hashing_embed(t) for t in texts]


class OpenAIEmbedder:
    name = "openai"

    def __init__(self, base_url: str, model: str, api_key: str, dim: int) -> None:
        from openai import AsyncOpenAI

        self.client = AsyncOpenAI(base_url=base_url, api_key=api_key or "unused", timeout=30, max_retries=2)
        self.model = model
        self.dim = dim

    async def embed(self, texts: list[str]) -> list[list[float]]:
        response = await self.client.embeddings.create(model=self.model, input=texts)
        return [d.embedding for d in sorted(response.data, key=lambda d: d.index)]


class CachedEmbedder:
    """An LRU cache in front of any embedder, keyed by the text's hash."""

    def __init__(self, inner: Embedder, size: int = 10_000) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.size = size
        self._cache: OrderedDict[str, list[float]] = OrderedDict()
        self.misses = 0

    async def embed(self, texts: list[str]) -> list[list[float]]:
        keys = [text_hash(t) for t in texts]
        missing = [(k, t) for k, t in zip(keys, texts, strict=True) if k not in self._cache]
        if missing:
            self.misses += len(missing)
            vectors = await self.inner.embed([t for _, t in missing])
            for (k, _), v in zip(missing, vectors, strict=True):
                self._cache[k] = v
        out = []
        for k in keys:
            self._cache.move_to_end(k)
            out.append(self._cache[k])
        while len(self._cache) > self.size:
            self._cache.popitem(last=False)
        return out


async def make_embedder(settings: QdrantSettings) -> CachedEmbedder:
    if settings.embedder == "openai":
        if not settings.embed_base_url:
            raise ValueError("MEMWRIGHT_EMBED_BASE_URL is not set; it is required with MEMWRIGHT_EMBEDDER=openai")
        probe = OpenAIEmbedder(settings.embed_base_url, settings.embed_model, settings.embed_api_key, 0)
        probe.dim = len((await probe.embed(["dimension probe"]))[0])
        return CachedEmbedder(probe)
    if settings.embedder != "hashing":
        raise ValueError(f"MEMWRIGHT_EMBEDDER={settings.embedder!r}: choose 'hashing' or 'openai'")
    return CachedEmbedder(HashingEmbedder())
