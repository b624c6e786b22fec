"""The accept loop of hypercorn's trio worker, without a scheduler round per connection.

hypercorn serves its listeners with ``trio.serve_listeners``. trio yields after every
successful socket call, so each accepted connection cost one round of the scheduler
(a batch, an ``epoll_wait``) before its task was even spawned, and after the handler
``aclose_forcefully`` cancelled a scope (formatting the task's ``repr``) and caught a
``Cancelled`` to close a stream the handler had already closed. Measured with a
bare trio server on this machine: 0.19 ms of CPU per connection through trio's
listener and streams, 0.10 ms with the socket calls made directly.

:func:`serve_listeners` has trio's signature and behaviour: one task per listener, a
handler task per connection in ``handler_nursery``, the listeners closed when it
ends, ``ECONNABORTED``-like errors skipped and resource exhaustion (``EMFILE``...)
retried after a pause (logged at most once per 10 s by the connection layer's
filter). Plain TCP listeners are accepted from directly: connections are taken until
the socket has none waiting (one yield per :data:`ACCEPT_BATCH` at most, so a flood
of connections cannot starve the rest); any other listener (TLS) through its own
``accept``. :func:`install` makes hypercorn's trio worker use it.
"""

from __future__ import annotations

import errno
import logging
import os
import types
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio

__all__ = ["ACCEPT_BATCH", "install", "serve_listeners"]

#: the logger trio's own loop uses (gateway.connections quiets its EMFILE lines)
LOGGER = logging.getLogger("trio.serve_listeners")
#: connections accepted in a row before the loop yields once
ACCEPT_BATCH = 16
#: pause after the process ran out of descriptors or memory (as trio's loop does)
SLEEP_TIME = 0.100
CAPACITY_ERRNOS = frozenset(
    getattr(errno, name)
    for name in ("EMFILE", "ENFILE", "ENOMEM", "ENOBUFS")
    if hasattr(errno, name)
)
#: a connection that went away before it was accepted (trio's list)
_SKIPPED = "EPERM ECONNABORTED EPROTO ENETDOWN ENOPROTOOPT EHOSTDOWN ENONET EHOSTUNREACH"
SKIPPED_ERRNOS = frozenset(
    getattr(errno, name)
    for name in (*_SKIPPED.split(), "EOPNOTSUPP", "ENETUNREACH")
    if hasattr(errno, name)
)

Handler = Callable[[Any], Awaitable[object]]


async def serve_listeners(
    handler: Handler,
    listeners: Sequence[Any],
    *,
    handler_nursery: trio.Nursery | None = None,
    task_status: trio.TaskStatus[Sequence[Any]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """``trio.serve_listeners``, accepting plain TCP connections directly."""
    async with trio.open_nursery() as nursery:
        into = nursery if handler_nursery is None else handler_nursery
        for listener in listeners:
            nursery.start_soon(_serve_one, listener, into, handler)
        await trio.lowlevel.checkpoint()  # as trio: every accept loop has started
        task_status.started(listeners)


async def _serve_one(listener: Any, nursery: trio.Nursery, handler: Handler) -> None:
    async with listener:
        if type(listener) is trio.SocketListener:
            await _accept_plain(listener.socket, nursery, handler)
        else:
            await _accept_any(listener, nursery, handler)


async def _accept_plain(sock: Any, nursery: trio.Nursery, handler: Handler) -> None:
    raw = sock._sock  # the listening OS socket (non-blocking, as trio made it)
    in_row = 0
    while True:
        try:
            conn, _ = raw.accept()
        except BlockingIOError:
            conn = None  # the wait is below: not with the caught exception alive
        except OSError as exc:
            await _accept_failed(exc)
            continue
        if conn is None:
            in_row = 0
            await trio.lowlevel.wait_readable(raw)  # the checkpoint: cancel, shutdown
            continue
        stream = trio.SocketStream(trio.socket.from_stdlib_socket(conn))
        nursery.start_soon(_run_handler, stream, handler)
        in_row += 1
        if in_row >= ACCEPT_BATCH:
            in_row = 0
            await trio.lowlevel.checkpoint()


async def _accept_any(listener: Any, nursery: trio.Nursery, handler: Handler) -> None:
    while True:
        try:
            stream = await listener.accept()
        except OSError as exc:
            await _accept_failed(exc)
            continue
        nursery.start_soon(_run_handler, stream, handler)


async def _accept_failed(exc: OSError) -> None:
    """Skip a connection that went away, pause when out of descriptors, else raise."""
    if exc.errno == errno.EBADF:
        raise trio.ClosedResourceError("the listening socket was closed") from None
    if exc.errno in SKIPPED_ERRNOS:
        return
    if exc.errno not in CAPACITY_ERRNOS:
        raise exc
    LOGGER.error(
        "accept returned %s (%s); retrying in %s seconds",
        errno.errorcode.get(exc.errno or 0, "?"),
        os.strerror(exc.errno or 0),
        SLEEP_TIME,
    )
    await trio.sleep(SLEEP_TIME)


async def _run_handler(stream: Any, handler: Handler) -> None:
    try:
        await handler(stream)
    finally:
        # the gateway's connections close their own stream: trio's forceful close of a
        # closed stream cancelled a scope and caught a Cancelled for nothing
        sock = getattr(stream, "socket", None)
        if sock is None or sock.fileno() != -1:
            await trio.aclose_forcefully(stream)


class _TrioForHypercorn(types.ModuleType):
    """trio as hypercorn's trio worker module sees it: ``serve_listeners`` is ours."""

    serve_listeners = staticmethod(serve_listeners)

    def __getattr__(self, name: str) -> Any:
        return getattr(trio, name)


def install(module: Any) -> bool:
    """Make ``module`` (hypercorn's ``hypercorn.trio.run``) serve its listeners with
    :func:`serve_listeners`; False if it does not use trio's as expected."""
    current = getattr(module, "trio", None)
    if isinstance(current, _TrioForHypercorn):
        return True
    if current is not trio or not callable(getattr(module, "worker_serve", None)):
        return False
    module.trio = _TrioForHypercorn("trio")
    return True
