"""Serving an app with hypercorn's trio worker, started programmatically.

The app controls signals: the first SIGTERM/SIGINT sets the app's ``draining``
event (readiness turns 503, every in-flight stream ends with a proper terminal
event) and then tells hypercorn to stop accepting and finish. hypercorn shields
its socket writes, so a client that stopped reading could hold the process
forever; a hard deadline (``drain_timeout_seconds``) ends the process with exit
status 0 regardless. A second signal exits at once.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import trio
from hypercorn.config import Config as HyperConfig
from hypercorn.trio import serve

log = logging.getLogger("gateway.server")


def hypercorn_config(bind: str, *, graceful_timeout: float = 3.0) -> HyperConfig:
    cfg = HyperConfig()
    cfg.bind = [bind]
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
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` until ``shutdown_trigger`` returns; report the bound URLs."""
    cfg = hypercorn_config(bind, graceful_timeout=graceful_timeout)
    await serve(app, cfg, shutdown_trigger=shutdown_trigger, task_status=task_status)


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


def _hard_exit_after(seconds: float, reason: str) -> None:
    """Exit the process (status 0) after ``seconds`` even if trio is stuck."""

    def run() -> None:
        ev = threading.Event()
        if not ev.wait(seconds):
            log.warning("drain deadline reached (%s); exiting now", reason)
            logging.shutdown()
            os._exit(0)

    threading.Thread(target=run, name="drain-deadline", daemon=True).start()


async def run_until_signalled(
    apps: list[tuple[Any, str, trio.Event | None]],
    *,
    drain_timeout: float,
    on_ready: Callable[[list[list[str]]], None] | None = None,
) -> None:
    """Serve several apps in one trio run until SIGTERM/SIGINT, then drain.

    ``apps`` holds (app, bind, draining event or None). ``on_ready`` gets the bound
    URLs of each app once all listen.
    """
    stop = trio.Event()
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:

            async def watch_signals() -> None:
                async for signum in signals:
                    if not stop.is_set():
                        log.info("received %s: draining", signal.Signals(signum).name)
                        for _, _, draining in apps:
                            if draining is not None:
                                draining.set()
                        _hard_exit_after(drain_timeout, "streams still open")
                        # let streams write their terminal events before hypercorn stops
                        await trio.sleep(0.05)
                        stop.set()
                    else:
                        log.warning("second signal: exiting at once")
                        logging.shutdown()
                        sys.stdout.flush()
                        os._exit(0)

            nursery.start_soon(watch_signals)
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
                                graceful_timeout=drain_timeout,
                            )
                        )
                    )
                if on_ready is not None:
                    on_ready(urls)
                notify_systemd("READY=1")
                await stop.wait()
                notify_systemd("STOPPING=1")
            # every serve() returned: connections are closed; stop watching signals
            nursery.cancel_scope.cancel()
