"""The OpenAPI 3.1 document of the api, built from the settings (limits show in the schemas)
and served at GET /v1/openapi.json. tests/unit/test_api_openapi.py checks that it and the
route table describe the same operations."""

from __future__ import annotations

from typing import Any

from memwright.settings import ApiSettings
from memwright.store.memories import PREVIEW_CHARS
from memwright.store.status import MEMORY_STATES, OUTCOMES
from memwright.store.user_writes import KIND_PATTERN, REASON_MAX

USER_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$"
NO_NUL = r"^[^\u0000]*$"  # PostgreSQL text cannot hold NUL
SOME_TEXT = r"^[^\u0000]*[^\s\u0000][^\u0000]*$"  # and something other than white space
IF_MATCH_PATTERN = r'^(\*|(W/)?"?[1-9][0-9]{0,8}"?)$'
MESSAGE_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$"  # the signal schema's id (schemas/signal.v1.json)


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def _json(schema: dict[str, Any], description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"description": description, "content": {"application/json": {"schema": schema}}}
    if headers:
        response["headers"] = headers
    return response


def _error(description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    return _json(_ref("Error"), description, headers)


ETAG = {"ETag": {"schema": {"type": "string"}, "description": "Version of the representation, for If-None-Match"}}

COMMON_ERRORS = {
    "400": _error("Malformed user id, memory id, query or body; `error` says what to fix"),
    "401": _error(
        "No bearer token, or it is expired, badly signed, or for another issuer or audience",
        {"WWW-Authenticate": {"schema": {"type": "string"}}},
    ),
    "403": _error("The token lacks the scope, or may not reach this user's data"),
    "429": _error(
        "Too many requests from this user, or from this service for this user or in all",
        {"Retry-After": {"schema": {"type": "integer"}, "description": "Seconds"}},
    ),
}
BODY_ERRORS = {
    "408": _error("The request body did not arrive in time (MEMWRIGHT_BODY_READ_TIMEOUT_S)"),
    "413": _error("Request body larger than the limit"),
}

USER_ID = {
    "name": "user_id",
    "in": "path",
    "required": True,
    "description": (
        "The user's id: 1-128 letters, digits, _ . : @ -, starting with a letter or digit; "
        "not starting with `service:` (the prefix of service tokens' subjects)"
    ),
    "schema": {"type": "string", "pattern": USER_ID_PATTERN},
}
MEMORY_ID = {
    "name": "memory_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "format": "uuid"},
}
IF_NONE_MATCH = {
    "name": "If-None-Match",
    "in": "header",
    "required": False,
    "description": "The ETag of the last answer: 304 with no body when nothing changed",
    "schema": {"type": "string"},
}
IF_MATCH = {
    "name": "If-Match",
    "in": "header",
    "required": False,
    "description": 'The memory\'s version as its ETag ("3"), or *: the change is refused with 412 if it moved on',
    "schema": {"type": "string", "pattern": IF_MATCH_PATTERN},
}
MESSAGE_ID = {
    "name": "message_id",
    "in": "path",
    "required": True,
    "description": "The signal's message_id, as sent to ingest",
    "schema": {"type": "string", "pattern": MESSAGE_ID_PATTERN},
}
NOT_MODIFIED = {"304": {"description": "Not modified (If-None-Match matched)", "headers": ETAG}}


def _schemas(settings: ApiSettings) -> dict[str, Any]:
    timestamp = {"type": "string", "format": "date-time"}
    text = {"type": "string", "minLength": 1, "maxLength": settings.max_memory_chars, "pattern": SOME_TEXT}
    kind = {"type": "string", "pattern": KIND_PATTERN, "default": "preference"}
    reason = {"type": "string", "maxLength": REASON_MAX, "pattern": NO_NUL}
    snapshot = _nullable({"type": "object"})
    return {
        "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}},
        "Preview": {
            "type": "object",
            "required": ["id", "preview", "author", "kind", "version", "updated_at"],
            "properties": {
                "id": {"type": "string", "format": "uuid"},
                "preview": {"type": "string", "maxLength": PREVIEW_CHARS},
                "author": {"enum": ["user", "agent"]},
                "kind": {"type": "string"},
                "version": {"type": "integer", "minimum": 1},
                "updated_at": timestamp,
            },
        },
        "Previews": {
            "type": "object",
            "required": ["user_id", "memories"],
            "properties": {"user_id": {"type": "string"}, "memories": {"type": "array", "items": _ref("Preview")}},
        },
        "Receipt": {
            "type": "object",
            "required": ["message_id", "conversation_id", "text", "at"],
            "properties": {
                "message_id": {"type": "string"},
                "conversation_id": {"type": "string"},
                "project_id": _nullable({"type": "string"}),
                "text": {"type": "string"},
                "at": timestamp,
            },
        },
        "Memory": {
            "type": "object",
            "required": ["id", "text", "author", "kind", "version", "created_at", "updated_at", "receipts"],
            "properties": {
                "id": {"type": "string", "format": "uuid"},
                "text": {"type": "string"},
                "author": {"enum": ["user", "agent"]},
                "kind": {"type": "string"},
                "version": {"type": "integer", "minimum": 1},
                "created_at": timestamp,
                "updated_at": timestamp,
                "receipts": {"type": "array", "items": _ref("Receipt")},
            },
        },
        "NewMemory": {
            "type": "object",
            "additionalProperties": False,
            "required": ["text"],
            "properties": {"text": text, "kind": kind, "reason": reason},
        },
        "MemoryPatch": {
            "type": "object",
            "additionalProperties": False,
            "minProperties": 1,
            "anyOf": [{"required": ["text"]}, {"required": ["kind"]}],
            "properties": {"text": text, "kind": kind, "reason": reason},
        },
        "Deleted": {
            "type": "object",
            "required": ["id", "deleted", "author", "version"],
            "properties": {
                "id": {"type": "string", "format": "uuid"},
                "deleted": {"const": True},
                "author": {"enum": ["user", "agent"]},
                "version": {"type": "integer"},
            },
        },
        "AuditEntry": {
            "type": "object",
            "required": ["action", "actor", "evidence", "reason", "at"],
            "properties": {
                "action": {"enum": ["create", "update", "consolidate", "delete", "erase"]},
                "actor": {"enum": ["agent", "user", "system"]},
                "principal": _nullable({"type": "string"}),
                "run_id": _nullable({"type": "string", "format": "uuid"}),
                "before": snapshot,
                "after": snapshot,
                "evidence": {"type": "array", "items": {"type": "string"}},
                "reason": {"type": "string"},
                "at": timestamp,
                "erased_at": _nullable(timestamp),
            },
        },
        "History": {
            "type": "object",
            "required": ["memory_id", "history"],
            "properties": {
                "memory_id": {"type": "string", "format": "uuid"},
                "history": {"type": "array", "items": _ref("AuditEntry")},
            },
        },
        "Hypotheses": {
            "type": "object",
            "required": ["user_id", "hypotheses"],
            "properties": {
                "user_id": {"type": "string"},
                "hypotheses": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string"},
                            "statement": {"type": "string"},
                            "count": {"type": "integer"},
                            "conversations": {"type": "array", "items": {"type": "string"}},
                            "message_ids": {"type": "array", "items": {"type": "string"}},
                            "first_seen": {"type": "string"},
                            "last_seen": {"type": "string"},
                        },
                    },
                },
            },
        },
        "MessageStatus": _message_status_schema(timestamp),
        "Context": {
            "type": "object",
            "required": ["user_id", "memory_count", "block", "token_estimate", "token_estimate_method", "fetch"],
            "properties": {
                "user_id": {"type": "string"},
                "memory_count": {"type": "integer", "minimum": 0},
                "block": {"type": "string", "description": "Insert as is at the start of the working agent's turn"},
                "token_estimate": {"type": "integer", "minimum": 0},
                "token_estimate_method": {"type": "string"},
                "fetch": {
                    "type": "object",
                    "description": "Paths for the full text with receipts, and the audit trail, of one memory",
                    "properties": {"memory": {"type": "string"}, "history": {"type": "string"}},
                },
            },
        },
        "Export": {
            "type": "object",
            "required": ["user_id", "exported_at", "memories", "messages", "evidence", "audit", "runs", "erasures"],
            "properties": {
                "user_id": {"type": "string"},
                "exported_at": timestamp,
                "memories": {"type": "array", "items": {"type": "object"}},
                "messages": {"type": "array", "items": {"type": "object"}},
                "evidence": {"type": "array", "items": {"type": "object"}},
                "audit": {"type": "array", "items": {"type": "object"}},
                "agent": _nullable({"type": "object"}),
                "working_memory": _nullable({"type": "object"}),
                "backlog": _nullable({"type": "object"}),
                "runs": {"type": "array", "items": {"type": "object"}},
                "erasures": {"type": "array", "items": {"type": "object"}},
            },
        },
        "Erasure": {
            "type": "object",
            "required": ["user_id", "erasure_id", "erased_at", "requested_by", "counts"],
            "properties": {
                "user_id": {"type": "string"},
                "erasure_id": {"type": "integer"},
                "erased_at": timestamp,
                "requested_by": {"type": "string"},
                "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
            },
        },
    }


def _message_status_schema(timestamp: dict[str, Any]) -> dict[str, Any]:
    strings = {"type": "array", "items": {"type": "string"}}
    return {
        "type": "object",
        "required": ["user_id", "message_id", "stage", "outcome", "summary", "memories", "hypotheses"],
        "properties": {
            "user_id": {"type": "string"},
            "message_id": {"type": "string"},
            "conversation_id": {"type": "string"},
            "project_id": _nullable({"type": "string"}),
            "role": {"enum": ["user", "assistant"]},
            "stage": {"enum": ["swept", "curated"], "description": "swept: waiting for the memory agent"},
            "outcome": {"enum": list(OUTCOMES)},
            "summary": {"type": "string", "description": "What came of the message, in a sentence"},
            "accepted_at": timestamp,
            "swept_at": timestamp,
            "waiting_since": _nullable(timestamp),
            "run_in_progress": _nullable({"type": "string"}),
            "curated": _nullable(
                {
                    "type": "object",
                    "properties": {
                        "run_id": {"type": "string", "format": "uuid"},
                        "policy": {"type": "string"},
                        "at": _nullable(timestamp),
                    },
                }
            ),
            "memories": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["memory_id", "state", "link", "history"],
                    "properties": {
                        "memory_id": {"type": "string", "format": "uuid"},
                        "state": {"enum": list(MEMORY_STATES)},
                        "link": _nullable({"type": "string"}),
                        "history": {"type": "string"},
                        "preview": _nullable({"type": "string"}),
                        "linked_at": timestamp,
                        "deleted_at": _nullable(timestamp),
                        "reason": _nullable({"type": "string"}),
                        "asked_to_delete": {"type": "boolean"},
                        "consolidated_into": _nullable({"type": "string"}),
                    },
                },
            },
            "hypotheses": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "statement": {"type": "string"},
                        "count": {"type": "integer"},
                        "conversations": {"type": "integer"},
                        "conversation_ids": strings,
                        "first_seen": {"type": "string"},
                        "last_seen": {"type": "string"},
                    },
                },
            },
            "refusals": strings,
            "run_refusals": strings,
            "notes": strings,
        },
    }


def _op(
    summary: str,
    scope: str,
    responses: dict[str, Any],
    parameters: list[dict[str, Any]],
    body: str | None = None,
    description: str = "",
) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": summary,
        "description": (description + "\n\n" if description else "") + f"Scope: `{scope}`.",
        "parameters": parameters,
        "responses": {**responses, **COMMON_ERRORS, **(BODY_ERRORS if body else {})},
    }
    if body:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": _ref(body)}}}
    return op


def document(settings: ApiSettings) -> dict[str, Any]:
    """The OpenAPI document for these settings."""
    user = [USER_ID]
    memory = [USER_ID, MEMORY_ID]
    not_found = {"404": _error("No such memory for this user")}
    write = "memories:write"
    read = "memories:read"
    paths: dict[str, Any] = {
        "/v1/openapi.json": {
            "get": {
                "summary": "This document",
                "description": "Any valid token.",
                "responses": {
                    "200": _json({"type": "object"}, "The OpenAPI document"),
                    **{k: v for k, v in COMMON_ERRORS.items() if k in ("401", "429")},
                },
            }
        },
        "/v1/users/{user_id}/memories": {
            "get": _op(
                "Every memory as a short preview",
                read,
                {"200": _json(_ref("Previews"), "Previews in a stable order (oldest first)", ETAG), **NOT_MODIFIED},
                [*user, IF_NONE_MATCH],
                description=f"Previews are cut at {PREVIEW_CHARS} characters. Poll every turn with If-None-Match.",
            ),
            "post": _op(
                "Write a memory as the user (author user)",
                write,
                {
                    "201": _json(_ref("Memory"), "Created", {"Location": {"schema": {"type": "string"}}, **ETAG}),
                    "409": _error(f"The user already wrote {settings.user_memory_limit} memories, the limit"),
                },
                user,
                body="NewMemory",
                description="The agent can read it and never change it. Audited, and indexed through the outbox.",
            ),
        },
        "/v1/users/{user_id}/context": {
            "get": _op(
                "A ready-to-insert block for the start of a working agent's turn",
                read,
                {
                    "200": {
                        "description": "All previews, how to fetch full text, and the block's size in tokens",
                        "headers": {**ETAG, "X-Token-Estimate": {"schema": {"type": "integer"}}},
                        "content": {
                            "application/json": {"schema": _ref("Context")},
                            "text/plain": {"schema": {"type": "string"}},
                        },
                    },
                    **NOT_MODIFIED,
                },
                [
                    *user,
                    IF_NONE_MATCH,
                    {
                        "name": "format",
                        "in": "query",
                        "required": False,
                        "description": "json (default): the block with its token estimate; text: the block alone",
                        "schema": {"enum": ["json", "text"], "default": "json"},
                    },
                ],
            ),
        },
        "/v1/users/{user_id}/memories/{memory_id}": {
            "get": _op(
                "One memory in full, with its receipts",
                read,
                {"200": _json(_ref("Memory"), "The memory and the user's messages that justify it", ETAG), **not_found},
                memory,
            ),
            "patch": _op(
                "Edit a memory the user wrote",
                write,
                {
                    "200": _json(_ref("Memory"), "The memory, one version on", ETAG),
                    **not_found,
                    "409": _error("The memory was written by the agent: delete it and write your own instead"),
                    "412": _error("If-Match did not match the memory's version"),
                },
                [*memory, IF_MATCH],
                body="MemoryPatch",
            ),
            "delete": _op(
                "Delete a memory (the user's own, or one the agent wrote)",
                write,
                {
                    "200": _json(_ref("Deleted"), "Deleted; the audit trail keeps the change"),
                    **not_found,
                    "412": _error("If-Match did not match the memory's version"),
                },
                [
                    *memory,
                    IF_MATCH,
                    {
                        "name": "reason",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "string", "maxLength": REASON_MAX, "pattern": NO_NUL},
                    },
                ],
            ),
        },
        "/v1/users/{user_id}/memories/{memory_id}/history": {
            "get": _op(
                "The audit trail of one memory",
                read,
                {
                    "200": _json(_ref("History"), "Every change, oldest first; erased entries carry no content"),
                    **{"404": _error("No memory and no history with this id for this user")},
                },
                memory,
            ),
        },
        "/v1/users/{user_id}/hypotheses": {
            "get": _op(
                "What the agent is watching and has not yet remembered",
                read,
                {"200": _json(_ref("Hypotheses"), "The agent's hypotheses, read-only")},
                user,
            ),
        },
        "/v1/users/{user_id}/messages/{message_id}": {
            "get": _op(
                "The status of a message: where the signal is and what came of it",
                read,
                {
                    "200": _json(_ref("MessageStatus"), "Swept or curated, and the outcome with its links"),
                    "404": _error(
                        "Not in the evidence store: still on its way (in Kafka until the sweeper's window closes), "
                        "never sent for this user, or dead-lettered; `error` says so"
                    ),
                },
                [USER_ID, MESSAGE_ID],
                description=(
                    "A signal goes accepted (in Kafka) -> swept (in the evidence store) -> curated (read by the "
                    "user's memory agent). An accepted signal cannot be seen here: 404 until it is swept. A curated "
                    "one is remembered (evidence of a memory), held (in a hypothesis), deleted (part of a memory the "
                    "user deleted), forgotten (the agent deleted its memory), refused, or not remembered."
                ),
            ),
        },
        "/v1/users/{user_id}/export": {
            "get": _op(
                "Everything held about the user, as one JSON document",
                f"{read} (a service token needs admin)",
                {"200": _json(_ref("Export"), "The export")},
                user,
            ),
        },
        "/v1/users/{user_id}": {
            "delete": _op(
                "Erase everything held about the user",
                f"{write} (a service token needs admin)",
                {"200": _json(_ref("Erasure"), "Erased; vectors follow through the outbox")},
                user,
                description=(
                    "Memories, messages, evidence, working memory, backlog and runs are deleted; the audit trail "
                    "keeps content-free tombstones. Signals accepted before the erasure never come back; a later "
                    "signal starts fresh."
                ),
            ),
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "memwright api",
            "version": "1",
            "description": "Per-user long-term memory for LLM agents: previews every turn, receipts, audit, "
            "user-written memories, export and erasure. Every operation needs a bearer JWT.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}},
            "schemas": _schemas(settings),
        },
        "paths": paths,
    }
