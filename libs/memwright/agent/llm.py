"""The LLM policy: any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, LiteLLM) drives the
same tool layer as the rules policy, through chat completions with tool calling.

- The tools are described with JSON schemas that mirror MemoryTools; a tool result is the plain
  string MemoryTools returns, so a refusal ("Refused: ...") reaches the model as a result it can
  act on. Malformed tool-call JSON, unknown tools and wrong arguments become tool results that
  say what was wrong; they never crash the run.
- The loop is bounded (max_steps completions per run); each completion has a timeout and the
  openai client retries transient failures (5xx, timeouts, 429) with backoff. When they are
  exhausted the run raises LlmUnavailable: run.py commits only at the end, so nothing of the run
  is committed, the lease is released and the next sweep retries the same signals.
- Token usage, completions and tool calls are counted in memwright.metrics.

What a real small model taught it (`make eval-llm-local`, docs/quality.md):
- A server that renders the tools with the model's own chat template but does not parse the
  answer (llama-cpp-python without a function-calling chat format; vLLM without a tool parser)
  returns the calls as text: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (Qwen,
  Hermes). They are read as tool calls; a block that is not a call becomes an invalid-call result.
- A change it already made in this run, asked for again with the same arguments (it created the
  same memory twice in a row), is not made again; the model is told it is done.
- Every completion is capped at MAX_COMPLETION_TOKENS, so a rambling model costs a bounded time,
  and an answer cut there is not kept as the running summary.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import openai
from openai import AsyncOpenAI

from memwright import metrics
from memwright.agent.prompts import SYSTEM_PROMPT, render_context
from memwright.agent.tools import MemoryTools, Message
from memwright.agent.working import FADE_AFTER
from memwright.settings import CuratorSettings

SUMMARY_CHARS = 300
MAX_COMPLETION_TOKENS = 1024  # one turn is a few tool calls or one sentence; a rambling model stops here


class LlmUnavailable(RuntimeError):
    """The LLM endpoint failed after retries; the run fails and commits nothing."""


# ---- the tools as JSON schemas -----------------------------------------------------------

_STR = {"type": "string"}
_IDS = {"type": "array", "items": {"type": "string"}}


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    properties: dict[str, dict[str, Any]]
    required: tuple[str, ...]

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": {
                    "type": "object",
                    "properties": self.properties,
                    "required": list(self.required),
                    "additionalProperties": False,
                },
            },
        }


def _p(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {**schema, "description": description}


TOOLS: dict[str, ToolSpec] = {
    t.name: t
    for t in (
        ToolSpec("list_memories", "List all of this user's memories with ids, author and budget use.", {}, ()),
        ToolSpec(
            "get_memory",
            "Read one memory in full, with the message ids that are its evidence.",
            {"memory_id": _p(_STR, "the memory id")},
            ("memory_id",),
        ),
        ToolSpec(
            "search_similar",
            "Find this user's memories most similar to a text, with similarity scores (near-duplicates).",
            {
                "text": _p(_STR, "the text to compare with"),
                "limit": {"type": "integer", "minimum": 1, "maximum": 20, "description": "how many (default 5)"},
            },
            ("text",),
        ),
        ToolSpec(
            "create_memory",
            "Remember a durable fact or preference about the user. Refused at the budget.",
            {
                "text": _p(_STR, "one short standalone sentence"),
                "evidence": _p(_IDS, "ids of the user's messages shown to you that justify it"),
                "kind": _p(_STR, "optional: 'preference' (the default) or 'fact'"),
            },
            ("text", "evidence"),
        ),
        ToolSpec(
            "update_memory",
            "Rewrite an agent-written memory (a change, a correction, more detail or more evidence).",
            {
                "memory_id": _p(_STR, "the memory to update"),
                "text": _p(_STR, "the new text"),
                "evidence": _p(_IDS, "ids of the user's messages that justify the change"),
                "reason": _p(_STR, "why it changes"),
            },
            ("memory_id", "text", "evidence", "reason"),
        ),
        ToolSpec(
            "consolidate_memories",
            "Merge two or more overlapping agent-written memories into one; their evidence is kept.",
            {
                "memory_ids": _p(_IDS, "the memories to merge (at least two)"),
                "text": _p(_STR, "the merged text"),
                "evidence": _p(
                    _IDS, "optional: ids of new user messages the merged text also states (the sources' are kept)"
                ),
                "reason": _p(_STR, "why they belong together"),
            },
            ("memory_ids", "text", "reason"),
        ),
        ToolSpec(
            "delete_memory",
            "Delete an agent-written memory that is no longer true or useful, or that the user asked to forget.",
            {
                "memory_id": _p(_STR, "the memory to delete"),
                "reason": _p(_STR, "why"),
                "evidence": _p(_IDS, "optional: the user's message asking for it"),
            },
            ("memory_id", "reason"),
        ),
        ToolSpec(
            "note_hypothesis",
            "Record or strengthen a weak signal in working memory (reuse the exact statement to strengthen).",
            {
                "statement": _p(_STR, "what you suspect about the user, one sentence"),
                "evidence": _p(_IDS, "ids of the user's messages that suggest it"),
            },
            ("statement", "evidence"),
        ),
        ToolSpec(
            "drop_hypothesis",
            "Drop a hypothesis (promoted, contradicted or stale).",
            {"hypothesis_id": _p(_STR, "the hypothesis id (h-...)"), "reason": _p(_STR, "why")},
            ("hypothesis_id", "reason"),
        ),
    )
}


def tool_schemas() -> list[dict[str, Any]]:
    return [t.schema() for t in TOOLS.values()]


def _check_arguments(spec: ToolSpec, args: Any) -> str | None:
    """What is wrong with `args` for `spec`, in words the model can act on; None when fine."""
    if not isinstance(args, dict):
        return f"the arguments must be a JSON object, not {type(args).__name__}"
    missing = [k for k in spec.required if k not in args]
    if missing:
        return f"missing argument(s) {', '.join(missing)}"
    unknown = [k for k in args if k not in spec.properties]
    if unknown:
        return f"unknown argument(s) {', '.join(unknown)}; the arguments are {', '.join(spec.properties) or 'none'}"
    for key, value in args.items():
        kind = spec.properties[key]["type"]
        if kind == "string" and not isinstance(value, str):
            return f"{key} must be a string"
        if kind == "array" and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            return f"{key} must be an array of strings (message or memory ids)"
        if kind == "integer" and (not isinstance(value, int) or isinstance(value, bool)):
            return f"{key} must be an integer"
    return None


def call_tool(tools: MemoryTools, name: str, raw_arguments: str) -> tuple[str, str]:
    """Run one tool call from the model; return (the result string, ok|refused|invalid)."""
    spec = TOOLS.get(name)
    if spec is None:
        return f"Invalid call: there is no tool {name!r}; the tools are {', '.join(TOOLS)}.", "invalid"
    try:
        args = json.loads(raw_arguments or "{}")
    except json.JSONDecodeError as exc:
        example = json.dumps({k: "..." for k in spec.required})
        return (
            f"Invalid call: the arguments for {name} are not valid JSON ({exc.msg} at position {exc.pos}). "
            f"Call it again with a JSON object such as {example}.",
            "invalid",
        )
    problem = _check_arguments(spec, args)
    if problem:
        return f"Invalid call to {name}: {problem}. Nothing was changed; call it again correctly.", "invalid"
    if name == "search_similar":
        args["limit"] = max(1, min(20, args.get("limit", 5)))
    result: str = getattr(tools, name)(**args)
    return result, "refused" if result.startswith("Refused") else "ok"


# ---- the policy --------------------------------------------------------------------------


class LlmPolicy:
    name = "llm"

    def __init__(
        self,
        settings: CuratorSettings,
        *,
        client: AsyncOpenAI | None = None,
        max_steps: int | None = None,
        timeout_s: float | None = None,
        max_retries: int | None = None,
        fade_after: timedelta = FADE_AFTER,
    ) -> None:
        # Limits come from CuratorSettings (MEMWRIGHT_LLM_*); tests may override them here.
        self.model = settings.llm_model
        self.max_steps = max_steps or settings.llm_max_steps
        timeout = timeout_s if timeout_s is not None else settings.llm_timeout_s
        retries = max_retries if max_retries is not None else settings.llm_max_retries
        self.base_url = settings.llm_base_url
        self.fade_after = fade_after
        self.skip_one_offs = settings.llm_skip_one_offs
        self.client = client or AsyncOpenAI(
            base_url=settings.llm_base_url,
            api_key=settings.llm_api_key or "not-needed",  # local endpoints (vLLM, Ollama) ignore it
            timeout=timeout,
            max_retries=retries,
        )

    async def run(self, tools: MemoryTools, new_messages: list[Message]) -> list[str]:
        results = tools.fade_hypotheses(new_messages, self.fade_after)
        if not any(m.role == "user" for m in new_messages) and not tools.working.hypotheses:
            return results  # nothing to decide: no model call
        if self.skip_one_offs:
            if await asyncio.to_thread(self._one_offs_only, tools, new_messages):
                metrics.CURATOR_LLM_WINDOWS_SKIPPED.inc()
                return results  # the local classifier found nothing to act on: no model call
            from memwright.agent.classify import shared_detector

            tools.embedder = getattr(shared_detector(), "embedder", None)  # search_similar by meaning
        conversation: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": render_context(tools, new_messages)},
        ]
        final = ""
        done: dict[str, str] = {}  # a change already made in this run, by call: a small model repeats them
        for step in range(self.max_steps):
            choice = await self._complete(conversation)
            message = choice.message
            calls = _structured_calls(message)
            if calls:
                conversation.append(_assistant_turn(message))
            else:
                # the model's own words, verbatim: its template renders them as it wrote them
                conversation.append({"role": "assistant", "content": message.content or ""})
                calls = calls_in_text(message.content or "", step)
            if not calls:
                final = (message.content or "").strip()
                if choice.finish_reason == "length":  # rambling, cut off: not a summary worth keeping
                    final = f"the model's last answer ran past {MAX_COMPLETION_TOKENS} tokens; not kept"
                    results.append(final)
                break
            for call in calls:
                again = done.get(_call_key(call))
                if call.problem is not None:
                    result, outcome = f"Invalid call: {call.problem}.", "invalid"
                elif again is not None:
                    result, outcome = (
                        f"Invalid call: already done in this run ({again}); nothing was changed.",
                        "invalid",
                    )
                else:
                    # off the event loop: search_similar embeds with the local model (CPU-bound)
                    result, outcome = await asyncio.to_thread(call_tool, tools, call.name, call.arguments)
                    if outcome == "ok" and call.name not in READ_ONLY:
                        done[_call_key(call)] = result
                metrics.CURATOR_TOOL_CALLS.labels(call.name if call.name in TOOLS else "unknown", outcome).inc()
                results.append(result)
                conversation.append({"role": "tool", "tool_call_id": call.id, "content": result})
        else:
            final = f"stopped after {self.max_steps} model calls"
            results.append(final)
        if final:
            tools.working.summary = (tools.working.summary + "\n" + final[:SUMMARY_CHARS]).strip()
        return results

    def warm(self) -> None:
        """Load the local classifier before the first claim (the curator calls this at start)."""
        if self.skip_one_offs:
            from memwright.agent.classify import shared_detector

            shared_detector().classify(["warm up"])

    @staticmethod
    def _one_offs_only(tools: MemoryTools, new_messages: list[Message]) -> bool:
        from memwright.agent import rules
        from memwright.agent.classify import only_one_offs, shared_detector

        said = [s for m in new_messages if m.role == "user" for s in rules.sentences(m.text)]
        held = [h.statement for h in tools.working.hypotheses]
        return only_one_offs(shared_detector(), said, held, rules.SKIP_BELOW, rules.REVISIT_AT)

    async def _complete(self, conversation: list[dict[str, Any]]) -> Any:
        try:
            response = await self.client.chat.completions.create(  # type: ignore[call-overload]
                model=self.model,
                messages=conversation,
                tools=tool_schemas(),
                tool_choice="auto",
                temperature=0,
                max_tokens=MAX_COMPLETION_TOKENS,
            )
        except openai.APITimeoutError as exc:
            metrics.CURATOR_LLM_CALLS.labels("timeout").inc()
            raise LlmUnavailable(f"the LLM at {self.base_url} timed out after retries: {exc}") from exc
        except openai.APIError as exc:
            metrics.CURATOR_LLM_CALLS.labels("error").inc()
            raise LlmUnavailable(f"the LLM at {self.base_url} failed after retries: {exc}") from exc
        if not response.choices:
            metrics.CURATOR_LLM_CALLS.labels("error").inc()
            raise LlmUnavailable(f"the LLM at {self.base_url} answered without a choice")
        metrics.CURATOR_LLM_CALLS.labels("ok").inc()
        if response.usage is not None:
            metrics.CURATOR_LLM_TOKENS.labels("prompt").inc(response.usage.prompt_tokens or 0)
            metrics.CURATOR_LLM_TOKENS.labels("completion").inc(response.usage.completion_tokens or 0)
        return response.choices[0]


@dataclass(frozen=True)
class ToolCall:
    """One tool call of a model turn, however the endpoint delivered it; `problem` says why it
    could not be read as a call at all (the model is told, nothing runs)."""

    id: str
    name: str
    arguments: str
    problem: str | None = None


READ_ONLY = frozenset({"list_memories", "get_memory", "search_similar"})


def _call_key(call: ToolCall) -> str:
    """The same call whatever the key order or spacing of its arguments ("" when unreadable)."""
    try:
        return call.name + json.dumps(json.loads(call.arguments or "{}"), sort_keys=True)
    except json.JSONDecodeError:
        return ""


def _structured_calls(message: Any) -> list[ToolCall]:
    return [
        ToolCall(c.id, c.function.name, c.function.arguments)
        if c.type == "function"
        else ToolCall(c.id, "", "", "only the function tools listed are available")
        for c in message.tool_calls or []
    ]


TEXT_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.S)  # an unclosed one runs to the end
TEXT_CALL_SHAPE = '{"name": "<tool>", "arguments": {...}}'


def calls_in_text(content: str, step: int) -> list[ToolCall]:
    """Tool calls a model wrote as text, for an endpoint that passed them through unparsed: in the
    Qwen/Hermes form `<tool_call>{...}</tool_call>`, or a reply that is nothing but such JSON
    objects (a small model drops the tags). Ids are made up (`text-<step>-<n>`)."""
    blocks = [m.group(1).strip() for m in TEXT_CALL.finditer(content)]
    if not blocks:
        return [
            ToolCall(f"text-{step}-{n}", obj["name"], _arguments(obj))
            for n, obj in enumerate(_bare_json_calls(content))
        ]
    calls: list[ToolCall] = []
    for n, raw in enumerate(blocks):
        call_id = f"text-{step}-{n}"
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError as exc:
            problem = f"the <tool_call> is not valid JSON ({exc.msg} at position {exc.pos}); write {TEXT_CALL_SHAPE}"
            calls.append(ToolCall(call_id, "", raw, problem))
            continue
        if not isinstance(parsed, dict) or not isinstance(parsed.get("name"), str):
            calls.append(ToolCall(call_id, "", raw, f"a <tool_call> holds one JSON object {TEXT_CALL_SHAPE}"))
            continue
        calls.append(ToolCall(call_id, parsed["name"], _arguments(parsed)))
    return calls


def _arguments(call: dict[str, Any]) -> str:
    arguments = call.get("arguments", {})
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _bare_json_calls(content: str) -> list[dict[str, Any]]:
    """The JSON objects `{"name": <a tool>, ...}` that make up the whole reply (in a ``` fence or
    not); none when anything else is in it: prose that mentions a call is not a call."""
    text = re.sub(r"^```(?:json)?\s*|\s*```$", "", content.strip())
    decoder, objects, at = json.JSONDecoder(), [], 0
    while at < len(text):
        if text[at].isspace():
            at += 1
            continue
        try:
            obj, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            return []
        if not (isinstance(obj, dict) and obj.get("name") in TOOLS):
            return []
        objects.append(obj)
    return objects


def _assistant_turn(message: Any) -> dict[str, Any]:
    turn: dict[str, Any] = {"role": "assistant", "content": message.content or ""}
    if message.tool_calls:
        turn["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in message.tool_calls
            if c.type == "function"
        ]
    return turn
