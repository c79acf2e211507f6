"""The indexer service."""
