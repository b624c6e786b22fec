"""The TLS trust of the gateway's httpx clients, loaded when a TLS connection needs it.

httpx builds its default context (``verify=True``) at once, for every client and for
every proxy transport the environment names, and loads certifi's bundle into each:
about 1.2 MiB of a process's memory a client, measured here, even for a client that
only ever speaks plain HTTP (the usual upstream, a local Open WebUI). :func:`verify_context`
is the same trust, loaded on the first TLS connection instead: until then it holds
nothing. What it verifies is what httpx's default verifies: ``SSL_CERT_FILE``, else
``SSL_CERT_DIR``, else certifi's bundle; the same hostname check and ``SSLKEYLOGFILE``.

A trust source that cannot be loaded (a missing ``SSL_CERT_FILE``, a file that holds no
certificate) leaves the context trusting nothing: every TLS connection fails its
certificate check inside the handshake (the client's usual connect error, its socket
closed by the client; clients are told the server could not be reached, the file's path
being the host's), the cause is logged once with the source named, and the next
connection tries to load it again, so a fixed file needs no restart. :func:`trust_problem`
says it at start-up when a configured URL is ``https://`` (``gateway run``, ``gateway
proxy`` and ``gateway config check`` warn).
"""

from __future__ import annotations

import logging
import os
import ssl
import sys
from typing import Any

__all__ = ["LazyTrustContext", "trust_problem", "verify_context"]

log = logging.getLogger("gateway.trust")
_logged: set[str] = set()  # the causes logged already (one line each per process)


def _trust_source() -> tuple[str, str | None, str | None]:
    """(a description, cafile, capath) of what httpx's default would trust."""
    cafile = os.environ.get("SSL_CERT_FILE")
    if cafile:
        return f"SSL_CERT_FILE={cafile}", cafile, None
    capath = os.environ.get("SSL_CERT_DIR")
    if capath:
        return f"SSL_CERT_DIR={capath}", None, capath
    import certifi  # httpx's own dependency

    where = certifi.where()
    return f"certifi's bundle ({where})", where, None


class _LoadFailed(Exception):
    """(what, the error): the trust source could not be loaded."""


def _load_trust_into(ctx: ssl.SSLContext) -> None:
    """Load what httpx's default trusts into ``ctx`` (:class:`_LoadFailed` if it cannot)."""
    what, cafile, capath = _trust_source()
    try:
        if capath is not None and not os.path.isdir(capath):  # (ssl takes it silently)
            raise NotADirectoryError(f"not a folder: {capath}")
        ctx.load_verify_locations(cafile=cafile, capath=capath)
    except (OSError, ssl.SSLError) as exc:
        raise _LoadFailed(what, exc) from exc


class LazyTrustContext(ssl.SSLContext):
    """An :class:`ssl.SSLContext` for clients (``PROTOCOL_TLS_CLIENT``: certificates
    and hostnames checked) whose trusted certificates are loaded by the first
    ``wrap_bio`` or ``wrap_socket`` (trio's and asyncio's TLS, and the sync one)."""

    _trust_loaded = False

    def load_trust(self) -> bool:
        """Load the trusted certificates now (once), as httpx's default does; False
        when they cannot be (logged once per cause; the context trusts nothing yet)."""
        if self._trust_loaded:
            return True
        try:
            _load_trust_into(self)
        except _LoadFailed as failed:
            what, exc = failed.args
            message = f"the TLS trust could not be loaded from {what}: {exc}"
            if message not in _logged:
                _logged.add(message)
                log.error("%s; every TLS connection fails until it can be", message)
            return False
        self._trust_loaded = True  # (loaded once: a file changed later takes a restart)
        return True

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


def trust_problem() -> str | None:
    """Why TLS connections would fail to verify (the trust source cannot be loaded), or
    None. Loads it into a context thrown away at once."""
    try:
        _load_trust_into(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))
    except _LoadFailed as failed:
        what, exc = failed.args
        return f"the TLS trust cannot be loaded from {what} ({exc})"
    return None
