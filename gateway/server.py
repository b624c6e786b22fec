"""Serving apps with hypercorn's trio worker, started programmatically; signals and drain.

Drain, in order (``D`` = ``server.drain_timeout_seconds``, ``G`` = :func:`drain_grace`):

1. First SIGTERM/SIGINT: ``STOPPING=1`` to systemd; every app's ``draining`` event is
   set (readiness turns 503; every in-flight relay ends its stream with a terminal
   event ``gateway_draining`` + ``[DONE]``); a backstop thread is armed (step 4).
2. 50 ms later hypercorn is told to stop: it stops accepting, closes idle keep-alive
   connections and gives in-flight requests until ``G`` to finish.
3. hypercorn *shields* its socket writes, so a client that stopped reading (full
   socket buffers) would keep its connection task alive forever and ``serve()`` would
   never return. Every write is therefore bounded here (:class:`WriteBounds`, used by
   :class:`gateway.connections.GatewayTCPServer`): by ``server.write_timeout_seconds`` in normal
   operation, and by the drain deadline ``G`` once draining. A write that misses its
   bound closes that connection. So at ``G`` every connection is gone, ``serve()``
   returns, ``after_serving`` closes the store, and the process exits 0 normally.
4. Backstop: should anything still hang, a daemon thread ends the process with
   ``os._exit(0)`` at ``D``. The instance lock (an ``flock``) dies with the process.

A second signal during the drain exits at once (status 0).

Connection-level robustness (containment of per-connection failures, header timeout,
connection limit, clean closes after refusals) lives in :mod:`gateway.connections`.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

import trio
from hypercorn.config import Config as HyperConfig
from hypercorn.trio import serve

from gateway import connections, memory
from gateway.connections import ConnectionPolicy, WriteBounds
from gateway.logs import app_tag, tagged

log = logging.getLogger("gateway.server")

#: pause between setting ``draining`` and stopping hypercorn: lets every relay write
#: its terminal event on a still-open connection (measured: ~80 ms for 50 streams)
TERMINAL_WRITE_PAUSE = 0.05
#: defaults of ``server.header_timeout_seconds``, ``server.max_connections``,
#: ``server.listen_backlog``
HEADER_TIMEOUT = 10.0
MAX_CONNECTIONS = 16384
LISTEN_BACKLOG = 4096


def drain_grace(drain_timeout: float) -> float:
    """How long in-flight requests get after a signal: ``D`` minus a margin (≤ 1 s)
    that leaves room for a clean shutdown before the hard backstop at ``D``."""
    return drain_timeout - min(1.0, drain_timeout / 4)


def find_bind_error(exc: BaseException) -> OSError | None:
    """The bind failure (address in use or not available, permission) inside whatever
    trio or hypercorn wrapped it in, if any."""
    if isinstance(exc, OSError) and exc.errno in (
        errno.EADDRINUSE,
        errno.EADDRNOTAVAIL,
        errno.EACCES,
    ):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            found = find_bind_error(sub)
            if found is not None:
                return found
    return None


class GatewayHyperConfig(HyperConfig):
    """hypercorn's config, its response headers (``Date``) made once a second, not per
    response (``email.utils``' formatting cost ~10 µs a request)."""

    _cached: tuple[int, str, list[tuple[bytes, bytes]]] = (-1, "", [])

    def response_headers(self, protocol: str) -> list[tuple[bytes, bytes]]:
        now = int(time.time())
        second, proto, headers = self._cached
        if second != now or proto != protocol:
            headers = super().response_headers(protocol)
            self._cached = (now, protocol, headers)
        return list(headers)


def hypercorn_config(
    bind: str, *, graceful_timeout: float = 3.0, listen_backlog: int = LISTEN_BACKLOG
) -> HyperConfig:
    cfg = GatewayHyperConfig()
    cfg.bind = [bind]
    # hypercorn's 100 dropped SYNs under 1,000 simultaneous connects; the kernel caps
    # it further (net.core.somaxconn, kern.ipc.somaxconn)
    cfg.backlog = listen_backlog
    # Open WebUI's pooled aiohttp session keeps connections longer than hypercorn's 5 s
    cfg.keep_alive_timeout = 75.0
    cfg.graceful_timeout = graceful_timeout
    cfg.accesslog = None  # the app writes its own access log (never the bearer key)
    cfg.errorlog = logging.getLogger("hypercorn.error")
    cfg.include_server_header = False
    return cfg


async def serve_app(
    app: Any,
    bind: str,
    *,
    shutdown_trigger: Callable[[], Awaitable[None]],
    graceful_timeout: float = 3.0,
    write_bounds: WriteBounds | None = None,
    header_timeout: float = HEADER_TIMEOUT,
    max_connections: int = MAX_CONNECTIONS,
    listen_backlog: int = LISTEN_BACKLOG,
    policy: ConnectionPolicy | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` until ``shutdown_trigger`` returns; report the bound URLs.

    Every connection is handled by :class:`gateway.connections.GatewayTCPServer`:
    failures stay in their connection, a request head must arrive within
    ``header_timeout`` seconds, at most ``max_connections`` are open (more get 503), and
    with ``write_bounds`` every socket write is bounded by it. A ready ``policy`` (its
    counters say what the limits did) replaces those three arguments.
    """
    cfg = hypercorn_config(bind, graceful_timeout=graceful_timeout, listen_backlog=listen_backlog)
    if connections.install():
        if policy is None:
            policy = ConnectionPolicy(
                header_timeout=header_timeout,
                max_connections=max_connections,
                write_bounds=write_bounds,
            )
        if not cfg.server_names:  # hypercorn answers a wrong Host 404 only on its way
            policy.lean_routes = frozenset(
                (method.encode("ascii"), path.encode("ascii"))
                for method, path in getattr(app, "lean_routes", {})
            )
            policy.http_app = app if connections.plain_asgi(app) else None
        setattr(cfg, connections.POLICY_ATTR, policy)
    with tagged(app_tag(app)):  # every task of this server logs under the app's name
        await serve(app, cfg, shutdown_trigger=shutdown_trigger, task_status=task_status)


async def _wait_no_requests(app: Any) -> None:
    """Until ``app`` handles no request (GatewayHTTPConnection counts them and sets
    ``app.no_requests`` when the count drops to zero)."""
    while int(getattr(app, "inflight_requests", 0)) > 0:
        idle = trio.Event()
        app.no_requests = idle
        await idle.wait()


def notify_systemd(message: str) -> None:
    """sd_notify without libsystemd: a datagram to $NOTIFY_SOCKET (no-op elsewhere)."""
    import socket

    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return
    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(addr)
            sock.sendall(message.encode())
    except OSError as exc:  # pragma: no cover - depends on the supervisor
        log.warning("could not notify systemd: %s", exc)


def _exit_now(reason: str) -> None:
    log.warning("%s; exiting now", reason)
    logging.shutdown()
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(0)


def _hard_exit_after(seconds: float, reason: Callable[[], str]) -> threading.Event:
    """Exit the process (status 0) after ``seconds`` even if trio is stuck.

    Returns an event that disarms the backstop when set.
    """
    disarm = threading.Event()

    def run() -> None:
        if not disarm.wait(seconds):
            _exit_now(f"drain deadline reached ({reason()})")

    threading.Thread(target=run, name="drain-deadline", daemon=True).start()
    return disarm


async def _drain_on_signal(
    signals: AsyncIterator[int],
    apps: list[tuple[Any, str, trio.Event | None]],
    bounds: WriteBounds,
    grace: float,
    drain_timeout: float,
    drain_started: list[float],
    stop: trio.Event,
) -> None:
    """On the first signal start the drain (and the hard deadline); on a second, exit."""
    async for signum in signals:
        if drain_started:
            _exit_now("second signal during the drain")
        t0 = trio.current_time()
        drain_started.append(t0)
        log.info(
            "received %s: draining (in-flight requests get %.1f s, hard exit at %.1f s)",
            signal.Signals(signum).name,
            grace,
            drain_timeout,
        )
        notify_systemd("STOPPING=1\nSTATUS=draining")
        _hard_exit_after(drain_timeout, lambda: f"{bounds.blocked} write(s) still blocked")
        for _, _, draining in apps:
            if draining is not None:
                draining.set()
        bounds.begin_drain(t0 + grace)
        # let streams write their terminal events before hypercorn stops
        await trio.sleep(TERMINAL_WRITE_PAUSE)
        stop.set()


async def run_until_signalled(
    apps: list[tuple[Any, str, trio.Event | None]],
    *,
    drain_timeout: float,
    on_ready: Callable[[list[list[str]]], None] | None = None,
    write_timeout: float | None = None,
    header_timeout: float = HEADER_TIMEOUT,
    max_connections: int = MAX_CONNECTIONS,
    listen_backlog: int = LISTEN_BACKLOG,
) -> None:
    """Serve several apps in one trio run until SIGTERM/SIGINT, then drain.

    ``apps`` holds (app, bind, draining event or None). ``on_ready`` gets the bound
    URLs of each app once all listen. ``write_timeout`` bounds every socket write in
    normal operation (None: only while draining). ``header_timeout``,
    ``max_connections`` and ``listen_backlog`` apply to each server (see
    :func:`serve_app`). The soft file-descriptor limit is raised to the hard limit
    first (logged, with a warning if it cannot hold ``max_connections`` streams). See
    the module docstring.
    """
    connections.log_fd_limit(connections.raise_fd_limit(), max_connections)
    grace = drain_grace(drain_timeout)
    bounds = WriteBounds(write_timeout)
    stop = trio.Event()
    drain_started: list[float] = []
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                partial(_drain_on_signal, signals, apps, bounds, grace, drain_timeout),
                drain_started,
                stop,
            )
            nursery.start_soon(memory.release_when_idle, [app for app, _, _ in apps])
            urls: list[list[str]] = []
            async with trio.open_nursery() as servers:
                for app, bind, _ in apps:
                    urls.append(
                        await servers.start(
                            partial(
                                serve_app,
                                app,
                                bind,
                                shutdown_trigger=stop.wait,
                                graceful_timeout=max(grace - TERMINAL_WRITE_PAUSE, 0.05),
                                write_bounds=bounds,
                                header_timeout=header_timeout,
                                max_connections=max_connections,
                                listen_backlog=listen_backlog,
                            )
                        )
                    )
                if on_ready is not None:
                    on_ready(urls)
                notify_systemd("READY=1")
                await stop.wait()
                # hypercorn 0.18's trio worker keeps idle keep-alive connections until
                # its graceful deadline (measured: a drain with one idle pooled
                # connection took the full grace period); once no request is in
                # flight, nothing is left to wait for, so end the servers now
                with trio.move_on_after(max(grace - TERMINAL_WRITE_PAUSE, 0.05)):
                    for app, _, _ in apps:
                        await _wait_no_requests(app)
                    servers.cancel_scope.cancel()
            # every serve() returned: connections are closed; stop watching signals
            if drain_started:
                log.info(
                    "drained in %.2f s (%d connection(s) closed for not reading); exiting",
                    trio.current_time() - drain_started[0],
                    bounds.aborted,
                )
            nursery.cancel_scope.cancel()
