"""The derivative vector index (invariant 9): the Qdrant store (vectors from
memwright.embeddings), the outbox relay and the changelog applier. Everything here can be
rebuilt from PostgreSQL."""
