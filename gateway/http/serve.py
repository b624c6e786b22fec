"""Serving apps with hypercorn's trio worker, started programmatically; signals and drain.

:func:`serve_app` serves one ASGI app with hypercorn (binding, lifespan, the shutdown
trigger), its connections handled by :mod:`gateway.http.connection` through the one
seam (:mod:`gateway.http.seam`): it refuses to serve on a hypercorn it does not know.

Drain, in order (``D`` = ``server.drain_timeout_seconds``, ``G`` = :func:`drain_grace`):

1. First SIGTERM/SIGINT: ``STOPPING=1`` to systemd; every app's ``draining`` event is
   set (readiness turns 503; every in-flight relay ends its stream with a terminal
   event ``gateway_draining`` + ``[DONE]``); a backstop thread is armed (step 4).
2. 50 ms later the servers are told to stop: hypercorn stops accepting, idle
   connections close at once, busy ones after their answer, and in-flight requests get
   until ``G``; once none is in flight, the servers end at once.
3. At ``G`` hypercorn cancels what is left. The connection handler's writes are not
   shielded, so a client that stopped reading cannot hold its connection past it (each
   write is also bounded by ``server.write_timeout_seconds``). ``serve()`` returns,
   ``after_serving`` closes the store, and the process exits 0.
4. Backstop: should anything still hang, a daemon thread ends the process with
   ``os._exit(0)`` at ``D``. The instance lock (an ``flock``) dies with the process.

A second signal during the drain exits at once (status 0).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import resource
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import trio
from hypercorn.config import Config as HyperConfig
from hypercorn.trio import serve

from gateway.http import seam
from gateway.http.connection import ConnectionPolicy, Server
from gateway.ops import memory
from gateway.ops.logs import app_tag, tagged

__all__ = [
    "ConnectionPolicy",
    "FdLimit",
    "drain_grace",
    "find_bind_error",
    "hypercorn_config",
    "log_fd_limit",
    "notify_systemd",
    "raise_fd_limit",
    "run_until_signalled",
    "serve_app",
]

log = logging.getLogger("gateway.server")

#: pause between setting ``draining`` and stopping hypercorn: lets every relay write
#: its terminal event on a still-open connection
TERMINAL_WRITE_PAUSE = 0.05
#: defaults of ``server.header_timeout_seconds``, ``server.max_connections``,
#: ``server.listen_backlog``
HEADER_TIMEOUT = 10.0
MAX_CONNECTIONS = 16384
LISTEN_BACKLOG = 4096
#: descriptors a relayed stream holds (client connection + upstream connection)
FDS_PER_STREAM = 2
FD_RESERVE = 64


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


def hypercorn_config(
    bind: str, *, graceful_timeout: float = 3.0, listen_backlog: int = LISTEN_BACKLOG
) -> HyperConfig:
    cfg = HyperConfig()
    cfg.bind = [bind]
    # hypercorn's 100 dropped SYNs under 1,000 simultaneous connects; the kernel caps
    # it further (net.core.somaxconn, kern.ipc.somaxconn)
    cfg.backlog = listen_backlog
    # Open WebUI's pooled aiohttp session keeps connections longer than hypercorn's 5 s
    cfg.keep_alive_timeout = 75.0
    cfg.graceful_timeout = graceful_timeout
    cfg.accesslog = None  # the app writes its own access log (never the bearer key)
    cfg.errorlog = logging.getLogger("hypercorn.error")
    return cfg


async def serve_app(
    app: Any,
    bind: str,
    *,
    shutdown_trigger: Callable[[], Awaitable[None]],
    graceful_timeout: float = 3.0,
    write_timeout: float | None = None,
    header_timeout: float = HEADER_TIMEOUT,
    max_connections: int = MAX_CONNECTIONS,
    listen_backlog: int = LISTEN_BACKLOG,
    policy: ConnectionPolicy | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` until ``shutdown_trigger`` returns; report the bound URLs.

    Every connection is handled by :mod:`gateway.http.connection` (raises
    :class:`gateway.http.seam.UnsupportedServer` on a hypercorn it was not tested with):
    failures stay in their connection, a request head must arrive within
    ``header_timeout`` seconds, at most ``max_connections`` are open (more get 503), a
    write waits at most ``write_timeout`` seconds for the client. A ready ``policy``
    (its counters say what the limits did) replaces those three arguments.
    """
    seam.install()
    _quiet_accept_errors()
    cfg = hypercorn_config(bind, graceful_timeout=graceful_timeout, listen_backlog=listen_backlog)
    if policy is None:
        policy = ConnectionPolicy(
            header_timeout=header_timeout,
            max_connections=max_connections,
            write_timeout=write_timeout,
        )
    server = Server(app, cfg, policy)
    setattr(cfg, seam.SERVER_ATTR, server)

    async def stop_when_triggered() -> None:
        await shutdown_trigger()
        server.stop()

    with tagged(app_tag(app)):  # every task of this server logs under the app's name
        await serve(app, cfg, shutdown_trigger=stop_when_triggered, task_status=task_status)


async def _wait_no_requests(app: Any) -> None:
    """Until ``app`` handles no request (its accounting counts them and sets
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
    policies: list[ConnectionPolicy],
    grace: float,
    drain_timeout: float,
    drain_started: list[float],
    stop: trio.Event,
) -> None:
    """On the first signal start the drain (and the hard deadline); on a second, exit."""
    async for signum in signals:
        if drain_started:
            _exit_now("second signal during the drain")
        drain_started.append(trio.current_time())
        log.info(
            "received %s: draining (streams end now; other requests get %.1f s; hard exit "
            "at %.1f s)",
            signal.Signals(signum).name,
            grace,
            drain_timeout,
        )
        notify_systemd("STOPPING=1\nSTATUS=draining")
        _hard_exit_after(
            drain_timeout, lambda: f"{sum(p.open for p in policies)} connection(s) still open"
        )
        for _, _, draining in apps:
            if draining is not None:
                draining.set()
        # let streams write their terminal events before the servers stop
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
    URLs of each app once all listen. ``write_timeout``, ``header_timeout``,
    ``max_connections`` and ``listen_backlog`` apply to each server (see
    :func:`serve_app`). The soft file-descriptor limit is raised to the hard limit
    first (logged, with a warning if it cannot hold ``max_connections`` streams). See
    the module docstring.
    """
    seam.check()  # before anything listens
    log_fd_limit(raise_fd_limit(), max_connections)
    grace = drain_grace(drain_timeout)
    policies = [
        ConnectionPolicy(
            header_timeout=header_timeout,
            max_connections=max_connections,
            write_timeout=write_timeout,
        )
        for _ in apps
    ]
    stop = trio.Event()
    drain_started: list[float] = []
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                partial(_drain_on_signal, signals, apps, policies, grace, drain_timeout),
                drain_started,
                stop,
            )
            nursery.start_soon(memory.release_when_idle, [app for app, _, _ in apps])
            urls: list[list[str]] = []
            async with trio.open_nursery() as servers:
                for (app, bind, _), policy in zip(apps, policies, strict=True):
                    serving = partial(
                        serve_app,
                        app,
                        bind,
                        shutdown_trigger=stop.wait,
                        graceful_timeout=max(grace - TERMINAL_WRITE_PAUSE, 0.05),
                        listen_backlog=listen_backlog,
                        policy=policy,
                    )
                    urls.append(await servers.start(serving))
                if on_ready is not None:
                    on_ready(urls)
                notify_systemd("READY=1")
                await stop.wait()
                # once no request is in flight, nothing is left to wait for (idle
                # connections closed when the servers stopped): end the servers now
                with trio.move_on_after(max(grace - TERMINAL_WRITE_PAUSE, 0.05)):
                    for app, _, _ in apps:
                        await _wait_no_requests(app)
                    servers.cancel_scope.cancel()
            # every serve() returned: connections are closed; stop watching signals
            if drain_started:
                log.info(
                    "drained in %.2f s (%d connection(s) closed for not reading); exiting",
                    trio.current_time() - drain_started[0],
                    sum(p.aborted for p in policies),
                )
            nursery.cancel_scope.cancel()


class _AcceptErrorFilter(logging.Filter):
    """trio logs every failed ``accept()`` (EMFILE...) at ERROR with a traceback, ten
    times a second while it lasts: one warning per 10 s instead, without traceback."""

    def __init__(self) -> None:
        super().__init__()
        self._last = -math.inf
        self._skipped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.startswith("accept returned"):
            return True
        now = time.monotonic()
        if now - self._last < 10.0:
            self._skipped += 1
            return False
        more = f" (and {self._skipped} more like it)" if self._skipped else ""
        self._last, self._skipped = now, 0
        log.warning("%s%s; out of file descriptors? see docs/operations.md", message, more)
        return False


def _quiet_accept_errors() -> None:
    trio_log = logging.getLogger("trio.serve_listeners")
    if not any(isinstance(f, _AcceptErrorFilter) for f in trio_log.filters):
        trio_log.addFilter(_AcceptErrorFilter())


@dataclass(frozen=True)
class FdLimit:
    before: int
    soft: int
    hard: int

    def streams(self) -> int:
        """Relayed streams that fit (2 descriptors each, a reserve kept)."""
        return max(0, (self.soft - FD_RESERVE) // FDS_PER_STREAM)


def raise_fd_limit() -> FdLimit:
    """Raise the soft ``RLIMIT_NOFILE`` as far as the hard limit allows."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    before = soft
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    while target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):  # macOS refuses more than kern.maxfilesperproc
            target //= 2
            continue
        soft = target
        break
    return FdLimit(before, soft, hard)


def log_fd_limit(limit: FdLimit, max_connections: int) -> None:
    hard = "unlimited" if limit.hard == resource.RLIM_INFINITY else str(limit.hard)
    if limit.streams() < max_connections:
        log.warning(
            "file descriptors: limit %d (was %d, hard %s) fits about %d relayed streams, "
            "fewer than server.max_connections (%d); beyond that, clients get 503 "
            "gateway_overloaded. Raise LimitNOFILE (systemd) / NumberOfFiles (launchd).",
            limit.soft,
            limit.before,
            hard,
            limit.streams(),
            max_connections,
        )
    else:
        log.info(
            "file descriptors: limit %d (was %d, hard %s), room for %d relayed streams",
            limit.soft,
            limit.before,
            hard,
            limit.streams(),
        )
