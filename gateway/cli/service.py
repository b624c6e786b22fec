"""``gateway service render|doctor``: launchd/systemd service definitions."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from gateway.cli.common import err
from gateway.errors import ConfigError
from gateway.lock import EXIT_USAGE


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
        err("cannot find the `gateway` executable; pass --executable PATH")
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
            err(f"{plist_path} is not a valid plist: {exc} (check with `plutil -lint`)")
            return 1
        label = label or str(plist.get("Label") or "")
    elif args.plist:
        err(f"{plist_path} does not exist")
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
        err(
            "not macOS: pass --launchctl-print FILE (or - for stdin) with the output of "
            f"`launchctl print gui/$(id -u)/{label}` captured on the Mac"
        )
        return EXIT_USAGE
    try:
        live = parse_launchctl_print(text)
    except ValueError as exc:
        err(str(exc))
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


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
