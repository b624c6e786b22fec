"""Outbound HTTP: the upstream agent (chat and its own APIs) through one client on
h11's public API, its TLS trust, the event sources the relay reads, Open WebUI.
"""
