"""A memory is data, never an instruction (invariant 11): the one check that refuses a memory
text that holds a secret, tells the assistant how to treat its rules, or claims authority.

The tool layer runs it on every text any policy writes (tools.py), the api on every memory a
user writes (store/user_writes.py). The phrasings are data (data/guard.toml); this module only
normalises the text, matches the patterns and checks card numbers with Luhn. A secret is never
echoed in the reason, which goes to transcripts, logs and api answers.
"""

from __future__ import annotations

import re
import tomllib
import unicodedata
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Literal

Kind = Literal["secret", "instruction", "authority"]
KINDS: tuple[Kind, ...] = ("secret", "instruction", "authority")


@dataclass(frozen=True)
class Verdict:
    kind: Kind
    reason: str  # plain language, for an agent or a person: what is wrong, and that it is not stored


@dataclass(frozen=True)
class _Shape:
    name: str
    pattern: re.Pattern[str]
    luhn: bool = False
    not_values: frozenset[str] = frozenset()


@dataclass(frozen=True)
class _Rules:
    reasons: dict[Kind, str]
    secrets: tuple[_Shape, ...]
    phrases: dict[Kind, tuple[re.Pattern[str], ...]]


@cache
def _rules() -> _Rules:
    data = tomllib.loads(resources.files("memwright.agent").joinpath("data/guard.toml").read_text("utf-8"))
    secrets = tuple(
        _Shape(s["name"], re.compile(s["pattern"], re.I), s.get("luhn", False), frozenset(s.get("not_values", ())))
        for s in data["secret"]["shapes"]
    )
    phrases: dict[Kind, tuple[re.Pattern[str], ...]] = {
        kind: tuple(re.compile(p, re.I) for p in data[kind]["patterns"]) for kind in ("instruction", "authority")
    }
    return _Rules({kind: data[kind]["reason"] for kind in KINDS}, secrets, phrases)


def normalise(text: str) -> str:
    """What the patterns see: NFKC (full-width and ligature forms folded), no format characters
    (zero-width spaces, bidirectional marks), every run of whitespace as one space."""
    folded = unicodedata.normalize("NFKC", text)
    visible = "".join(ch for ch in folded if unicodedata.category(ch) != "Cf")
    return " ".join(visible.split())


def luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


def _secret(text: str, shape: _Shape) -> bool:
    for m in shape.pattern.finditer(text):
        if shape.luhn and not luhn(re.sub(r"\D", "", m.group(0))):
            continue
        value = m.groupdict().get("value")
        if value and value.strip(".,;!?)").lower() in shape.not_values:
            continue
        return True
    return False


def check(text: str) -> Verdict | None:
    """Why `text` must not be a memory, or None when it may be one."""
    rules = _rules()
    seen = normalise(text)
    for shape in rules.secrets:
        if _secret(seen, shape):
            return Verdict("secret", rules.reasons["secret"].format(found=shape.name))
    for kind, patterns in rules.phrases.items():
        for pattern in patterns:
            m = pattern.search(seen)
            if m:
                found = m.group(0).strip(" \t>]:;.!?\"'(")
                return Verdict(kind, rules.reasons[kind].format(found=found[:80]))
    return None
