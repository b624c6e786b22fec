"""The TLS trust of the gateway's httpx clients, loaded when a TLS connection needs it.

httpx builds its default context (``verify=True``) at once, for every client and for
every proxy transport the environment names, and loads certifi's bundle into each:
about 1.2 MiB of a process's memory a client, measured here, even for a client that
only ever speaks plain HTTP (the usual upstream, a local Open WebUI). :func:`verify_context`
is the same trust, loaded on the first TLS connection instead: until then it holds
nothing. What it verifies is what httpx's default verifies: ``SSL_CERT_FILE``, else
``SSL_CERT_DIR``, else certifi's bundle; the same hostname check and ``SSLKEYLOGFILE``.
"""

from __future__ import annotations

import os
import ssl
import sys
from typing import Any

__all__ = ["LazyTrustContext", "verify_context"]


class LazyTrustContext(ssl.SSLContext):
    """An :class:`ssl.SSLContext` for clients (``PROTOCOL_TLS_CLIENT``: certificates
    and hostnames checked) whose trusted certificates are loaded by the first
    ``wrap_bio`` or ``wrap_socket`` (trio's and asyncio's TLS, and the sync one)."""

    _trust_loaded = False

    def load_trust(self) -> None:
        """Load the trusted certificates now (once), as httpx's default does."""
        if self._trust_loaded:
            return
        cafile = os.environ.get("SSL_CERT_FILE")
        capath = None if cafile else os.environ.get("SSL_CERT_DIR")
        if not cafile and not capath:
            import certifi  # httpx's own dependency

            cafile = certifi.where()
        self.load_verify_locations(cafile=cafile, capath=capath)
        self._trust_loaded = True

    def wrap_bio(self, *args: Any, **kwargs: Any) -> ssl.SSLObject:
        self.load_trust()
        return super().wrap_bio(*args, **kwargs)

    def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        self.load_trust()
        return super().wrap_socket(*args, **kwargs)


def verify_context() -> LazyTrustContext:
    """A client context that trusts what httpx's default trusts, loaded on first use."""
    ctx = LazyTrustContext(ssl.PROTOCOL_TLS_CLIENT)
    keylog = None if sys.flags.ignore_environment else os.environ.get("SSLKEYLOGFILE")
    if keylog:  # as ssl.create_default_context
        ctx.keylog_filename = keylog
    return ctx
