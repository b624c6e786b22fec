"""The one seam into hypercorn: its trio worker serves each connection with ours.

hypercorn's ``worker_serve`` (``hypercorn/trio/run.py``) gives every accepted
connection to ``partial(TCPServer, app, config, context, state)`` through
``trio.serve_listeners``, which calls it with the stream and awaits what it returns.
:func:`install` assigns :func:`handle_connection` to that module-level name ``TCPServer``,
once, after checking that the installed hypercorn is a version this was tested with
(:data:`TESTED`, the same as the pin in ``pyproject.toml``); on any other it raises
:class:`UnsupportedServer` and nothing is served, rather than serving without the
connection handler. Everything else stays hypercorn's: binding, sockets, workers,
lifespan, configuration, the shutdown trigger, the graceful deadline.

:func:`handle_connection` serves with the :class:`gateway.http.connection.Server` that
:func:`gateway.http.serve.serve_app` puts on the config (:data:`SERVER_ATTR`); a
hypercorn server started any other way keeps hypercorn's own ``TCPServer``.
"""

from __future__ import annotations

from collections.abc import Awaitable
from importlib.metadata import version
from typing import Any

__all__ = ["SERVER_ATTR", "TESTED", "UnsupportedServer", "check", "install", "installed"]

#: the hypercorn versions whose ``worker_serve`` this seam was tested with
TESTED = ("0.18.0",)
#: the attribute of hypercorn's ``Config`` that carries the gateway's server
SERVER_ATTR = "gateway_server"

_hypercorn_tcp_server: Any = None


class UnsupportedServer(RuntimeError):
    """The installed hypercorn is not one the connection handler was tested with."""


def check() -> None:
    """Raise :class:`UnsupportedServer` (one line) unless hypercorn is a tested version."""
    found = version("hypercorn")
    if found not in TESTED:
        raise UnsupportedServer(
            f"hypercorn {found} is installed, but the gateway's connection handler was "
            f"tested with hypercorn {' / '.join(TESTED)} only; install that version "
            f"(pip install 'hypercorn=={TESTED[-1]}')"
        )


def handle_connection(
    app: Any, config: Any, context: Any, state: Any, stream: Any
) -> Awaitable[None]:
    """What hypercorn's worker calls for each connection (in place of ``TCPServer``)."""
    server = getattr(config, SERVER_ATTR, None)
    if server is None:
        tcp_server: Awaitable[None] = _hypercorn_tcp_server(app, config, context, state, stream)
        return tcp_server
    served: Awaitable[None] = server.serve_connection(stream, state)
    return served


def install() -> None:
    """Make hypercorn's trio worker call :func:`handle_connection` (idempotent)."""
    global _hypercorn_tcp_server
    check()
    import hypercorn.trio.run as worker
    from hypercorn.trio.tcp_server import TCPServer

    current: Any = worker.TCPServer  # type: ignore[attr-defined]
    if current is handle_connection:
        return
    if current is not TCPServer:
        raise UnsupportedServer(
            "hypercorn.trio.run.TCPServer was replaced by something else; "
            "the gateway's connection handler cannot be installed"
        )
    _hypercorn_tcp_server = current
    worker.TCPServer = handle_connection  # type: ignore[attr-defined,assignment]


def installed() -> bool:
    """Does hypercorn's trio worker serve connections with :func:`handle_connection`?"""
    import hypercorn.trio.run as worker

    return getattr(worker, "TCPServer", None) is handle_connection
