"""Encoders of the neutral events into each wire format (sans-IO)."""
