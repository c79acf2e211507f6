"""The memory agent: one per user, long-lived through its working memory.

- tools.py      the only way any policy changes memories (budget, receipts, protection)
- working.py    working memory: summary, hypotheses, transcript; compaction keeps hypotheses
- rules.py      the offline rules policy
- run.py        load a snapshot, run a policy, commit everything in one fenced transaction
"""
