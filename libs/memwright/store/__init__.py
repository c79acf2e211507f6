"""PostgreSQL access: connection pools, migrations and the SQL of each part.

SQL lives in named functions beside the code that needs it: sweeps.py (the
sweeper's window write), leases.py (claims and fencing), memories.py (reads),
outbox.py (the relay). The agent's commit lives in memwright.agent.commit.
"""
