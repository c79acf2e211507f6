"""`memwright index rebuild` and `memwright index check` (issue 5)."""

from __future__ import annotations

import sys


def main(command: str, argv: list[str]) -> int:
    print(f"memwright index {command}: not yet implemented (see issue 5)", file=sys.stderr)
    return 2
