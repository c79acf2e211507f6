"""The memory console: web pages under /console where a person sees what is remembered about
them and why, and changes it; and where an operator finds a user, their curation runs and the
pipeline at a glance.

Server-rendered HTML (every value through `html.escape`, see `_e`), one stylesheet and one small
script that only enhances (pages work without it). The console is a sub-application with its own
route table (`PAGES`: each route with what it needs) and its own guard, which fails closed like
the api's:
  - sign-in: a token pasted once (or a link whose #token= fragment the script posts) is verified
    like a bearer token and kept in an HttpOnly, SameSite=Strict cookie (Secure over https); the
    cookie holds the token itself, so the api stays stateless and the session ends with the token.
  - every change is a POST carrying a CSRF token (derived from the session token: sha256, so the
    page never exposes the token) and an Origin (or Sec-Fetch-Site) of this host.
  - every {user_id} in a path is checked against the session (Principal.may_access), scopes as on
    the JSON routes; a Content-Security-Policy without inline script or style on every answer.
The reads and writes are the JSON routes' own (memwright.store.*).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import html
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlsplit

import asyncpg
import jwt
import structlog
from aiohttp import web
from memwright import metrics
from memwright.auth import AuthError, Principal, is_user_id_reserved, verify
from memwright.services.api import exports, openapi
from memwright.services.api.console_assets import CSS, JS
from memwright.services.api.limits import RequestLimits
from memwright.settings import ApiSettings
from memwright.store import erasure, memories, overview, status, user_writes

log = structlog.get_logger()
PREFIX = "/console"
COOKIE = "memwright_console"
PAGES = web.AppKey("console_pages", dict)  # handler -> Needs, the console's route table
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # no-referrer would make browsers send "Origin: null" with forms
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
USER_ID = re.compile(openapi.USER_ID_PATTERN.removesuffix("$") + r"\Z")
KIND = re.compile(openapi.KIND_PATTERN.removesuffix("$") + r"\Z")
MESSAGE_ID = re.compile(openapi.MESSAGE_ID_PATTERN.removesuffix("$") + r"\Z")
GRAFANA_DASHBOARDS = (
    ("memwright-overview", "Overview"),
    ("memwright-intake", "Intake"),
    ("memwright-sweeps", "Sweeps and fairness"),
    ("memwright-curation", "Curation and LLM cost"),
    ("memwright-index", "Index convergence"),
)
DONE = {  # the notice after a change: fixed texts, never echoed from the request
    "added": "Your memory was added.",
    "edited": "Your memory was changed.",
    "deleted": "The memory was deleted. It will not be written again from the same messages.",
}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Needs:
    """What a console page needs. public: no session (sign-in, assets). Otherwise a session whose
    token has `scope` (a service token: `service_scope` when set); operator: a service token with admin."""

    public: bool = False
    scope: str | None = None
    service_scope: str | None = None
    operator: bool = False

    def required(self, principal: Principal) -> str | None:
        if self.operator:
            return "admin"
        return self.service_scope if principal.is_service and self.service_scope else self.scope


class PageError(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


SESSION = web.RequestKey("console_session", str)
PRINCIPAL = web.RequestKey("console_principal", Principal)


def csrf_token(session_token: str) -> str:
    """The CSRF token of a session: only a page of this session can know it (the cookie is HttpOnly)."""
    return hashlib.sha256(b"memwright-console-csrf\x00" + session_token.encode()).hexdigest()


# ---- html ------------------------------------------------------------------------------


def _e(value: object) -> str:
    """Every value that reaches a page passes here: text and attribute safe (quotes too)."""
    return html.escape(str(value), quote=True)


def _when(value: datetime | str | None) -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return _e(value)
    return _e(value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC"))


def _user_path(user_id: str, tail: str = "") -> str:
    return f"{PREFIX}/users/{quote(user_id, safe='')}{tail}"


def _page(request: web.Request, title: str, body: str, status: int = 200) -> web.Response:
    principal = request.get(PRINCIPAL)
    session = request.get(SESSION)
    account = ""
    if principal is not None and session is not None:
        home = f"{PREFIX}/ops" if principal.is_service else _user_path(principal.subject)
        account = (
            f'<nav aria-label="account"><a href="{_e(home)}">Home</a> '
            f'<span class="who">signed in as <strong>{_e(principal.subject)}</strong></span> '
            f'<form method="post" action="{PREFIX}/sign-out" class="inline">{_csrf_field(session)}'
            '<button type="submit" class="link">Sign out</button></form></nav>'
        )
    document = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)} · memwright</title>"
        f'<link rel="stylesheet" href="{PREFIX}/static/console.css">'
        f'<script src="{PREFIX}/static/console.js" defer></script></head><body>'
        '<a class="skip" href="#main">Skip to content</a>'
        f'<header><span class="brand">memwright</span>{account}</header>'
        f'<main id="main"><h1>{_e(title)}</h1>{body}</main></body></html>'
    )
    return web.Response(text=document, status=status, content_type="text/html", charset="utf-8")


def _csrf_field(session: str) -> str:
    return f'<input type="hidden" name="csrf" value="{_e(csrf_token(session))}">'


def _form(request: web.Request, action: str, inner: str, button: str, cls: str = "") -> str:
    css = f' class="{cls}"' if cls else ""
    return (
        f'<form method="post" action="{_e(action)}"{css}>{_csrf_field(request[SESSION])}{inner}'
        f'<button type="submit">{_e(button)}</button></form>'
    )


def _table(caption: str, headers: Iterable[str], rows: list[list[str]], empty: str) -> str:
    if not rows:
        return f'<p class="empty">{_e(empty)}</p>'
    headers = list(headers)
    head = "".join(f'<th scope="col">{_e(h)}</th>' for h in headers)
    body = "".join(
        "<tr>"
        + "".join(f'<td data-label="{_e(h)}">{cell}</td>' for h, cell in zip(headers, row, strict=True))
        + "</tr>"
        for row in rows
    )
    return (
        f'<div class="scroll"><table><caption>{_e(caption)}</caption><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )


def _times(n: object) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{_e(n)} times") if isinstance(n, int) else _e(n)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _author(author: str) -> str:
    return '<span class="badge you">you</span>' if author == "user" else '<span class="badge agent">inferred</span>'


def _notice(request: web.Request) -> str:
    done = DONE.get(request.query.get("done", ""))
    return f'<p class="notice" role="status">{_e(done)}</p>' if done else ""


def _see_other(location: str) -> web.Response:
    return web.Response(status=303, headers={"Location": location})


def _error_page(request: web.Request, status: int, reason: str) -> web.Response:
    body = f'<p class="error" role="alert">{_e(reason)}</p><p><a href="{PREFIX}/">Go to the console\'s start</a></p>'
    return _page(request, f"{status}: that did not work", body, status)


def _sign_in_page(request: web.Request, reason: str = "", status: int = 200) -> web.Response:
    alert = f'<p class="error" role="alert">{_e(reason)}</p>' if reason else ""
    body = (
        f"{alert}<p>Paste the token you were given (a JWT). It is checked once and kept in a cookie that "
        "scripts cannot read; sign out or let it expire to end the session.</p>"
        f'<form method="post" action="{PREFIX}/sign-in" id="sign-in">'
        '<label for="token">Token</label>'
        '<input type="password" id="token" name="token" autocomplete="off" required spellcheck="false">'
        '<button type="submit">Sign in</button></form>'
    )
    return _page(request, "Sign in to the memory console", body, status)


# ---- input -----------------------------------------------------------------------------


async def _form_fields(request: web.Request, settings: ApiSettings, fields: tuple[str, ...]) -> dict[str, str]:
    try:
        posted = await asyncio.wait_for(request.post(), settings.body_read_timeout_s)
    except TimeoutError:
        raise PageError(408, "the form did not arrive in time; send it again") from None
    except (UnicodeDecodeError, LookupError, ValueError):  # a charset aiohttp does not know, bytes that are not it
        raise PageError(400, "the form is not valid UTF-8 text; send it from the console's own page") from None
    values: dict[str, str] = {}
    for name in fields:
        value = posted.get(name, "")
        if not isinstance(value, str):
            raise PageError(400, f"{name} must be text, not a file")
        values[name] = value
    return values


def _text(value: str, name: str, max_chars: int) -> str:
    text = value.strip()
    if not text:
        raise PageError(400, f"{name} must not be empty")
    if len(text) > max_chars:
        raise PageError(400, f"{name} is {len(text)} characters; at most {max_chars}")
    if "\x00" in text:
        raise PageError(400, f"{name} must not contain NUL characters")
    return text


def _kind(value: str) -> str:
    kind = value.strip() or "preference"
    if not KIND.match(kind):
        raise PageError(400, "kind must be 1-32 lowercase letters, digits, _ or -, starting with a letter")
    return kind


def _memory_id(request: web.Request) -> uuid.UUID:
    try:
        return uuid.UUID(request.match_info["memory_id"])
    except ValueError:
        raise PageError(404, "no such memory: its id is not a UUID") from None


def _same_origin(request: web.Request) -> bool:
    """A change must come from a page of this host (login CSRF included): the Origin the browser
    sends with every POST, or, without one, its Sec-Fetch-Site."""
    origin = request.headers.get("Origin")
    if origin is not None:
        return origin != "null" and urlsplit(origin).netloc == request.host
    return request.headers.get("Sec-Fetch-Site", "same-origin") == "same-origin"


# ---- the console -----------------------------------------------------------------------


def build(settings: ApiSettings, pool: asyncpg.Pool, limits: RequestLimits) -> web.Application:
    pages: dict[Handler, Needs] = {}

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.monotonic()
        resource = request.match_info.route.resource
        route = resource.canonical if resource else f"{PREFIX}/unmatched"
        try:
            response = await _guarded(request, handler)
        except AuthError as exc:
            if exc.status == 401:  # no session, or its token no longer verifies: sign in (again)
                response = _sign_in_page(request, exc.reason, 401)
                response.del_cookie(COOKIE, path=PREFIX)
            else:
                response = _error_page(request, exc.status, exc.reason)
        except PageError as exc:
            response = _error_page(request, exc.status, exc.reason)
        except user_writes.WriteRefused as exc:
            response = _error_page(request, exc.status, exc.reason)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            response = _error_page(request, exc.status, exc.reason)
            if "Allow" in exc.headers:
                response.headers["Allow"] = exc.headers["Allow"]
        except Exception:
            log.exception("console_request_failed", route=route, method=request.method)
            response = _error_page(request, 500, "internal error; the api log has the details")
        for name, value in SECURITY_HEADERS.items():  # the stylesheet and script keep their own Cache-Control
            response.headers.setdefault(name, value)
        metrics.API_REQUESTS.labels(route, str(response.status)).inc()
        metrics.API_LATENCY.labels(route).observe(time.monotonic() - started)
        return response

    async def _guarded(request: web.Request, handler: Handler) -> web.StreamResponse:
        match = request.match_info
        if match.http_exception is not None:
            raise match.http_exception
        needs = pages.get(match.handler)
        if needs is None:  # fail closed: never serve a page without a declared access
            raise PageError(403, "this page has no access policy")
        if request.method == "POST" and not _same_origin(request):
            raise PageError(403, "a change must come from a page of this console (cross-site request refused)")
        if needs.public:
            return await handler(request)
        token = request.cookies.get(COOKIE)
        if not token:
            raise AuthError(401, "sign in first")
        principal = verify(settings, f"Bearer {token}")  # 401: expired, bad signature, ...
        refused = limits.take(principal, match.get("user_id"))
        if refused is not None:
            raise PageError(429, f"{refused.reason}; wait a moment and reload")
        scope = needs.required(principal)
        if needs.operator and not principal.is_service:
            raise AuthError(403, "the operator pages need a service token with the admin scope")
        if scope is not None and not principal.has_scope(scope):
            raise AuthError(403, f"your token lacks the scope {scope}")
        if "user_id" in match:
            user_id = match["user_id"]
            if not USER_ID.match(user_id) or is_user_id_reserved(user_id):
                raise PageError(400, "that is not a user id")
            if not principal.may_access(user_id):  # tenant isolation
                raise AuthError(403, "your token may not see this user's memories")
        request[SESSION] = token
        request[PRINCIPAL] = principal
        if request.method == "POST":
            posted = await _form_fields(request, settings, ("csrf",))
            if not hmac.compare_digest(posted["csrf"], csrf_token(token)):
                raise PageError(403, "the form is stale or not from this console (CSRF check); reload and try again")
        return await handler(request)

    # ---- public ------------------------------------------------------------------------

    async def start(request: web.Request) -> web.Response:
        token = request.cookies.get(COOKIE)
        if not token:
            return _sign_in_page(request)
        try:
            principal = verify(settings, f"Bearer {token}")
        except AuthError as exc:
            response = _sign_in_page(request, exc.reason)
            response.del_cookie(COOKIE, path=PREFIX)
            return response
        return _see_other(_home(principal))

    def _home(principal: Principal) -> str:
        return f"{PREFIX}/ops" if principal.is_service else _user_path(principal.subject)

    async def sign_in(request: web.Request) -> web.Response:
        token = (await _form_fields(request, settings, ("token",)))["token"].strip()
        try:
            principal = verify(settings, f"Bearer {token}")
        except AuthError as exc:
            return _sign_in_page(request, f"That token was not accepted: {exc.reason}", 401)
        if principal.is_service and not principal.has_scope("admin"):
            return _sign_in_page(request, "A service token needs the admin scope to use the console.", 403)
        expires = jwt.decode(token, options={"verify_signature": False})["exp"]
        response = _see_other(_home(principal))
        response.set_cookie(
            COOKIE,
            token,
            path=PREFIX,
            max_age=max(1, int(expires - time.time())),
            httponly=True,
            samesite="Strict",
            secure=request.secure or request.headers.get("X-Forwarded-Proto") == "https",
        )
        log.info("console_signed_in", subject=principal.subject)
        return response

    async def sign_out(request: web.Request) -> web.Response:
        response = _see_other(f"{PREFIX}/")
        response.del_cookie(COOKIE, path=PREFIX)
        return response

    async def stylesheet(request: web.Request) -> web.Response:
        return web.Response(text=CSS, content_type="text/css", headers={"Cache-Control": "max-age=3600"})

    async def script(request: web.Request) -> web.Response:
        return web.Response(text=JS, content_type="text/javascript", headers={"Cache-Control": "max-age=3600"})

    # ---- a user's memories -------------------------------------------------------------

    async def user_home(request: web.Request) -> web.Response:
        user_id = request.match_info["user_id"]
        items, _ = await memories.list_previews(pool, user_id)
        watching = await memories.hypotheses(pool, user_id)
        used = await overview.budget(pool, user_id, settings.memory_budget)
        mine = [m for m in items if m["author"] == "user"]
        inferred = [m for m in items if m["author"] != "user"]

        def listing(ms: list[dict[str, Any]], empty: str) -> str:
            if not ms:
                return f'<p class="empty">{_e(empty)}</p>'
            rows = "".join(
                f'<li class="memory"><p class="meta">{_author(m["author"])} <span class="kind">{_e(m["kind"])}</span>'
                f' <span class="when">changed {_when(m["updated_at"])}</span></p>'
                f'<p class="text">{_e(m["preview"])}</p>'
                f'<a href="{_e(_user_path(user_id, "/memories/" + m["id"]))}">'
                f'Why, history and changes<span class="sr"> for: {_e(m["preview"])}</span></a></li>'
                for m in ms
            )
            return f'<ul class="memories">{rows}</ul>'

        hypotheses = "".join(
            f'<li><p class="text">{_e(h.get("statement", ""))}</p><p class="meta">seen {_times(h.get("count", 0))}, '
            f"in {_count(len(h.get('conversations', [])), 'conversation')}; last {_when(h.get('last_seen'))}</p></li>"
            for h in watching
        )
        add = _form(
            request,
            _user_path(user_id, "/memories"),
            '<label for="new-text">Something to remember</label>'
            f'<textarea id="new-text" name="text" rows="2" maxlength="{settings.max_memory_chars}" required></textarea>'
            '<label for="new-kind">Kind</label>'
            '<input id="new-kind" name="kind" value="preference" list="kinds" pattern="[a-z][a-z0-9_-]{0,31}">'
            '<datalist id="kinds"><option value="preference"><option value="fact"><option value="goal">'
            '<option value="constraint"></datalist>',
            "Add memory",
            "stack",
        )
        body = (
            f"{_notice(request)}"
            f'<p class="budget">Inferred by the agent: <strong>{used["agent_written"]} of {used["cap"]}</strong> '
            f"(its budget; when full it must merge or drop one, never silently). Written by you: "
            f"<strong>{used['user_written']} of {settings.user_memory_limit}</strong>.</p>"
            '<section aria-labelledby="h-inferred">'
            f'<h2 id="h-inferred">Inferred from your messages ({len(inferred)})</h2>'
            f"{listing(inferred, 'Nothing inferred yet.')}</section>"
            f'<section aria-labelledby="h-mine"><h2 id="h-mine">Written by you ({len(mine)})</h2>'
            f"{listing(mine, 'You have not written any memory.')}{add}</section>"
            f'<section aria-labelledby="h-watch"><h2 id="h-watch">Still watching ({len(watching)})</h2>'
            "<p>Things seen once or twice: the agent keeps them only if they come up again.</p>"
            + (f'<ul class="watching">{hypotheses}</ul>' if watching else '<p class="empty">Nothing.</p>')
            + "</section>"
            f'<section aria-labelledby="h-msg"><h2 id="h-msg">What came of a message?</h2>'
            f'<form method="get" action="{_e(_user_path(user_id, "/messages"))}" class="row">'
            '<label for="message-id">Message id</label><input id="message-id" name="message_id" required>'
            '<button type="submit">Look it up</button></form></section>'
            f'<section aria-labelledby="h-data"><h2 id="h-data">Your data</h2><p>'
            f'<a href="{_e(_user_path(user_id, "/export"))}" download>Download everything (JSON)</a> · '
            f'<a href="{_e(_user_path(user_id, "/erase"))}" class="danger">Erase everything…</a></p></section>'
        )
        return _page(request, f"What memwright remembers about {user_id}", body)

    async def memory_page(request: web.Request) -> web.Response:
        user_id, memory_id = request.match_info["user_id"], _memory_id(request)
        found = await memories.get_with_receipts(pool, user_id, memory_id)
        trail = await memories.history(pool, user_id, memory_id)
        if found is None and not trail:
            raise PageError(404, "no such memory for this user")
        parts = [_notice(request)]
        if found is not None:
            parts.append(
                f'<article class="memory big"><p class="meta">{_author(found["author"])} '
                f'<span class="kind">{_e(found["kind"])}</span> <span class="when">version {found["version"]}, '
                f'changed {_when(found["updated_at"])}</span></p><p class="text">{_e(found["text"])}</p></article>'
            )
        else:
            parts.append('<p class="notice">This memory was deleted; its history stays.</p>')
        why_rows = [
            [
                f"<q>{_e(r['text'])}</q>",
                _e(r["conversation_id"]),
                _when(r["at"]),
                f'<a href="{_e(_user_path(user_id, "/messages?message_id=" + quote(r["message_id"], safe="")))}">'
                f"{_e(r['message_id'])}</a>",
            ]
            for r in (found or {}).get("receipts", [])
        ]
        why_empty = "You wrote it yourself: you are its source." if found and found["author"] == "user" else "None."
        parts.append(
            '<section aria-labelledby="h-why"><h2 id="h-why">Why: the messages behind it</h2>'
            + _table("Messages behind this memory", ("message", "conversation", "when", "status"), why_rows, why_empty)
            + "</section>"
        )
        history_rows = [
            [
                _when(h["at"]),
                _e(h["action"]),
                _e(h["actor"] + (f" ({h['principal']})" if h.get("principal") else "")),
                _e((h.get("after") or {}).get("text", "") if h.get("after") else "—"),
                _e(h.get("reason") or ""),
            ]
            for h in trail
        ]
        parts.append(
            '<section aria-labelledby="h-history"><h2 id="h-history">History</h2>'
            + _table("Every change, oldest first", ("when", "what", "who", "text after", "why"), history_rows, "None.")
            + "</section>"
        )
        if found is not None:
            here = _user_path(user_id, f"/memories/{memory_id}")
            if found["author"] == "user":
                parts.append(
                    '<section aria-labelledby="h-edit"><h2 id="h-edit">Edit</h2>'
                    + _form(
                        request,
                        here + "/edit",
                        f'<input type="hidden" name="version" value="{found["version"]}">'
                        '<label for="edit-text">Text</label>'
                        f'<textarea id="edit-text" name="text" rows="3" maxlength="{settings.max_memory_chars}" '
                        f"required>{_e(found['text'])}</textarea>"
                        '<label for="edit-kind">Kind</label>'
                        f'<input id="edit-kind" name="kind" value="{_e(found["kind"])}">',
                        "Save changes",
                        "stack",
                    )
                    + "</section>"
                )
            label = "Delete this memory" if found["author"] == "user" else "Delete this inferred memory"
            parts.append(
                '<section aria-labelledby="h-delete"><h2 id="h-delete">Delete</h2>'
                + (
                    "<p>The agent will not write it again from the same messages; only something you say "
                    "later may bring it back.</p>"
                    if found["author"] != "user"
                    else ""
                )
                + _form(
                    request,
                    here + "/delete",
                    f'<input type="hidden" name="version" value="{found["version"]}">',
                    label,
                    "danger",
                )
                + "</section>"
            )
        parts.append(f'<p><a href="{_e(_user_path(user_id))}">All memories</a></p>')
        return _page(request, "A memory, and why", "".join(parts))

    def _version(value: str) -> int | None:
        return int(value) if value.isascii() and value.isdigit() and len(value) <= 9 else None  # not "³"

    async def add_memory(request: web.Request) -> web.Response:
        user_id = request.match_info["user_id"]
        posted = await _form_fields(request, settings, ("text", "kind"))
        text = _text(posted["text"], "text", settings.max_memory_chars)
        kind = _kind(posted["kind"])
        async with pool.acquire() as conn:
            await user_writes.create(
                conn,
                user_id,
                text,
                kind,
                request[PRINCIPAL].subject,
                "written in the console",
                settings.user_memory_limit,
            )
        return _see_other(_user_path(user_id, "?done=added"))

    async def edit_memory(request: web.Request) -> web.Response:
        user_id, memory_id = request.match_info["user_id"], _memory_id(request)
        posted = await _form_fields(request, settings, ("text", "kind", "version"))
        text = _text(posted["text"], "text", settings.max_memory_chars)
        kind = _kind(posted["kind"])
        async with pool.acquire() as conn:
            await user_writes.update(
                conn,
                user_id,
                memory_id,
                text,
                kind,
                _version(posted["version"]),  # 412 when it changed since the page was read
                request[PRINCIPAL].subject,
                "edited in the console",
            )
        return _see_other(_user_path(user_id, f"/memories/{memory_id}?done=edited"))

    async def delete_memory(request: web.Request) -> web.Response:
        user_id, memory_id = request.match_info["user_id"], _memory_id(request)
        posted = await _form_fields(request, settings, ("version",))
        async with pool.acquire() as conn:
            await user_writes.delete(
                conn,
                user_id,
                memory_id,
                _version(posted["version"]),
                request[PRINCIPAL].subject,
                "deleted in the console",
            )
        return _see_other(_user_path(user_id, "?done=deleted"))

    async def message_page(request: web.Request) -> web.Response:
        user_id = request.match_info["user_id"]
        message_id = request.query.get("message_id", "").strip()
        if not MESSAGE_ID.match(message_id):
            raise PageError(400, "a message id is 1-128 letters, digits, _ . : @ -, starting with a letter or digit")
        async with pool.acquire() as conn:
            found = await status.message_status(conn, user_id, message_id)
            erased_at = await status.last_erasure(conn, user_id) if found is None else None
        if found is None:
            body = f'<p class="notice">{_e(status.not_swept(message_id, erased_at))}</p>'
        else:
            refusals = [*found["refusals"], *found["run_refusals"]]
            body = (
                f'<p class="outcome"><span class="badge">{_e(found["outcome"])}</span> {_e(found["summary"])}</p>'
                f'<p class="meta">conversation {_e(found["conversation_id"])}, accepted {_when(found["accepted_at"])}, '
                f"{_e(found['stage'])}</p>"
                + "".join(f'<p class="meta">{_e(x)}</p>' for x in [*refusals, *found["notes"]])
            )
            links = [
                f'<li><a href="{_e(_user_path(user_id, "/memories/" + m["memory_id"]))}">'
                f"{_e(m.get('preview') or m['memory_id'])}</a> ({_e(m['state'])})</li>"
                for m in found.get("memories", [])
            ]
            if links:
                body += f"<h2>Memories it is behind</h2><ul>{''.join(links)}</ul>"
        body += f'<p><a href="{_e(_user_path(user_id))}">All memories</a></p>'
        return _page(request, f"Message {message_id}", body)

    async def export_page(request: web.Request) -> web.Response:
        return await exports.download(pool, request.match_info["user_id"])

    async def erase_confirm(request: web.Request) -> web.Response:
        user_id = request.match_info["user_id"]
        body = (
            '<p class="error">This erases every memory, every message, the agent\'s working memory and every run '
            "held about this user. The history keeps only that something was erased, never what. "
            "It cannot be undone.</p>"
            "<p>Download your data first if you want to keep a copy.</p>"
            + _form(
                request,
                _user_path(user_id, "/erase"),
                f'<label for="confirm">Type the user id <strong>{_e(user_id)}</strong> to confirm</label>'
                '<input id="confirm" name="confirm" autocomplete="off" required>',
                "Erase everything",
                "stack danger",
            )
            + f'<p><a href="{_e(_user_path(user_id))}">Cancel</a></p>'
        )
        return _page(request, "Erase everything?", body)

    async def erase(request: web.Request) -> web.Response:
        user_id = request.match_info["user_id"]
        posted = await _form_fields(request, settings, ("confirm",))
        if posted["confirm"].strip() != user_id:
            raise PageError(400, "nothing was erased: type the user id exactly to confirm")
        async with pool.acquire() as conn:
            record = await erasure.erase(conn, user_id, request[PRINCIPAL].subject)
        log.info("user_erased", erasure_id=record["erasure_id"], requested_by=record["requested_by"], via="console")
        counts = "".join(f"<li>{_e(k.replace('_', ' '))}: {_e(v)}</li>" for k, v in record["counts"].items())
        body = (
            f'<p class="notice" role="status">Everything held about {_e(user_id)} was erased at '
            f"{_when(record['erased_at'])}.</p><ul>{counts}</ul>"
            f'<p><a href="{_e(_user_path(user_id))}">Back to the (now empty) memories</a></p>'
        )
        return _page(request, "Erased", body)

    # ---- the operator's pages ----------------------------------------------------------

    def _grafana_links() -> str:
        if not settings.grafana_url:
            return "<p>Set MEMWRIGHT_GRAFANA_URL to link the Grafana dashboards (deploy/grafana/dashboards).</p>"
        base = settings.grafana_url.rstrip("/")
        links = "".join(
            f'<li><a href="{_e(f"{base}/d/{uid}")}">Grafana: {_e(title)}</a></li>' for uid, title in GRAFANA_DASHBOARDS
        )
        return f"<ul>{links}</ul>"

    async def ops_home(request: web.Request) -> web.Response:
        q = request.query.get("q", "").strip()[:128]
        glance = await overview.pipeline(pool)
        cells = (
            ("users waiting", f"{glance['users_waiting']}"),
            ("oldest waiting", f"{glance['oldest_waiting_s']:.0f} s"),
            ("outbox depth", f"{glance['outbox_depth']}"),
            ("oldest in outbox", f"{glance['outbox_oldest_s']:.0f} s"),
            (f"runs ({glance['hours']} h)", f"{glance['runs']}"),
            (f"failed runs ({glance['hours']} h)", f"{glance['failed_runs']}"),
        )
        tiles = "".join(f'<div class="tile"><dt>{_e(k)}</dt><dd>{_e(v)}</dd></div>' for k, v in cells)
        found = ""
        if q:
            users = await overview.find_users(pool, q)
            rows = [
                [
                    f'<a href="{_e(PREFIX + "/ops/users/" + quote(u["user_id"], safe=""))}">{_e(u["user_id"])}</a>',
                    _e(u["memories"]),
                    _when(u["waiting_since"]) if u["waiting_since"] else "no",
                ]
                for u in users
            ]
            found = _table(
                f"Users whose id starts with {q}", ("user", "memories", "waiting since"), rows, "No user found."
            )
        body = (
            '<section aria-labelledby="h-glance"><h2 id="h-glance">Pipeline at a glance</h2>'
            f'<dl class="tiles">{tiles}</dl>'
            f"{_grafana_links()}</section>"
            '<section aria-labelledby="h-find"><h2 id="h-find">Find a user</h2>'
            f'<form method="get" action="{PREFIX}/ops" class="row"><label for="q">User id starts with</label>'
            f'<input id="q" name="q" value="{_e(q)}" required><button type="submit">Find</button></form>'
            f"{found}</section>"
        )
        return _page(request, "Operator console", body)

    async def ops_user(request: web.Request) -> web.Response:
        user_id = request.match_info["user_id"]
        runs = await overview.user_runs(pool, user_id)
        used = await overview.budget(pool, user_id, settings.memory_budget)
        rows = [
            [
                _when(r["started_at"]),
                _e(r["status"]) + (f'<br><span class="error">{_e(r["error"])}</span>' if r["error"] else ""),
                _e(r["policy"]),
                _e(r["messages_seen"]),
                _e(r["changes"]),
                "<br>".join(_e(x) for x in r["refusals"]) or "none",
            ]
            for r in runs
        ]
        body = (
            f'<p class="budget">Inferred memories: <strong>{used["agent_written"]} of {used["cap"]}</strong>; '
            f"written by the user: {used['user_written']}.</p>"
            f'<p><a href="{_e(_user_path(user_id))}">The memories of {_e(user_id)}, as the user sees them</a></p>'
            '<section aria-labelledby="h-runs"><h2 id="h-runs">Curation runs, newest first</h2>'
            + _table(
                "The agent's runs for this user",
                ("started", "status", "policy", "messages", "changes", "refusals"),
                rows,
                "No runs yet.",
            )
            + "<p>Model tokens are counted per policy in Prometheus (memwright_curator_llm_tokens_total), "
            "not per run.</p></section>"
        )
        return _page(request, f"Runs of {user_id}", body)

    # ---- the console's route table -----------------------------------------------------

    public = Needs(public=True)
    read, write = Needs(scope="memories:read"), Needs(scope="memories:write")
    operator = Needs(operator=True)
    routes: list[tuple[str, str, Handler, Needs]] = [
        ("GET", "", start, public),  # /console
        ("GET", "/", start, public),
        ("GET", "/sign-in", start, public),
        ("POST", "/sign-in", sign_in, public),
        ("POST", "/sign-out", sign_out, Needs()),
        ("GET", "/static/console.css", stylesheet, public),
        ("GET", "/static/console.js", script, public),
        ("GET", "/users/{user_id}", user_home, read),
        ("POST", "/users/{user_id}/memories", add_memory, write),
        ("GET", "/users/{user_id}/memories/{memory_id}", memory_page, read),
        ("POST", "/users/{user_id}/memories/{memory_id}/edit", edit_memory, write),
        ("POST", "/users/{user_id}/memories/{memory_id}/delete", delete_memory, write),
        ("GET", "/users/{user_id}/messages", message_page, read),
        ("GET", "/users/{user_id}/export", export_page, Needs(scope="memories:read", service_scope="admin")),
        ("GET", "/users/{user_id}/erase", erase_confirm, Needs(scope="memories:write", service_scope="admin")),
        ("POST", "/users/{user_id}/erase", erase, Needs(scope="memories:write", service_scope="admin")),
        ("GET", "/ops", ops_home, operator),
        ("GET", "/ops/users/{user_id}", ops_user, operator),
    ]
    console = web.Application(middlewares=[guard])
    console[PAGES] = pages
    for method, path, handler, needs in routes:
        pages[handler] = needs
        if method == "GET":
            console.router.add_get(path, handler)
        else:
            console.router.add_route(method, path, handler)
    return console


def mount(app: web.Application, settings: ApiSettings, pool: asyncpg.Pool, limits: RequestLimits) -> None:
    """Serve the console under /console of the api (its guard, not the api's, admits its requests)."""
    app.add_subapp(PREFIX, build(settings, pool, limits))


def route_access(app: web.Application) -> dict[tuple[str, str], Needs]:
    """(method, path) -> Needs of every console route, for the route-table security test."""
    for resource in app.router.resources():
        sub = resource.get_info().get("app") if isinstance(resource, web.PrefixedSubAppResource) else None
        if sub is not None and PAGES in sub:
            table = sub[PAGES]
            return {(r.method, r.resource.canonical): table[r.handler] for r in sub.router.routes() if r.resource}
    raise LookupError("the console is not mounted on this app")
