"""Artifact gateway: relays agent SSE streams, rewriting host-local paths into links."""

__version__ = "0.1.0"
