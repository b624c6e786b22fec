"""``gateway run``, ``gateway proxy`` and ``gateway demo``: the serving commands."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

import trio

from gateway import __version__
from gateway.cli.common import add_config_option, err
from gateway.lock import EXIT_ALREADY_RUNNING, EXIT_USAGE

log = logging.getLogger("gateway")


def _bind_error(exc: BaseException) -> OSError | None:
    """The bind failure inside whatever trio/hypercorn wrapped it in, if any."""
    if isinstance(exc, OSError) and exc.errno in (
        errno.EADDRINUSE,
        errno.EADDRNOTAVAIL,
        errno.EACCES,
    ):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            found = _bind_error(sub)
            if found is not None:
                return found
    return None


def _wait_port_free(bind: str, timeout: float) -> None:
    """After --replace: the old process's listener closes as it exits; wait briefly."""
    from gateway.config import parse_bind

    try:
        host, port = parse_bind(bind)
    except ValueError:
        return
    if port == 0:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
                return
            except OSError:
                time.sleep(0.1)


def run_locked(cfg: Any, *, role: str, replace: bool, serve: Callable[[], int]) -> int:
    """Take the instance lock of ``role`` (``--replace``: drain the holder first), serve.

    Shared by ``gateway run`` (role ``api``, ``gateway.lock``) and the runs proxy
    (role ``proxy``, ``proxy.lock``).
    """
    from gateway.lock import (
        REPLACE_LOOP,
        AlreadyRunning,
        InstanceLock,
        replace_running,
        this_process_supervisor,
    )
    from gateway.service import default_label, systemd_unit_name

    lock_name = "gateway" if role == "api" else role
    if replace:
        supervisor = this_process_supervisor()
        if supervisor is not None:
            err(f"refusing --replace: running under {supervisor}. {REPLACE_LOOP}")
            return EXIT_USAGE
    try:
        lock = InstanceLock.acquire(cfg.state_dir, lock_name)
    except AlreadyRunning as held:
        if not replace:
            who = f"pid {held.pid}" if held.pid is not None else "another process"
            err(
                f"another gateway {role} is already running on this state directory ({who}; "
                f"lock {held.path}); not starting a second one. Stop it first (launchd: "
                f"launchctl bootout gui/$(id -u)/{default_label(role)}; systemd: "
                f"systemctl --user stop {systemd_unit_name(role)}; by hand: kill {held.pid or '<pid>'}), "
                "or, from an interactive shell only, add --replace to drain it and take over."
            )
            return EXIT_ALREADY_RUNNING
        try:
            lock = replace_running(
                cfg.state_dir,
                held,
                timeout=cfg.server.drain_timeout_seconds + 5.0,
                name=lock_name,
                say=err,
            )
        except AlreadyRunning as failed:
            err(f"cannot replace the running gateway {role}: {failed.args[0]}")
            return EXIT_ALREADY_RUNNING
        bind = cfg.server.bind if role == "api" else cfg.proxy.bind
        _wait_port_free(bind, 5.0)
    except OSError as exc:
        err(f"cannot lock the state directory {cfg.state_dir}: {exc.strerror or exc}")
        return 1
    try:
        return serve()
    finally:
        lock.release()


def _cmd_run(args: argparse.Namespace) -> int:
    from gateway.config import load_config

    cfg = load_config(args.config)
    return run_locked(cfg, role="api", replace=args.replace, serve=lambda: _serve(cfg))


def _serve(cfg: Any) -> int:
    from gateway.app import create_app
    from gateway.smoke import install_selftest_route

    app = create_app(cfg)
    install_selftest_route(app)  # no-op once create_app registers it itself
    return _serve_apps(cfg, "gateway", [(app, cfg.server.bind, app.gateway.draining)])  # type: ignore[attr-defined]


def _cmd_proxy(args: argparse.Namespace) -> int:
    from gateway.config import load_config

    cfg = load_config(args.config)
    return run_locked(cfg, role="proxy", replace=args.replace, serve=lambda: _serve_proxy(cfg))


def _serve_proxy(cfg: Any) -> int:
    from gateway.proxy import create_proxy_app

    app = create_proxy_app(cfg)
    return _serve_apps(cfg, "proxy", [(app, cfg.proxy.bind, app.proxy.draining)])  # type: ignore[attr-defined]


def _serve_apps(cfg: Any, what: str, apps: list[tuple[Any, str, trio.Event | None]]) -> int:
    """Serve until signalled (see :mod:`gateway.server`); a bind failure is one clear line."""
    from gateway.server import run_until_signalled

    def ready(urls: list[list[str]]) -> None:
        log.info("%s %s listening on %s (pid %d)", what, __version__, urls[0][0], os.getpid())

    try:
        trio.run(
            lambda: run_until_signalled(
                apps,
                drain_timeout=cfg.server.drain_timeout_seconds,
                on_ready=ready,
                write_timeout=cfg.server.write_timeout_seconds,
                # these keys are being added to the config; until then, the defaults
                header_timeout=getattr(cfg.server, "header_timeout_seconds", 10.0),
                max_connections=getattr(cfg.server, "max_connections", 16384),
                listen_backlog=getattr(cfg.server, "listen_backlog", 4096),
            )
        )
    except BaseException as exc:
        bind_err = _bind_error(exc)
        if bind_err is None:
            raise
        err(f"cannot listen on {apps[0][1]}: {bind_err.strerror or bind_err}")
        return 1
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from gateway.demo import main as demo_main

    try:
        return demo_main(
            port=args.port, upstream_port=args.upstream_port, proxy_port=args.proxy_port
        )
    except BaseException as exc:
        bind_err = _bind_error(exc)
        if bind_err is None:
            raise
        err(
            f"cannot listen: {bind_err.strerror or bind_err}; is another demo or gateway running? "
            "Pick other ports with --port/--upstream-port/--proxy-port."
        )
        return 1


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = sub.add_parser("run", help="run the API server")
    add_config_option(run)
    run.add_argument(
        "--replace",
        action="store_true",
        help="interactive use only: drain the running instance (SIGTERM), wait for it, start; "
        "refused under launchd/systemd",
    )
    run.set_defaults(func=_cmd_run)

    proxy = sub.add_parser("proxy", help="run the Open WebUI runs proxy")
    add_config_option(proxy)
    proxy.add_argument(
        "--replace",
        action="store_true",
        help="interactive use only: drain the running proxy (SIGTERM), wait for it, start; "
        "refused under launchd/systemd",
    )
    proxy.set_defaults(func=_cmd_proxy)

    demo = sub.add_parser("demo", help="run the demo upstream and the gateway in one process")
    demo.add_argument("--port", type=int, default=8642)
    demo.add_argument("--upstream-port", type=int, default=9000)
    demo.add_argument("--proxy-port", type=int, default=8653)
    demo.set_defaults(func=_cmd_demo)
