"""memwright.client: the api and ingest from Python, async (`MemwrightClient`) or sync (`Memwright`).

The two-call turn: `await client.context(user)` at the start of the turn (the block to insert),
`await client.send(user, message_id, conversation_id, text)` with the user's turn. Then, for
"why": `memory()` (full text and receipts), `history()`, `hypotheses()`, and `message_status()`
for what came of one message.

- Typed results: frozen dataclasses; `raw` keeps the server's JSON for fields added later.
- Timeouts: `timeout_s` per attempt (connect, send, read).
- Retries on 429 and 503 with jittered exponential backoff (`backoff_s` doubling up to
  `backoff_max_s`, each delay drawn from its upper half), honouring the server's Retry-After
  (header, or `retry_after_s` in ingest's body); a Retry-After over `max_retry_after_s` is not
  waited for. Connection errors and timeouts are retried only for requests that are safe to repeat
  (reads, and signals, which are idempotent on their message ids).
- `context()` sends the last ETag it saw for the user in If-None-Match: an unchanged block costs
  a 304 with no body, and the client returns the block it kept (`not_modified=True`).
- Every refusal raises `MemwrightError` with the HTTP status and the server's reason.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote

import aiohttp

RETRY_STATUSES = frozenset({429, 503})
T = TypeVar("T")


class MemwrightError(Exception):
    """The server refused (status and its reason), or could not be reached (status None)."""

    def __init__(self, status: int | None, reason: str, body: Any = None) -> None:
        super().__init__(f"{status}: {reason}" if status is not None else reason)
        self.status = status
        self.reason = reason
        self.body = body


# ---- results ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Context:
    """The start-of-turn block. `not_modified`: the server answered 304 and this is the kept block."""

    user_id: str
    block: str
    memory_count: int
    token_estimate: int
    etag: str
    not_modified: bool = False
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class Preview:
    id: str
    preview: str
    author: str
    kind: str
    version: int
    updated_at: str


@dataclass(frozen=True)
class Receipt:
    message_id: str
    conversation_id: str
    project_id: str | None
    text: str
    at: str


@dataclass(frozen=True)
class Memory:
    id: str
    text: str
    author: str
    kind: str
    version: int
    created_at: str
    updated_at: str
    receipts: tuple[Receipt, ...]
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class AuditEntry:
    action: str
    actor: str
    principal: str | None
    run_id: str | None
    before: Mapping[str, Any] | None
    after: Mapping[str, Any] | None
    evidence: tuple[str, ...]
    reason: str
    at: str
    erased_at: str | None


@dataclass(frozen=True)
class Hypothesis:
    id: str
    statement: str
    count: int
    conversations: tuple[str, ...]
    message_ids: tuple[str, ...]
    first_seen: str
    last_seen: str


@dataclass(frozen=True)
class Deleted:
    id: str
    author: str
    version: int


@dataclass(frozen=True)
class AcceptedMessage:
    user_id: str
    message_id: str
    status: str  # the api path that says what came of it (404 until the sweeper wrote it)


@dataclass(frozen=True)
class Accepted:
    accepted: int
    messages: tuple[AcceptedMessage, ...]


@dataclass(frozen=True)
class StatusMemory:
    memory_id: str
    state: str  # current | deleted_by_user | deleted_by_agent | consolidated
    link: str | None
    preview: str | None
    reason: str | None


@dataclass(frozen=True)
class StatusHypothesis:
    id: str
    statement: str
    count: int
    conversations: int


@dataclass(frozen=True)
class MessageStatus:
    """Where a swept message is (stage swept | curated) and what came of it (outcome)."""

    user_id: str
    message_id: str
    stage: str
    outcome: str  # pending | remembered | held | deleted | forgotten | refused | not_remembered
    summary: str
    memories: tuple[StatusMemory, ...]
    hypotheses: tuple[StatusHypothesis, ...]
    refusals: tuple[str, ...]
    run_refusals: tuple[str, ...]
    notes: tuple[str, ...]
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)


def _memory(d: Mapping[str, Any]) -> Memory:
    receipts = tuple(
        Receipt(r["message_id"], r["conversation_id"], r.get("project_id"), r["text"], r["at"])
        for r in d.get("receipts", [])
    )
    return Memory(
        d["id"], d["text"], d["author"], d["kind"], d["version"], d["created_at"], d["updated_at"], receipts, d
    )


def _status(d: Mapping[str, Any]) -> MessageStatus:
    return MessageStatus(
        d["user_id"],
        d["message_id"],
        d["stage"],
        d["outcome"],
        d["summary"],
        tuple(
            StatusMemory(m["memory_id"], m["state"], m.get("link"), m.get("preview"), m.get("reason"))
            for m in d.get("memories", [])
        ),
        tuple(
            StatusHypothesis(h["id"], h["statement"], h["count"], h["conversations"]) for h in d.get("hypotheses", [])
        ),
        tuple(d.get("refusals", [])),
        tuple(d.get("run_refusals", [])),
        tuple(d.get("notes", [])),
        d,
    )


def _seg(value: str) -> str:
    return quote(value, safe="")


# ---- the async client ------------------------------------------------------------------


class MemwrightClient:
    """Async client for the api (and ingest, for `send`). Use as `async with MemwrightClient(...)`.

    `token`: a bearer JWT, or a function returning one (called per request, so it may refresh).
    `sleep` is the wait between attempts (tests pass one that counts)."""

    def __init__(
        self,
        api_url: str,
        token: str | Callable[[], str],
        ingest_url: str | None = None,
        *,
        timeout_s: float = 10.0,
        retries: int = 3,
        backoff_s: float = 0.2,
        backoff_max_s: float = 5.0,
        max_retry_after_s: float = 30.0,
        context_cache_users: int = 10_000,
        session: aiohttp.ClientSession | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.api_url = api_url.rstrip("/")
        self.ingest_url = ingest_url.rstrip("/") if ingest_url else None
        self._token = token
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.retries = retries
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.max_retry_after_s = max_retry_after_s
        self._session = session
        self._own_session = session is None
        self._sleep = sleep
        self._contexts: OrderedDict[str, Context] = OrderedDict()  # user -> last block and its ETag
        self._context_cache_users = context_cache_users

    async def __aenter__(self) -> MemwrightClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session

    def _auth(self) -> dict[str, str]:
        token = self._token() if callable(self._token) else self._token
        return {"Authorization": f"Bearer {token}"}

    def _backoff(self, attempt: int) -> float:
        cap = min(self.backoff_max_s, self.backoff_s * 2**attempt)
        return random.uniform(cap / 2, cap)  # jittered, bounded

    @staticmethod
    def _retry_after(response: aiohttp.ClientResponse, body: Any) -> float | None:
        header = response.headers.get("Retry-After")
        if header is not None:
            try:
                return max(0.0, float(header))
            except ValueError:
                return None  # an HTTP date: fall back to the backoff
        if isinstance(body, dict) and isinstance(body.get("retry_after_s"), int | float):
            return max(0.0, float(body["retry_after_s"]))
        return None

    async def _request(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
        idempotent: bool,
        ok: tuple[int, ...] = (200,),
    ) -> tuple[int, Any, Mapping[str, str]]:
        """(status, decoded body, headers) of the first answer in `ok`; MemwrightError otherwise."""
        attempt = 0
        while True:
            try:
                async with self._http().request(
                    method,
                    url,
                    json=json,
                    params=params,
                    headers={**self._auth(), **(headers or {})},
                    timeout=self.timeout,
                ) as r:
                    body: Any = await r.json() if r.content_type == "application/json" else await r.text()
                    if r.status in ok:
                        return r.status, body, r.headers
                    reason = body.get("error", str(body)) if isinstance(body, dict) else (body or r.reason or "")
                    error = MemwrightError(r.status, str(reason), body)
                    # a 503 from a proxy may come after the request was served: repeat only what is safe
                    retryable = r.status == 429 or (r.status in RETRY_STATUSES and idempotent)
                    if not retryable or attempt >= self.retries:
                        raise error
                    wait = self._retry_after(r, body)
                    if wait is not None and wait > self.max_retry_after_s:
                        raise error  # the server asks for longer than this client waits
                    delay = self._backoff(attempt) if wait is None else wait + random.uniform(0, self.backoff_s)
            except (aiohttp.ClientConnectionError, TimeoutError) as exc:
                if not idempotent or attempt >= self.retries:
                    what = "timed out" if isinstance(exc, TimeoutError) else f"failed: {exc}"
                    raise MemwrightError(None, f"{method} {url} {what}") from exc
                delay = self._backoff(attempt)
            attempt += 1
            await self._sleep(delay)

    def _user(self, user_id: str, *rest: str) -> str:
        return "/".join([f"{self.api_url}/v1/users/{_seg(user_id)}", *map(_seg, rest)])

    # ---- reads -------------------------------------------------------------------------

    async def context(self, user_id: str) -> Context:
        """The start-of-turn block; a 304 (nothing changed since the last call) returns the kept block."""
        kept = self._contexts.get(user_id)
        headers = {"If-None-Match": kept.etag} if kept else {}
        status, body, response_headers = await self._request(
            "GET", self._user(user_id, "context"), headers=headers, idempotent=True, ok=(200, 304)
        )
        if status == 304 and kept is not None:
            self._contexts.move_to_end(user_id)
            return Context(kept.user_id, kept.block, kept.memory_count, kept.token_estimate, kept.etag, True, kept.raw)
        fresh = Context(
            body["user_id"],
            body["block"],
            body["memory_count"],
            body["token_estimate"],
            response_headers.get("ETag", ""),
            False,
            body,
        )
        self._contexts[user_id] = fresh
        self._contexts.move_to_end(user_id)
        while len(self._contexts) > self._context_cache_users:
            self._contexts.popitem(last=False)
        return fresh

    async def memories(self, user_id: str) -> list[Preview]:
        _, body, _ = await self._request("GET", self._user(user_id, "memories"), idempotent=True)
        return [
            Preview(m["id"], m["preview"], m["author"], m["kind"], m["version"], m["updated_at"])
            for m in body["memories"]
        ]

    async def memory(self, user_id: str, memory_id: str) -> Memory:
        """One memory in full, with its receipts (the user's messages that justify it)."""
        _, body, _ = await self._request("GET", self._user(user_id, "memories", memory_id), idempotent=True)
        return _memory(body)

    async def history(self, user_id: str, memory_id: str) -> list[AuditEntry]:
        _, body, _ = await self._request("GET", self._user(user_id, "memories", memory_id, "history"), idempotent=True)
        return [
            AuditEntry(
                h["action"],
                h["actor"],
                h.get("principal"),
                h.get("run_id"),
                h.get("before"),
                h.get("after"),
                tuple(h.get("evidence", [])),
                h.get("reason", ""),
                h["at"],
                h.get("erased_at"),
            )
            for h in body["history"]
        ]

    async def hypotheses(self, user_id: str) -> list[Hypothesis]:
        _, body, _ = await self._request("GET", self._user(user_id, "hypotheses"), idempotent=True)
        return [
            Hypothesis(
                h["id"],
                h["statement"],
                h["count"],
                tuple(h.get("conversations", [])),
                tuple(h.get("message_ids", [])),
                h.get("first_seen", ""),
                h.get("last_seen", ""),
            )
            for h in body["hypotheses"]
        ]

    async def message_status(self, user_id: str, message_id: str) -> MessageStatus:
        """What came of one message. A 404 (MemwrightError, status 404) means not swept yet: it may still
        be on its way (in Kafka until the user's sweep window closes), or it was never sent."""
        _, body, _ = await self._request("GET", self._user(user_id, "messages", message_id), idempotent=True)
        return _status(body)

    async def export(self, user_id: str) -> dict[str, Any]:
        _, body, _ = await self._request("GET", self._user(user_id, "export"), idempotent=True)
        return dict(body)

    # ---- writes ------------------------------------------------------------------------

    async def remember(self, user_id: str, text: str, kind: str = "preference", reason: str | None = None) -> Memory:
        """Write a memory as the user (author user)."""
        payload: dict[str, Any] = {"text": text, "kind": kind, **({"reason": reason} if reason else {})}
        _, body, _ = await self._request(
            "POST", self._user(user_id, "memories"), json=payload, idempotent=False, ok=(201,)
        )
        return _memory(body)

    async def edit(
        self,
        user_id: str,
        memory_id: str,
        text: str | None = None,
        kind: str | None = None,
        version: int | None = None,
        reason: str | None = None,
    ) -> Memory:
        """Edit a memory the user wrote; with `version`, refused (412) if it moved on."""
        payload = {k: v for k, v in (("text", text), ("kind", kind), ("reason", reason)) if v is not None}
        headers = {"If-Match": f'"{version}"'} if version is not None else {}
        _, body, _ = await self._request(
            "PATCH", self._user(user_id, "memories", memory_id), json=payload, headers=headers, idempotent=False
        )
        return _memory(body)

    async def forget(
        self, user_id: str, memory_id: str, reason: str | None = None, version: int | None = None
    ) -> Deleted:
        """Delete one of the user's memories (the user's own or the agent's)."""
        headers = {"If-Match": f'"{version}"'} if version is not None else {}
        params = {"reason": reason} if reason else None
        _, body, _ = await self._request(
            "DELETE",
            self._user(user_id, "memories", memory_id),
            headers=headers,
            params=params,
            idempotent=False,
        )
        return Deleted(body["id"], body["author"], body["version"])

    async def erase(self, user_id: str) -> dict[str, Any]:
        """Erase everything held about the user (a service token needs admin)."""
        _, body, _ = await self._request("DELETE", self._user(user_id), idempotent=False)
        self._contexts.pop(user_id, None)
        return dict(body)

    # ---- ingest ------------------------------------------------------------------------

    async def send_signals(self, signals: Iterable[Mapping[str, Any]]) -> Accepted:
        """Send signals (schema version 1 objects) to ingest; 202 once Kafka has them all.
        Retried on 429/503 and connection errors: signals are idempotent on their message ids."""
        if self.ingest_url is None:
            raise MemwrightError(None, "no ingest_url: pass MemwrightClient(api_url, token, ingest_url=...)")
        _, body, _ = await self._request(
            "POST", f"{self.ingest_url}/v1/signals", json={"signals": list(signals)}, idempotent=True, ok=(202,)
        )
        return Accepted(
            body["accepted"],
            tuple(AcceptedMessage(m["user_id"], m["message_id"], m["status"]) for m in body.get("messages", [])),
        )

    async def send(
        self,
        user_id: str,
        message_id: str,
        conversation_id: str,
        text: str,
        role: str = "user",
        project_id: str | None = None,
    ) -> Accepted:
        """Send one turn to ingest."""
        signal: dict[str, Any] = {
            "schema_version": 1,
            "user_id": user_id,
            "message_id": message_id,
            "conversation_id": conversation_id,
            "text": text,
            "role": role,
        }
        if project_id is not None:
            signal["project_id"] = project_id
        return await self.send_signals([signal])


# ---- the sync wrapper ------------------------------------------------------------------


class Memwright:
    """The same calls, blocking: a MemwrightClient on an event loop of its own (a daemon thread),
    so it also works where a loop is already running (a notebook, a sync tool inside an async app).
    Close it (or use `with Memwright(...) as client:`) to stop the thread."""

    def __init__(self, api_url: str, token: str | Callable[[], str], ingest_url: str | None = None, **options: Any):
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="memwright-client", daemon=True)
        self._thread.start()
        self.client = MemwrightClient(api_url, token, ingest_url, **options)

    def _run(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result()

    def __enter__(self) -> Memwright:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        if self._loop.is_running():
            self._run(self.client.close())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    def context(self, user_id: str) -> Context:
        return self._run(self.client.context(user_id))

    def memories(self, user_id: str) -> list[Preview]:
        return self._run(self.client.memories(user_id))

    def memory(self, user_id: str, memory_id: str) -> Memory:
        return self._run(self.client.memory(user_id, memory_id))

    def history(self, user_id: str, memory_id: str) -> list[AuditEntry]:
        return self._run(self.client.history(user_id, memory_id))

    def hypotheses(self, user_id: str) -> list[Hypothesis]:
        return self._run(self.client.hypotheses(user_id))

    def message_status(self, user_id: str, message_id: str) -> MessageStatus:
        return self._run(self.client.message_status(user_id, message_id))

    def export(self, user_id: str) -> dict[str, Any]:
        return self._run(self.client.export(user_id))

    def remember(self, user_id: str, text: str, kind: str = "preference", reason: str | None = None) -> Memory:
        return self._run(self.client.remember(user_id, text, kind, reason))

    def edit(self, user_id: str, memory_id: str, **changes: Any) -> Memory:
        return self._run(self.client.edit(user_id, memory_id, **changes))

    def forget(self, user_id: str, memory_id: str, reason: str | None = None, version: int | None = None) -> Deleted:
        return self._run(self.client.forget(user_id, memory_id, reason, version))

    def erase(self, user_id: str) -> dict[str, Any]:
        return self._run(self.client.erase(user_id))

    def send_signals(self, signals: Iterable[Mapping[str, Any]]) -> Accepted:
        return self._run(self.client.send_signals(signals))

    def send(self, user_id: str, message_id: str, conversation_id: str, text: str, **more: Any) -> Accepted:
        return self._run(self.client.send(user_id, message_id, conversation_id, text, **more))
