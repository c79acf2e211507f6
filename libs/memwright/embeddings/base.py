"""What every embedder is, and the parts they share: the cosine of two unit vectors, an LRU cache
keyed by the text's hash, and where an installed model package lies."""

from __future__ import annotations

import hashlib
import importlib.util
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from memwright import metrics


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def package_dir(module: str) -> Path | None:
    """The directory of an installed package, found without importing it (model packages print
    banners or pull in what their declared dependencies would); None when it is not installed."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def package_file(module: str, name: str, package: str, wanted: str, hint: str, missing: type[Exception]) -> Path:
    """The file `name` of the installed package `module` (distribution `package`), found without
    importing it; else `missing`, saying who wants it ("the message encoder needs") and how to install it."""
    root = package_dir(module)
    if root is None:
        raise missing(f"{wanted} {package}: {hint}")
    path = root / name
    if not path.is_file():
        raise missing(f"{path} is missing (a broken {package} install?): {hint}")
    return path


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """The cosine of two unit vectors (every embedder here returns unit vectors)."""
    return sum(x * y for x, y in zip(a, b, strict=True))


class Embedder(Protocol):
    """Texts in, one unit vector of `dim` floats per text out, in order. Async, so a remote
    endpoint (openai) and an in-process model (local) fit the same slot."""

    name: str
    dim: int

    async def embed(self, texts: list[str]) -> list[list[float]]: ...


@runtime_checkable
class SyncEmbedder(Embedder, Protocol):
    """An in-process embedder (hashing, local, test) that can also be called from synchronous
    code, such as the agent's tool layer, without an event loop."""

    def embed_sync(self, texts: list[str]) -> list[list[float]]: ...


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
