"""The start-of-turn read, cached: each user's rendered context block (with its token estimate
and both response bodies), kept per api process under the user's memory-set version.

The version is PostgreSQL's (migration 0004, `memories.memory_set_version`): moved at commit by
every insert, update or delete of one of the user's memories, whichever path made it, and never
given out twice. So a cached block is used only when a one-row SELECT says its version is still
the user's, in every api process at once, and the ETag is a function of that version alone: a
conditional GET is answered 304 without reading or rendering a single preview.

An entry is keyed by user id and checked against it (one user's block is never another's); the
cache holds at most `capacity` users, least recently used out first.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import asyncpg
from aiohttp import web
from memwright.services.api import context
from memwright.store import memories


def etag(user_id: str, set_version: int) -> str:
    """The context's ETag: the block's format, the user and the memory-set version (hashed, so the
    shared counter behind the version says nothing about other users' writes)."""
    digest = hashlib.sha256(f"{context.BLOCK_FORMAT}:{user_id}:{set_version}".encode()).hexdigest()[:32]
    return f'"{digest}"'


def not_modified(if_none_match: str | None, current: str) -> bool:
    """Whether an If-None-Match header names the current ETag (a list, W/ and * as RFC 9110 says)."""
    if not if_none_match:
        return False
    if if_none_match.strip() == "*":
        return True
    return any(tag.strip().removeprefix("W/") == current for tag in if_none_match.split(","))


@dataclass(frozen=True)
class RenderedContext:
    """One user's block at one memory-set version, and both answers built from it."""

    user_id: str
    set_version: int
    etag: str
    memory_count: int
    token_estimate: int
    json_body: bytes
    text_body: bytes

    def response(self, fmt: str) -> web.Response:
        headers = {"ETag": self.etag, "X-Token-Estimate": str(self.token_estimate)}
        if fmt == "text":
            return web.Response(body=self.text_body, content_type="text/plain", charset="utf-8", headers=headers)
        return web.Response(body=self.json_body, content_type="application/json", charset="utf-8", headers=headers)


def render(user_id: str, set_version: int, previews: list[dict[str, Any]]) -> RenderedContext:
    """Render the block once: the text, its token estimate and the JSON answer."""
    block = context.render_block(user_id, previews)
    tokens = context.estimate_tokens(block)
    path = context.memory_path(user_id)
    document = {
        "user_id": user_id,
        "memory_count": len(previews),
        "block": block,
        "token_estimate": tokens,
        "token_estimate_method": context.TOKEN_ESTIMATE_METHOD,
        "fetch": {"memory": path, "history": path + "/history"},
    }
    return RenderedContext(
        user_id=user_id,
        set_version=set_version,
        etag=etag(user_id, set_version),
        memory_count=len(previews),
        token_estimate=tokens,
        json_body=json.dumps(document).encode(),
        text_body=block.encode(),
    )


class ContextCache:
    """At most `capacity` users' rendered blocks, one (the newest seen) per user, LRU."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[str, RenderedContext] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def holds(self, user_id: str) -> bool:
        return user_id in self._entries

    def get(self, user_id: str, set_version: int) -> RenderedContext | None:
        """The user's block if it was rendered at exactly this version, else None."""
        entry = self._entries.get(user_id)
        if entry is None or entry.user_id != user_id or entry.set_version != set_version:
            return None
        self._entries.move_to_end(user_id)
        return entry

    def put(self, entry: RenderedContext) -> RenderedContext:
        if self.capacity <= 0:
            return entry
        held = self._entries.get(entry.user_id)
        if held is not None and held.set_version > entry.set_version:
            return entry  # a slower reader's older version never replaces a newer one
        self._entries[entry.user_id] = entry
        self._entries.move_to_end(entry.user_id)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
        return entry


class VersionChecks:
    """The cheap check, coalesced. Checks go to PostgreSQL in batches, as ONE statement each (a
    primary-key probe per user), read by at most `readers` tasks that each hold a pooled connection
    while checks keep coming: a check that arrives while the readers' statements are in flight waits
    for the next one, with every other check that arrived meanwhile. Alone, a check is one statement
    as before; under load one round trip serves a batch, and the pool's reset query runs once per busy
    spell instead of once per check. Every answer is read after its request arrived."""

    def __init__(self, pool: asyncpg.Pool, readers: int = 2) -> None:
        self._pool = pool
        self._readers_max = readers
        self._waiting: dict[str, list[asyncio.Future[int]]] = {}
        self._readers: set[asyncio.Task[None]] = set()
        self._starting: asyncio.Task[None] | None = None  # a reader on its way: it takes all that waits

    async def version(self, user_id: str) -> int:
        answer: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(user_id, []).append(answer)
        self._start_reader()
        return await answer

    def _start_reader(self) -> None:
        if self._waiting and self._starting is None and len(self._readers) < self._readers_max:
            reader = self._starting = asyncio.ensure_future(self._read_while_waiting())
            self._readers.add(reader)
            reader.add_done_callback(self._reader_done)

    def _reader_done(self, reader: asyncio.Task[None]) -> None:
        self._readers.discard(reader)
        if self._starting is reader:
            self._starting = None
        self._start_reader()  # checks that came while it released its connection

    async def _read_while_waiting(self) -> None:
        me = asyncio.current_task()
        try:
            async with self._pool.acquire() as conn:
                while self._waiting:
                    batch, self._waiting = self._waiting, {}
                    if self._starting is me:
                        self._starting = None  # from now on a check that comes may start a second reader
                    await self._answer(conn, batch)
        except (Exception, asyncio.CancelledError) as exc:  # PostgreSQL away, or the api stopping
            if self._readers == {me}:  # no other reader will take what waits: it gets this error
                batch, self._waiting = self._waiting, {}
                _settle(batch, exc)
            if isinstance(exc, asyncio.CancelledError):
                raise

    @staticmethod
    async def _answer(conn: asyncpg.Connection, batch: dict[str, list[asyncio.Future[int]]]) -> None:
        try:
            versions = await memories.memory_set_versions(conn, list(batch))
        except (Exception, asyncio.CancelledError) as exc:  # every request of the batch gets the error
            _settle(batch, exc)
            raise
        for user_id, answers in batch.items():
            for answer in answers:
                if not answer.done():  # a request given up on (cancelled) is skipped
                    answer.set_result(versions[user_id])


def _settle(batch: dict[str, list[asyncio.Future[int]]], exc: BaseException) -> None:
    for answers in batch.values():
        for answer in answers:
            if not answer.done():
                if isinstance(exc, asyncio.CancelledError):  # the api is stopping
                    answer.cancel()
                else:
                    answer.set_exception(exc)


class ContextReads:
    """Everything the context handler keeps per api process: the cache and the coalesced check."""

    def __init__(self, pool: asyncpg.Pool, capacity: int) -> None:
        self.cache = ContextCache(capacity)
        self.checks = VersionChecks(pool)


CONTEXT_READS = web.AppKey("context_reads", ContextReads)
