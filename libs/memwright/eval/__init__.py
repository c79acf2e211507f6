"""The quality eval: a labelled dataset run through the real pipeline, scored by receipts.

- dataset.py   the JSON Lines format and its loader (datasets/memories.jsonl is shipped)
- scoring.py   precision, recall, false memories, updates, evidence, budget -- pure functions
- runner.py    `memwright eval`: ingest -> sweeper -> curator on the local stack, then scoring
- offline.py   the same tool layer and policy in-process, for quick iteration and unit tests
"""

from memwright.eval.runner import main

__all__ = ["main"]
