"""The quality eval: a labelled dataset run through the real pipeline, scored by receipts.

- dataset.py   the JSON Lines format and its loader; the shipped sets: datasets/memories.jsonl (the
               set the rules policy was tuned on) and datasets/{train,dev,test}.jsonl (docs/quality.md)
- assemble.py  builds train/dev/test from the hand-written datasets/source/*.txt (seeded, stratified)
- scoring.py   precision, recall, false memories, updates, evidence, budget, per category -- pure functions
- runner.py    `memwright eval`: ingest -> sweeper -> curator on the local stack, then scoring
- offline.py   the same tool layer and policy in-process, for quick iteration and unit tests
"""

from memwright.eval.runner import main

__all__ = ["main"]
