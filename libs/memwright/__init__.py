"""memwright: per-user long-term memory for LLM agents.

The domain lives here (schemas, store, agent, index); services/ holds thin shells.
"""

__version__ = "0.1.0"
