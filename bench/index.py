"""The embedded index (Qdrant Edge through memwright's EdgeBackend) at 10,000, 100,000 and
1,000,000 memories, each figure beside a baseline measured in the same run:

- upsert rate (memories/s, batches of 256 with their payloads) beside the same batches
  written straight into an EdgeShard (the engine without memwright's layer);
- per-user filtered search p50/p99 (top 5 of one user's 40 memories) beside a brute-force
  numpy scan of the same vectors (find the user's rows among all, score them), and beside
  numpy over the user's rows already gathered (the floor);
- the curator's search_similar: the in-process comparison it runs today (the hashing
  embedder, as the rules policy does it; the local MiniLM model, as the llm policy does it;
  each also with the memories' vectors kept between calls) beside asking the index (embed
  the query, filtered search in a 100,000-point store), at 10, 40 and 100 memories per user.

    .venv/bin/python -m bench.run --only index            # or: .venv/bin/python -m bench.index
    .venv/bin/python -m bench.index --sizes 10000,100000  # fewer sizes

No stack needed. Vectors are random unit vectors of 256 dimensions (the hashing embedder's
size); 40 memories per user (the default budget).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

DIM = 256
PER_USER = 40
BATCH = 256
SIZES = (10_000, 100_000, 1_000_000)


def _pct(samples: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples) * 1000.0, q))


def _payload(user: str) -> dict[str, Any]:
    return {
        "user_id": user,
        "version": 1,
        "author": "agent",
        "kind": "preference",
        "updated_at": "2026-12-03T10:00:00+00:00",
        "text_hash": "0" * 64,
    }


def _data(n: int, seed: int) -> tuple[np.ndarray, list[str], list[str]]:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, DIM), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    users = [f"u{i // PER_USER}" for i in range(n)]  # a user's memories are adjacent rows
    ids = [str(uuid.UUID(int=i + 1)) for i in range(n)]
    return vectors, users, ids


async def _upsert_backend(path: Path, vectors: np.ndarray, users: list[str], ids: list[str]) -> tuple[float, Any]:
    from memwright.index.backend import Point
    from memwright.index.edge import EdgeBackend

    backend = EdgeBackend.open(path)
    await backend.create_collection("memories", DIM)
    started = time.perf_counter()
    for i in range(0, len(ids), BATCH):
        rows = vectors[i : i + BATCH].tolist()
        await backend.upsert("memories", [Point(ids[i + j], _payload(users[i + j]), v) for j, v in enumerate(rows)])
    return time.perf_counter() - started, backend


def _upsert_raw(path: Path, vectors: np.ndarray, users: list[str], ids: list[str]) -> float:
    from memwright.index import edge
    from qdrant_edge import EdgeShard, KeywordIndexParams, UpdateOperation
    from qdrant_edge import Point as EdgePoint

    shard = EdgeShard.create(str(path), edge._config(DIM))
    shard.update(UpdateOperation.create_field_index("user_id", KeywordIndexParams(is_tenant=True)))
    started = time.perf_counter()
    for i in range(0, len(ids), BATCH):
        rows = vectors[i : i + BATCH].tolist()
        shard.update(
            UpdateOperation.upsert_points(
                [EdgePoint(ids[i + j], v, _payload(users[i + j])) for j, v in enumerate(rows)]
            )
        )
    elapsed = time.perf_counter() - started
    shard.close()
    return elapsed


async def size_figures(n: int, work: Path, say: Callable[[str], None], queries: int) -> dict[str, Any]:
    vectors, users, ids = _data(n, seed=n)
    raw_s = _upsert_raw(work / f"raw-{n}", vectors, users, ids)
    shutil.rmtree(work / f"raw-{n}", ignore_errors=True)
    upsert_s, backend = await _upsert_backend(work / f"edge-{n}", vectors, users, ids)
    try:
        rng = np.random.default_rng(7)
        owners = np.asarray([int(u[1:]) for u in users])
        picks = rng.integers(0, n // PER_USER, size=queries)
        qs = rng.standard_normal((queries, DIM), dtype=np.float32)
        qs /= np.linalg.norm(qs, axis=1, keepdims=True)
        edge_t, scan_t, floor_t = [], [], []
        for u, q in zip(picks, qs, strict=True):
            user, ql = f"u{u}", q.tolist()
            t = time.perf_counter()
            hits = await backend.search("memories", ql, user, 5)
            edge_t.append(time.perf_counter() - t)
            t = time.perf_counter()
            rows = np.flatnonzero(owners == u)  # a scan without an index: find the user's rows, score them
            scores = vectors[rows] @ q
            top = rows[np.argsort(-scores)[:5]]
            scan_t.append(time.perf_counter() - t)
            t = time.perf_counter()
            own = vectors[u * PER_USER : (u + 1) * PER_USER] @ q  # the user's rows already gathered
            np.argsort(-own)[:5]
            floor_t.append(time.perf_counter() - t)
            assert {h[0] for h in hits} == {ids[i] for i in top}, "the index and the scan disagree"
        t = time.perf_counter()
        await backend.close()
        closed = time.perf_counter() - t
        from memwright.index.edge import EdgeBackend

        t = time.perf_counter()
        backend = EdgeBackend.open(work / f"edge-{n}")
        count = await backend.count("memories")
        reload_s = time.perf_counter() - t
        assert count == n, f"reloaded {count} of {n} points"
    finally:
        await backend.close()
    disk = sum(f.stat().st_size for f in (work / f"edge-{n}").rglob("*") if f.is_file())
    shutil.rmtree(work / f"edge-{n}", ignore_errors=True)
    out = {
        "memories": n,
        "users": n // PER_USER,
        "upsert_per_s": round(n / upsert_s),
        "raw_shard_upsert_per_s": round(n / raw_s),
        "search_p50_ms": round(_pct(edge_t, 50), 3),
        "search_p99_ms": round(_pct(edge_t, 99), 3),
        "numpy_scan_p50_ms": round(_pct(scan_t, 50), 3),
        "numpy_scan_p99_ms": round(_pct(scan_t, 99), 3),
        "numpy_gathered_p50_ms": round(_pct(floor_t, 50), 4),
        "queries": queries,
        "close_s": round(closed, 2),
        "reload_s": round(reload_s, 2),
        "disk_mb": round(disk / 1e6),
    }
    say(
        f"  {n:>9,} memories ({n // PER_USER:,} users): upsert {out['upsert_per_s']:,}/s  |  baseline: raw EdgeShard "
        f"{out['raw_shard_upsert_per_s']:,}/s"
    )
    say(
        f"  {'':>9}  per-user search p50 {out['search_p50_ms']:.3f} ms p99 {out['search_p99_ms']:.3f} ms  |  baseline: "
        f"numpy scan p50 {out['numpy_scan_p50_ms']:.3f} ms p99 {out['numpy_scan_p99_ms']:.3f} ms, the user's rows "
        f"gathered {out['numpy_gathered_p50_ms']:.4f} ms  ({queries} queries; reload {reload_s:.2f}s, "
        f"{out['disk_mb']:,} MB on disk)"
    )
    return out


# ---- the curator's search_similar -----------------------------------------------------------


def _texts(n: int, user: int) -> list[str]:
    topics = ("metric units", "French replies", "no emoji", "tables for comparisons", "short answers", "neovim")
    return [f"User {user} prefers {topics[i % len(topics)]} in note {i} of their setup" for i in range(n)]


async def search_similar_figures(work: Path, say: Callable[[str], None], calls: int) -> dict[str, Any]:
    """search_similar in the curator today (MemoryTools.similar: embed the user's memories, compare
    in process) against the index (embed the query, filtered search in a 100,000-point store)."""
    from memwright.agent.tools import Memory, MemoryTools
    from memwright.agent.working import WorkingMemory
    from memwright.embeddings import CachedEmbedder, HashingEmbedder
    from memwright.index.backend import Point
    from memwright.index.edge import EdgeBackend
    from memwright.index.vectors import VectorIndex

    try:
        from memwright.embeddings import local

        minilm: Any = local.shared()
    except Exception as exc:  # the model package is missing: measure hashing only
        say(f"  (the local model is not available: {exc})")
        minilm = None

    class _Cached:  # the shared model with each text's vector kept (what a cache in the curator would do)
        def __init__(self, inner: Any) -> None:
            self.inner = inner
            self.vectors: dict[str, list[float]] = {}

        def embed_sync(self, texts: list[str]) -> list[list[float]]:
            missing = [t for t in dict.fromkeys(texts) if t not in self.vectors]
            if missing:
                self.vectors.update(zip(missing, self.inner.embed_sync(missing), strict=True))
            return [self.vectors[t] for t in texts]

    sizes = (10, 40, 100)
    hashing = CachedEmbedder(HashingEmbedder())
    backend = EdgeBackend.open(work / "similar")
    out: dict[str, Any] = {"calls": calls}
    try:
        await backend.create_collection("memories", hashing.dim)
        # 100,000 background points of other users, then the measured users' real memories
        bg, bg_users, bg_ids = _data(100_000, seed=3)
        for i in range(0, len(bg_ids), 1024):
            await backend.upsert(
                "memories",
                [Point(bg_ids[i + j], _payload(bg_users[i + j]), v) for j, v in enumerate(bg[i : i + 1024].tolist())],
            )
        index = VectorIndex(backend, "memories", hashing)
        for size in sizes:
            texts = _texts(size, size)
            memories = [Memory(str(uuid.uuid4()), "agent", "preference", t, 1) for t in texts]
            vectors = await hashing.embed(texts)
            await backend.upsert(
                "memories",
                [Point(m.memory_id, _payload(f"s{size}"), v) for m, v in zip(memories, vectors, strict=True)],
            )
            tools = MemoryTools(f"s{size}", memories, {}, 40, WorkingMemory())
            variants: list[tuple[str, Any]] = [
                ("scan_hashing", None),
                ("scan_hashing_cached", _Cached(HashingEmbedder())),
            ]
            if minilm is not None:
                variants += [("scan_minilm", minilm), ("scan_minilm_cached", _Cached(minilm))]
            row: dict[str, float] = {}
            for name, embedder in variants:
                tools.embedder = embedder
                tools.similar("warm up the model and the cache", 5)
                n = calls if name != "scan_minilm" else max(5, calls // 20)  # uncached MiniLM is slow
                times = []
                for c in range(n):
                    t = time.perf_counter()
                    tools.similar(f"does the user want metric units, call {c}", 5)
                    times.append(time.perf_counter() - t)
                row[f"{name}_p50_ms"] = round(_pct(times, 50), 3)
            times = []
            for c in range(calls):
                t = time.perf_counter()
                await index.search_similar(f"s{size}", f"does the user want metric units, call {c}", 5)
                times.append(time.perf_counter() - t)
            row["index_hashing_p50_ms"] = round(_pct(times, 50), 3)
            if minilm is not None:
                times = []
                for c in range(max(5, calls // 4)):
                    t = time.perf_counter()
                    minilm.embed_sync([f"does the user want metric units, call {c}"])
                    times.append(time.perf_counter() - t)
                row["minilm_one_query_p50_ms"] = round(_pct(times, 50), 3)
            out[str(size)] = row
            parts = ", ".join(f"{k.removesuffix('_p50_ms')} {v:.3f}" for k, v in row.items())
            say(f"  search_similar, {size:>3} memories per user (p50 ms): {parts}")
    finally:
        await backend.close()
        shutil.rmtree(work / "similar", ignore_errors=True)
    return out


async def run(say: Callable[[str], None], quick: bool, sizes: tuple[int, ...] | None = None) -> dict[str, Any]:
    sizes = sizes or ((10_000, 100_000) if quick else SIZES)
    say(f"-- embedded index: Qdrant Edge at {', '.join(f'{n:,}' for n in sizes)} memories ({DIM} dimensions) --")
    work = Path(tempfile.mkdtemp(prefix="memwright-bench-index-"))
    report: dict[str, Any] = {}
    try:
        for n in sizes:
            started = time.monotonic()
            report[str(n)] = await size_figures(n, work, say, queries=200 if n >= 1_000_000 else 1000)
            report[str(n)]["seconds"] = round(time.monotonic() - started, 1)
        report["search_similar"] = await search_similar_figures(work, say, calls=40 if quick else 200)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return report


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.index", description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", help="memories per measurement, comma-separated (default 10000,100000,1000000)")
    p.add_argument("--quick", action="store_true", help="10,000 and 100,000 only")
    args = p.parse_args()
    sizes = tuple(int(x) for x in args.sizes.split(",")) if args.sizes else None
    report = asyncio.run(run(lambda line: print(line, flush=True), args.quick, sizes))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
