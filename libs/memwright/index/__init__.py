"""The derivative vector index (invariant 9): embedders, the Qdrant store, the outbox
relay and the changelog applier. Everything here can be rebuilt from PostgreSQL."""
