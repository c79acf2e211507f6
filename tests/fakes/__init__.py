"""Local stand-ins for external services that tests talk to with real clients."""
