"""The curator service."""
