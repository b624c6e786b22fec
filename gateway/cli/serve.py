"""``gateway run``, ``gateway proxy`` and ``gateway demo``: the serving commands."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

import trio

from gateway import __version__
from gateway.cli.common import add_config_option, add_log_format_option, err, help_text
from gateway.ops.lock import EXIT_ALREADY_RUNNING, EXIT_USAGE

log = logging.getLogger("gateway")


def _wait_port_free(bind: str, timeout: float) -> None:
    """After --replace: the old process's listener closes as it exits; wait briefly."""
    from gateway.ops.config import parse_bind

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
    from gateway.ops.lock import (
        REPLACE_LOOP,
        AlreadyRunning,
        InstanceLock,
        replace_running,
        this_process_supervisor,
    )
    from gateway.ops.supervisor import default_label, systemd_unit_name

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


def _load(args: argparse.Namespace, process: str, role: str) -> Any:
    """The config of a serving command (``--bind`` wins over the file and the
    environment); logging set up from it (``--log-format`` wins); the warnings that
    ``gateway config check`` prints for this command logged."""
    from gateway.cli.config import file_warnings, role_warnings
    from gateway.core.errors import ConfigError
    from gateway.ops.config import load, parse_bind
    from gateway.ops.logs import configure_logging

    overrides = {}
    if args.bind is not None:
        try:
            parse_bind(args.bind)
        except ValueError as exc:
            raise ConfigError("<file>", f"--bind {args.bind!r}: {exc}") from None
        overrides["server.bind" if role == "api" else "proxy.bind"] = args.bind
    loaded = load(args.config, overrides=overrides)
    cfg = loaded.config
    configure_logging(process, args.log_format or cfg.log.format, cfg.log.level)
    for warning in [*role_warnings(cfg, role), *file_warnings(loaded.source), *loaded.notes]:
        log.warning("%s", warning)
    return _fit_connections(cfg)


def _fit_connections(cfg: Any) -> Any:
    """``server.max_connections`` at its default value (16,384; also when a file such as
    the example writes it) is lowered to the streams the hard descriptor limit holds (2
    each): a default start neither warns nor promises more than the host gives. Another
    value is kept, and warned about at start when the limit cannot hold it
    (gateway.http.serve)."""
    import dataclasses
    import resource

    from gateway.http.serve import FD_RESERVE, FDS_PER_STREAM
    from gateway.ops.config import ServerConfig

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    default = ServerConfig().max_connections
    if cfg.server.max_connections != default or hard == resource.RLIM_INFINITY:
        return cfg
    fits = max(64, (hard - FD_RESERVE) // FDS_PER_STREAM)
    if fits >= cfg.server.max_connections:
        return cfg
    log.info(
        "server.max_connections: %d, what the hard file-descriptor limit (%d) holds "
        "(the default is %d; raise LimitNOFILE / NumberOfFiles, or set the key)",
        fits,
        hard,
        cfg.server.max_connections,
    )
    return dataclasses.replace(cfg, server=dataclasses.replace(cfg.server, max_connections=fits))


def _cmd_run(args: argparse.Namespace) -> int:
    cfg = _load(args, "gateway", "api")
    return run_locked(cfg, role="api", replace=args.replace, serve=lambda: _serve(cfg))


def _detector_first(cfg: Any) -> None:
    """Build the path detector before the app's modules load. Compiling its regexes
    makes ~4 MiB of short-lived objects, and the few that outlive it (~200) kept three
    of the allocator's 1 MiB arenas from being given back: about 0.7 MiB more idle RSS
    when it came after the imports, whose objects now fill those arenas instead. The
    app takes this one (``PathDetector.shared`` is cached by its arguments)."""
    from gateway.core.paths import PathDetector
    from gateway.ops.config import extra_roots

    PathDetector.shared(extra_roots(cfg), cfg.limits.max_path_chars)


def _serve(cfg: Any) -> int:
    _detector_first(cfg)
    from gateway.api.app import create_app

    app = create_app(cfg)
    return _serve_apps(cfg, "gateway", [(app, cfg.server.bind, app.gateway.draining)])


def _cmd_proxy(args: argparse.Namespace) -> int:
    cfg = _load(args, "proxy", "proxy")
    return run_locked(cfg, role="proxy", replace=args.replace, serve=lambda: _serve_proxy(cfg))


def _serve_proxy(cfg: Any) -> int:
    _detector_first(cfg)
    from gateway.proxy import create_proxy_app

    app = create_proxy_app(cfg)
    return _serve_apps(cfg, "proxy", [(app, cfg.proxy.bind, app.proxy.draining)])


def _serve_apps(cfg: Any, what: str, apps: list[tuple[Any, str, trio.Event | None]]) -> int:
    """Serve until signalled (see :mod:`gateway.http.serve`); a bind failure is one clear line."""
    from gateway.http.seam import UnsupportedServer, check
    from gateway.http.serve import find_bind_error, run_until_signalled

    try:
        check()  # a hypercorn the connection handler does not know: refused, one line
    except UnsupportedServer as exc:
        err(f"cannot serve: {exc}")
        return 1

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
                header_timeout=cfg.server.header_timeout_seconds,
                max_connections=cfg.server.max_connections,
                listen_backlog=cfg.server.listen_backlog,
            )
        )
    except BaseException as exc:
        bind_err = find_bind_error(exc)
        if bind_err is None:
            raise
        err(f"cannot listen on {apps[0][1]}: {bind_err.strerror or bind_err}")
        return 1
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from gateway.cli.demo import run

    return run(args)


_REPLACE_HELP = (
    "interactive use only: drain the running {what} (SIGTERM), wait for it, start; "
    "refused under launchd/systemd"
)


def _add_bind_option(parser: argparse.ArgumentParser, key: str, default: str) -> None:
    parser.add_argument(
        "--bind",
        metavar="HOST:PORT",
        help=f"listen here (wins over {key} and its variable; default {default}); "
        "IPv6 as [::1]:PORT",
    )


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = sub.add_parser(
        "run",
        **help_text(
            "run the API server",
            "gateway run --config /etc/artifact-gateway/gateway.toml",
            "GATEWAY_CONFIG=gateway.toml gateway run --log-format json",
            details="Chat completions, Responses, background runs and managed downloads on\n"
            "[server] bind (default 127.0.0.1:8642). One instance per state directory;\n"
            "SIGTERM drains. Check the configuration first with `gateway config check`.",
        ),
    )
    add_config_option(run)
    add_log_format_option(run)
    _add_bind_option(run, "server.bind", "127.0.0.1:8642")
    run.add_argument("--replace", action="store_true", help=_REPLACE_HELP.format(what="instance"))
    run.set_defaults(func=_cmd_run)

    proxy = sub.add_parser(
        "proxy",
        **help_text(
            "run the Open WebUI runs proxy",
            "gateway proxy --config /etc/artifact-gateway/gateway.toml",
            details="Open WebUI calls it as an OpenAI connection ([proxy] bind, default\n"
            "127.0.0.1:8653, keys proxy.client_keys); it runs each chat on the API server\n"
            "(proxy.gateway_url, key proxy.gateway_key) as the Open WebUI user.",
        ),
    )
    add_config_option(proxy)
    add_log_format_option(proxy)
    _add_bind_option(proxy, "proxy.bind", "127.0.0.1:8653")
    proxy.add_argument("--replace", action="store_true", help=_REPLACE_HELP.format(what="proxy"))
    proxy.set_defaults(func=_cmd_proxy)

    from gateway.cli.demo import DETAILS, EXAMPLE_ARGS, SUMMARY, add_arguments

    examples = (f"gateway demo{a}" for a in EXAMPLE_ARGS)
    demo = sub.add_parser("demo", **help_text(SUMMARY, *examples, details=DETAILS))
    add_arguments(demo)
    demo.set_defaults(func=_cmd_demo)
