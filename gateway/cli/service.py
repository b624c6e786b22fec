"""``gateway service render|doctor``: launchd/systemd service definitions."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from gateway.cli.common import err, help_text
from gateway.core.errors import ConfigError
from gateway.ops.lock import EXIT_USAGE


def _cmd_service_render(args: argparse.Namespace) -> int:
    from gateway.ops.config import load_config
    from gateway.ops.supervisor import ServiceSpec, default_executable, installation

    raw = args.config or os.environ.get("GATEWAY_CONFIG")
    if not raw:
        err(
            "a service needs an explicit config file: pass --config PATH (or set "
            "GATEWAY_CONFIG), e.g. `gateway config example > ~/.config/artifact-gateway/"
            "gateway.toml`, edit it, then `gateway service render "
            f"{args.kind} --config ~/.config/artifact-gateway/gateway.toml`. The service "
            "must not depend on a shell's environment."
        )
        return EXIT_USAGE
    config_path = Path(raw).expanduser().absolute()
    cfg = load_config(config_path, env={})  # what the service will see, not this shell
    exe = Path(args.executable).expanduser().absolute() if args.executable else default_executable()
    if exe is None:
        err("cannot find the `gateway` executable; pass --executable PATH")
        return 1
    which = "given with --executable" if args.executable else installation()
    err(f"the service runs {exe} ({which})")
    spec = ServiceSpec(
        role=args.role,
        executable=exe,
        config_path=config_path,
        drain_timeout=cfg.server.drain_timeout_seconds,
        label=args.label or "",
        log_dir=Path(args.log_dir).expanduser().absolute() if args.log_dir else None,
    )
    return _write_definition(args, spec, cfg)


def _write_definition(args: argparse.Namespace, spec: Any, cfg: Any) -> int:
    from gateway.ops.supervisor import render_launchd, render_systemd, systemd_unit_name

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
        err(
            f"wrote {out}. Load it (or reload after a change) with:\n"
            f"  launchctl bootout gui/{uid}/{spec.the_label} 2>/dev/null; "
            f"launchctl bootstrap gui/{uid} {out}\n"
            f"then: gateway health http://{cfg.server.bind}/health --wait && "
            f"gateway service doctor --plist {out}"
        )
    else:
        err(
            f"wrote {out}. Then: systemctl --user daemon-reload && "
            f"systemctl --user enable --now {systemd_unit_name(args.role)}"
        )
    return 0


def _read_plist(args: argparse.Namespace) -> tuple[Path, dict[str, Any] | None]:
    """The plist to compare (``--plist``, else the default path of ``--label``)."""
    import plistlib

    from gateway.ops.supervisor import default_label

    default = f"~/Library/LaunchAgents/{args.label or default_label('api')}.plist"
    plist_path = Path(args.plist or default).expanduser()
    if not plist_path.exists():
        if args.plist:
            raise _Refused(f"{plist_path} does not exist", 1)
        return plist_path, None
    try:
        with plist_path.open("rb") as fh:
            return plist_path, plistlib.load(fh)
    except (plistlib.InvalidFileException, ValueError, OSError) as exc:
        raise _Refused(
            f"{plist_path} is not a valid plist: {exc} (check with `plutil -lint`)", 1
        ) from None


class _Refused(Exception):
    def __init__(self, message: str, rc: int) -> None:
        super().__init__(message)
        self.rc = rc


def _launchctl_text(args: argparse.Namespace, label: str) -> str:
    import subprocess

    if args.launchctl_print == "-":
        return sys.stdin.read()
    if args.launchctl_print:
        return Path(args.launchctl_print).read_text(encoding="utf-8")
    if sys.platform != "darwin":
        raise _Refused(
            "not macOS: pass --launchctl-print FILE (or - for stdin) with the output of "
            f"`launchctl print gui/$(id -u)/{label}` captured on the Mac",
            EXIT_USAGE,
        )
    proc = subprocess.run(
        ["launchctl", "print", f"gui/{os.getuid()}/{label}"],
        capture_output=True,
        text=True,
        check=False,
        timeout=15,
    )
    return proc.stdout + proc.stderr


def _job_config(args: argparse.Namespace, plist: dict[str, Any] | None) -> str | None:
    """The config file of the job: ``--config``, else the plist's ``--config``/env."""
    if args.config:
        return str(Path(args.config).expanduser().absolute())
    if plist is None:
        return None
    cargs = [str(a) for a in plist.get("ProgramArguments", [])]
    if "--config" in cargs[:-1]:
        return cargs[cargs.index("--config") + 1]
    found = dict(plist.get("EnvironmentVariables", {})).get("GATEWAY_CONFIG")
    return str(found) if found else None


def _drain_timeout(config_file: str | None) -> float | None:
    if not config_file or not Path(config_file).expanduser().exists():
        return None
    from gateway.ops.config import load_config

    try:
        return load_config(config_file, env={}).server.drain_timeout_seconds
    except ConfigError:
        return None


def _cmd_service_doctor(args: argparse.Namespace) -> int:
    import json
    from dataclasses import asdict

    from gateway.ops.supervisor import (
        LaunchdJob,
        default_label,
        diagnose,
        format_report,
        parse_launchctl_print,
    )

    try:
        plist_path, plist = _read_plist(args)
        label = args.label or str((plist or {}).get("Label") or "") or default_label("api")
        live = parse_launchctl_print(_launchctl_text(args, label))
    except _Refused as refused:
        err(str(refused))
        return refused.rc
    except ValueError as exc:
        err(str(exc))
        return 1
    config_file = _job_config(args, plist)
    findings = diagnose(
        plist,
        live,
        plist_path=str(plist_path),
        domain=live.domain if isinstance(live, LaunchdJob) and live.domain else None,
        drain_timeout=_drain_timeout(config_file),
        config_path=config_file,
    )
    if args.json:
        print(json.dumps([asdict(f) for f in findings], indent=2))
    else:
        sys.stdout.write(format_report(findings, live, str(plist_path)))
    return 1 if any(f.severity == "error" for f in findings) else 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    service = sub.add_parser(
        "service",
        **help_text(
            "service definitions for launchd and systemd, and a launchd doctor",
            "gateway service render launchd --config ~/.config/artifact-gateway/gateway.toml "
            "--out ~/Library/LaunchAgents/com.artifact-gateway.api.plist",
            "gateway service doctor",
        ),
    )
    ssub = service.add_subparsers(dest="service_command", required=True, metavar="COMMAND")
    render = ssub.add_parser(
        "render",
        **help_text(
            "write a launchd plist or a systemd user unit",
            "gateway service render launchd --config ~/.config/artifact-gateway/gateway.toml "
            "--out ~/Library/LaunchAgents/com.artifact-gateway.api.plist",
            "gateway service render systemd --role proxy --config /etc/artifact-gateway/gateway.toml",
            details="For `gateway run` (--role api) or `gateway proxy` (--role proxy): the absolute\n"
            "executable, --config with an absolute path, restart on exit, a stop timeout\n"
            "above the drain, never --replace.",
        ),
    )
    render.add_argument(
        "kind", choices=["launchd", "systemd"], help="launchd (macOS) or systemd (Linux, --user)"
    )
    render.add_argument("--role", choices=["api", "proxy"], default="api", help="default api")
    render.add_argument(
        "--config", metavar="FILE", help="config file the service uses (else $GATEWAY_CONFIG)"
    )
    render.add_argument("--out", metavar="FILE", help="write here instead of stdout")
    render.add_argument("--executable", help="the gateway executable (default: this one)")
    render.add_argument("--label", help="launchd label (default com.artifact-gateway.<role>)")
    render.add_argument(
        "--log-dir", help="launchd log directory (default ~/Library/Logs/artifact-gateway)"
    )
    render.set_defaults(func=_cmd_service_render)
    doctor = ssub.add_parser(
        "doctor",
        **help_text(
            "compare the plist on disk with the job launchd has loaded",
            "gateway service doctor",
            "gateway service doctor --plist ./com.artifact-gateway.api.plist "
            "--launchctl-print saved.txt",
            details="Explains what it finds (not loaded, a stale definition, --replace, flapping,\n"
            "not running, a stop timeout below the drain) with the commands that fix it.",
        ),
    )
    doctor.add_argument("--plist", help="default ~/Library/LaunchAgents/<label>.plist")
    doctor.add_argument(
        "--launchctl-print",
        metavar="FILE",
        help="saved `launchctl print gui/<uid>/<label>` output, - for stdin (default: run it, macOS)",
    )
    doctor.add_argument("--label", help="default: the plist's Label, else com.artifact-gateway.api")
    doctor.add_argument(
        "--config",
        metavar="FILE",
        help="the job's config file (default: the plist's --config), for the fix lines and "
        "to check the exit timeout against the drain",
    )
    doctor.add_argument("--json", action="store_true", help="machine-readable findings")
    doctor.set_defaults(func=_cmd_service_doctor)
