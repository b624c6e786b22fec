"""The ``gateway`` command line.

Exit status: 0 success; 1 a failed check or runtime error; 2 bad configuration or a
refused invocation (``--replace`` under a supervisor); 3 another instance already
holds the state directory (:data:`gateway.lock.EXIT_ALREADY_RUNNING`).
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from gateway import __version__
from gateway.errors import ConfigError
from gateway.lock import EXIT_ALREADY_RUNNING, EXIT_USAGE

log = logging.getLogger("gateway")


def _err(message: str) -> None:
    print(f"gateway: {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- run


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
            _err(f"refusing --replace: running under {supervisor}. {REPLACE_LOOP}")
            return EXIT_USAGE
    try:
        lock = InstanceLock.acquire(cfg.state_dir, lock_name)
    except AlreadyRunning as held:
        if not replace:
            who = f"pid {held.pid}" if held.pid is not None else "another process"
            _err(
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
                say=_err,
            )
        except AlreadyRunning as failed:
            _err(f"cannot replace the running gateway {role}: {failed.args[0]}")
            return EXIT_ALREADY_RUNNING
        bind = cfg.server.bind if role == "api" else cfg.proxy.bind
        _wait_port_free(bind, 5.0)
    except OSError as exc:
        _err(f"cannot lock the state directory {cfg.state_dir}: {exc.strerror or exc}")
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
            )
        )
    except BaseException as exc:
        bind_err = _bind_error(exc)
        if bind_err is None:
            raise
        _err(f"cannot listen on {apps[0][1]}: {bind_err.strerror or bind_err}")
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
        _err(
            f"cannot listen: {bind_err.strerror or bind_err}; is another demo or gateway running? "
            "Pick other ports with --port/--upstream-port/--proxy-port."
        )
        return 1


# --------------------------------------------------------------------------- health


def _cmd_health(args: argparse.Namespace) -> int:
    from gateway.health import poll_health

    tries = args.tries if args.tries is not None else (30 if args.wait else 1)

    def progress(n: int, outcome: str) -> None:
        if tries > 1:
            print(f"try {n}/{tries}: {outcome}", file=sys.stderr, flush=True)

    result = poll_health(
        args.url, tries=tries, interval=args.interval, timeout=args.timeout, on_try=progress
    )
    print(result.summary(args.url, tries), flush=True)
    return 0 if result.healthy else 1


# --------------------------------------------------------------------------- service


def _config_path(value: str | None) -> Path:
    raw = value or os.environ.get("GATEWAY_CONFIG")
    if not raw:
        raise ConfigError(
            "<file>",
            "a service needs an explicit config file: pass --config PATH "
            "(or set GATEWAY_CONFIG); the service must not depend on a shell's environment",
        )
    return Path(raw).expanduser().absolute()


def _cmd_service_render(args: argparse.Namespace) -> int:
    from gateway.config import load_config
    from gateway.service import (
        ServiceSpec,
        default_executable,
        render_launchd,
        render_systemd,
        systemd_unit_name,
    )

    config_path = _config_path(args.config)
    cfg = load_config(config_path, env={})  # what the service will see, not this shell
    exe = Path(args.executable).expanduser().absolute() if args.executable else default_executable()
    if exe is None:
        _err("cannot find the `gateway` executable; pass --executable PATH")
        return 1
    spec = ServiceSpec(
        role=args.role,
        executable=exe,
        config_path=config_path,
        drain_timeout=cfg.server.drain_timeout_seconds,
        label=args.label or "",
        log_dir=Path(args.log_dir).expanduser().absolute() if args.log_dir else None,
    )
    data = render_launchd(spec) if args.kind == "launchd" else render_systemd(spec).encode()
    if not args.out:
        sys.stdout.write(data.decode())
        return 0
    out = Path(args.out).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(out)
    if args.kind == "launchd":
        # launchd cannot open a log file in a missing directory (exit 78: EX_CONFIG)
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        uid = os.getuid()
        _err(
            f"wrote {out}. Load it (or reload after a change) with:\n"
            f"  launchctl bootout gui/{uid}/{spec.the_label} 2>/dev/null; "
            f"launchctl bootstrap gui/{uid} {out}\n"
            f"then: gateway health http://{cfg.server.bind}/health --wait && "
            f"gateway service doctor --plist {out}"
        )
    else:
        _err(
            f"wrote {out}. Then: systemctl --user daemon-reload && "
            f"systemctl --user enable --now {systemd_unit_name(args.role)}"
        )
    return 0


def _cmd_service_doctor(args: argparse.Namespace) -> int:
    import json
    import plistlib
    import subprocess

    from gateway.service import (
        LaunchdJob,
        default_label,
        diagnose,
        format_report,
        parse_launchctl_print,
    )

    plist: dict[str, Any] | None = None
    label = args.label
    plist_path = (
        Path(args.plist).expanduser()
        if args.plist
        else Path(f"~/Library/LaunchAgents/{label or default_label('api')}.plist").expanduser()
    )
    if plist_path.exists():
        try:
            with plist_path.open("rb") as fh:
                plist = plistlib.load(fh)
        except (plistlib.InvalidFileException, ValueError, OSError) as exc:
            _err(f"{plist_path} is not a valid plist: {exc} (check with `plutil -lint`)")
            return 1
        label = label or str(plist.get("Label") or "")
    elif args.plist:
        _err(f"{plist_path} does not exist")
        return 1
    label = label or default_label("api")

    if args.launchctl_print == "-":
        text = sys.stdin.read()
    elif args.launchctl_print:
        text = Path(args.launchctl_print).read_text(encoding="utf-8")
    elif sys.platform == "darwin":
        proc = subprocess.run(
            ["launchctl", "print", f"gui/{os.getuid()}/{label}"],
            capture_output=True,
            text=True,
            check=False,
            timeout=15,
        )
        text = proc.stdout + proc.stderr
    else:
        _err(
            "not macOS: pass --launchctl-print FILE (or - for stdin) with the output of "
            f"`launchctl print gui/$(id -u)/{label}` captured on the Mac"
        )
        return EXIT_USAGE
    try:
        live = parse_launchctl_print(text)
    except ValueError as exc:
        _err(str(exc))
        return 1

    drain: float | None = None
    cfg_file = None
    if plist is not None:
        cfg_file = dict(plist.get("EnvironmentVariables", {})).get("GATEWAY_CONFIG")
        cargs = [str(a) for a in plist.get("ProgramArguments", [])]
        if "--config" in cargs[:-1]:
            cfg_file = cargs[cargs.index("--config") + 1]
    if args.config:
        cfg_file = args.config
    if cfg_file and Path(cfg_file).expanduser().exists():
        from gateway.config import load_config

        try:
            drain = load_config(cfg_file, env={}).server.drain_timeout_seconds
        except ConfigError:
            drain = None
    domain = live.domain if isinstance(live, LaunchdJob) and live.domain else None
    findings = diagnose(plist, live, plist_path=str(plist_path), domain=domain, drain_timeout=drain)
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "code": f.code,
                        "severity": f.severity,
                        "title": f.title,
                        "details": list(f.details),
                        "fix": list(f.fix),
                    }
                    for f in findings
                ],
                indent=2,
            )
        )
    else:
        sys.stdout.write(format_report(findings, live, str(plist_path)))
    return 1 if any(f.severity == "error" for f in findings) else 0


# --------------------------------------------------------------------------- smoke


def _cmd_smoke(args: argparse.Namespace) -> int:
    from gateway.smoke import Check, run_smoke

    key = args.key or os.environ.get("GATEWAY_SMOKE_KEY", "")
    if not key:
        _err("pass --key KEY (or set GATEWAY_SMOKE_KEY): any key of the gateway's [[auth.keys]]")
        return EXIT_USAGE
    modes = ("private", "public") if args.mode == "both" else (args.mode,)

    def say(check: Check) -> None:
        mark = "ok  " if check.ok else "FAIL"
        print(f"{mark} {check.name}" + (f"  ({check.detail})" if check.detail else ""), flush=True)

    report = run_smoke(args.base_url, key, modes=modes, timeout=args.timeout, say=say)
    failed = [c for c in report.checks if not c.ok]
    if report.ok:
        print(f"smoke: all {len(report.checks)} checks passed", flush=True)
        return 0
    print(f"smoke: {len(failed)} of {len(report.checks)} checks FAILED", flush=True)
    return 1


# --------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="gateway", description="artifact gateway")
    ap.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the API server")
    run.add_argument("--config", help="TOML config file (else $GATEWAY_CONFIG, else defaults)")
    run.add_argument(
        "--replace",
        action="store_true",
        help="interactive use only: drain the running instance (SIGTERM), wait for it, start; "
        "refused under launchd/systemd",
    )
    run.set_defaults(func=_cmd_run)

    proxy = sub.add_parser("proxy", help="run the Open WebUI runs proxy")
    proxy.add_argument("--config", help="TOML config file (else $GATEWAY_CONFIG, else defaults)")
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

    health = sub.add_parser("health", help="poll a health URL until it answers 2xx")
    health.add_argument("url", help="e.g. http://127.0.0.1:8642/health")
    health.add_argument("--wait", action="store_true", help="keep trying (default 30 tries)")
    health.add_argument("--interval", type=float, default=1.0, help="seconds between tries")
    health.add_argument("--tries", type=int, default=None, help="how many tries at most")
    health.add_argument("--timeout", type=float, default=2.0, help="seconds per try")
    health.set_defaults(func=_cmd_health)

    service = sub.add_parser("service", help="launchd/systemd service definitions")
    ssub = service.add_subparsers(dest="service_command", required=True)
    render = ssub.add_parser("render", help="write a launchd plist or a systemd unit")
    render.add_argument("kind", choices=["launchd", "systemd"])
    render.add_argument("--role", choices=["api", "proxy"], default="api")
    render.add_argument("--config", help="config file the service uses (else $GATEWAY_CONFIG)")
    render.add_argument("--out", help="write here instead of stdout")
    render.add_argument("--executable", help="the gateway executable (default: this one)")
    render.add_argument("--label", help="launchd label (default com.artifact-gateway.<role>)")
    render.add_argument(
        "--log-dir", help="launchd log directory (default ~/Library/Logs/artifact-gateway)"
    )
    render.set_defaults(func=_cmd_service_render)
    doctor = ssub.add_parser("doctor", help="compare the plist on disk with launchctl print")
    doctor.add_argument("--plist", help="default ~/Library/LaunchAgents/<label>.plist")
    doctor.add_argument(
        "--launchctl-print",
        metavar="FILE",
        help="saved `launchctl print gui/<uid>/<label>` output, - for stdin (default: run it, macOS)",
    )
    doctor.add_argument("--label", help="default: the plist's Label, else com.artifact-gateway.api")
    doctor.add_argument("--config", help="config file, to check the exit timeout against the drain")
    doctor.add_argument("--json", action="store_true", help="machine-readable findings")
    doctor.set_defaults(func=_cmd_service_doctor)

    smoke = sub.add_parser("smoke", help="end-to-end self-test of a running gateway")
    smoke.add_argument("base_url", help="e.g. http://127.0.0.1:8642")
    smoke.add_argument("--key", help="a bearer key of the gateway (else $GATEWAY_SMOKE_KEY)")
    smoke.add_argument("--mode", choices=["private", "public", "both"], default="both")
    smoke.add_argument("--timeout", type=float, default=10.0)
    smoke.set_defaults(func=_cmd_smoke)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # servers log their work; client commands print their own results
    level = logging.INFO if args.command in ("run", "proxy", "demo") else logging.WARNING
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        rc: int = args.func(args)
        return rc
    except ConfigError as exc:
        _err(exc.message)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
