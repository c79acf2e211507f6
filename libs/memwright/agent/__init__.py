"""The memory agent: one per user, long-lived through its working memory.

- tools.py      the only way any policy changes memories (budget, receipts, protection, deleted stays deleted)
- guard.py      what a memory must never be: a secret, an instruction, a claim of authority (data/guard.toml)
- working.py    working memory: summary, hypotheses, transcript; compaction keeps hypotheses
- rules.py      the offline rules policy
- run.py        load a snapshot, run a policy, commit everything in one fenced transaction
"""
