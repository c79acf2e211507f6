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
"""

from __future__ import annotations

import asyncio
import json
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
                "evidence": _p(_IDS, "ids of the user's messages shown to you that justify the merge"),
                "reason": _p(_STR, "why they belong together"),
            },
            ("memory_ids", "text", "evidence", "reason"),
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
        for _ in range(self.max_steps):
            message = await self._complete(conversation)
            calls = message.tool_calls or []
            conversation.append(_assistant_turn(message))
            if not calls:
                final = (message.content or "").strip()
                break
            for call in calls:
                if call.type != "function":
                    tool, outcome = "unknown", "invalid"
                    result = "Invalid call: only the function tools listed are available."
                else:
                    tool = call.function.name if call.function.name in TOOLS else "unknown"
                    result, outcome = call_tool(tools, call.function.name, call.function.arguments)
                metrics.CURATOR_TOOL_CALLS.labels(tool, outcome).inc()
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
        return response.choices[0].message


def _assistant_turn(message: Any) -> dict[str, Any]:
    turn: dict[str, Any] = {"role": "assistant", "content": message.content or ""}
    if message.tool_calls:
        turn["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in message.tool_calls
            if c.type == "function"
        ]
    return turn
