"""Service definitions (launchd, systemd) and ``gateway service doctor``.

Render
------
:func:`render_launchd` and :func:`render_systemd` write the steady-state definition
of one role (``api`` = ``gateway run``, ``proxy`` = ``gateway proxy``): the absolute
``gateway`` executable, ``--config`` with an absolute path (also exported as
``GATEWAY_CONFIG``), restart on exit, a stop timeout above the drain timeout (so the
supervisor's SIGKILL never cuts a drain short), an open-file limit for many concurrent
streams (:data:`NOFILE_LIMIT`), and never ``--replace``
(:data:`gateway.ops.lock.REPLACE_LOOP` says why).

Doctor
------
launchd keeps the definition it read at ``bootstrap``; editing the plist changes
nothing until the job is booted out and bootstrapped again, and
``launchctl kickstart -k`` restarts the *loaded* (old) definition. :func:`diagnose`
compares the plist on disk with ``launchctl print gui/<uid>/<label>`` output
(:func:`parse_launchctl_print`, written against the macOS 14/15 format) and explains
what it finds: not loaded, stale definition, ``--replace`` in the arguments, flapping,
not running, a stop timeout shorter than the drain.
"""

from __future__ import annotations

import math
import os
import plistlib
import re
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gateway.ops.lock import EXIT_ALREADY_RUNNING, EXIT_USAGE

__all__ = [
    "LABEL_PREFIX",
    "Finding",
    "LaunchdJob",
    "NotLoaded",
    "ServiceSpec",
    "default_executable",
    "default_label",
    "diagnose",
    "format_report",
    "installation",
    "parse_launchctl_print",
    "render_launchd",
    "render_systemd",
    "stop_timeout",
    "systemd_unit_name",
]

Role = Literal["api", "proxy"]
ROLE_COMMAND: dict[str, str] = {"api": "run", "proxy": "proxy"}
LABEL_PREFIX = "com.artifact-gateway"
#: ``runs`` at or above this in one loaded lifetime is worth a look
FLAPPING_RUNS = 10
#: seconds between launchd respawns (launchd's default is 10 too)
THROTTLE_INTERVAL = 10
#: systemd: wait this long before restarting
RESTART_SEC = 2
#: margin above the drain timeout before the supervisor sends SIGKILL
STOP_MARGIN = 5
#: open-file limit of the service: a relayed stream holds two descriptors (client and
#: upstream connection), so server.max_connections = 16384 needs ~33,000; the gateway
#: also raises its soft limit to the hard one at start (macOS caps both at
#: kern.maxfilesperproc)
NOFILE_LIMIT = 65536


def default_label(role: str) -> str:
    return f"{LABEL_PREFIX}.{role}"


def systemd_unit_name(role: str) -> str:
    return f"artifact-gateway-{role}.service"


def stop_timeout(drain_timeout: float) -> int:
    """launchd ``ExitTimeOut`` / systemd ``TimeoutStopSec``: above the drain timeout."""
    return math.ceil(drain_timeout) + STOP_MARGIN


def default_executable() -> Path | None:
    """The ``gateway`` console script of the running interpreter's environment.

    ``sys.executable`` is not resolved: a venv's python is a symlink to the base
    interpreter, and resolving it would leave the venv.
    """
    here = Path(sys.executable).absolute().parent / "gateway"
    if here.is_file() and os.access(here, os.X_OK):
        return here
    found = shutil.which("gateway")
    return Path(found).absolute() if found else None


def installation() -> str:
    """How the running gateway's code is installed, in words (``service render`` says it,
    so an operator sees a service about to run a development clone)."""
    import importlib.metadata
    import json
    import sysconfig

    from gateway import __version__

    purelib = Path(sysconfig.get_paths()["purelib"]).resolve()
    code = Path(__file__).resolve().parent
    found = list(importlib.metadata.distributions(name="artifact-gateway", path=[str(purelib)]))
    direct = json.loads((found[0].read_text("direct_url.json") if found else None) or "{}")
    if direct.get("dir_info", {}).get("editable"):
        return (
            f"an editable install of the development clone at {code.parent}: the service "
            "will run that clone's code as it is checked out at each start (for a service, "
            "install the wheel: README, Install)"
        )
    if code.is_relative_to(purelib):
        return f"artifact-gateway {__version__}, installed in {sys.prefix}"
    return f"the code at {code.parent}, not installed in {sys.prefix}"


@dataclass(frozen=True)
class ServiceSpec:
    role: str
    executable: Path
    config_path: Path
    drain_timeout: float
    label: str = ""
    log_dir: Path | None = None  # launchd only; systemd logs to the journal
    working_directory: Path | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLE_COMMAND:
            raise ValueError(f"role must be one of {sorted(ROLE_COMMAND)}, not {self.role!r}")
        for name in ("executable", "config_path"):
            value: Path = getattr(self, name)
            if not value.is_absolute():
                raise ValueError(f"{name} must be an absolute path: {value}")

    @property
    def the_label(self) -> str:
        return self.label or default_label(self.role)

    @property
    def arguments(self) -> list[str]:
        """The command line: never ``--replace`` (see module docstring)."""
        return [str(self.executable), ROLE_COMMAND[self.role], "--config", str(self.config_path)]

    @property
    def workdir(self) -> Path:
        return self.working_directory or self.config_path.parent

    @property
    def log_path(self) -> Path:
        base = self.log_dir or Path("~/Library/Logs/artifact-gateway").expanduser()
        return base / f"{self.role}.log"


# --------------------------------------------------------------------------- render


def launchd_dict(spec: ServiceSpec) -> dict[str, Any]:
    log = str(spec.log_path)
    return {
        "Label": spec.the_label,
        "ProgramArguments": spec.arguments,
        "EnvironmentVariables": {
            "GATEWAY_CONFIG": str(spec.config_path),
            "PYTHONUNBUFFERED": "1",
        },
        "WorkingDirectory": str(spec.workdir),
        "RunAtLoad": True,
        "KeepAlive": True,
        "ThrottleInterval": THROTTLE_INTERVAL,
        "ExitTimeOut": stop_timeout(spec.drain_timeout),
        "SoftResourceLimits": {"NumberOfFiles": NOFILE_LIMIT},
        "StandardOutPath": log,
        "StandardErrorPath": log,
    }


def render_launchd(spec: ServiceSpec) -> bytes:
    """An XML plist for ``~/Library/LaunchAgents/<label>.plist``."""
    return plistlib.dumps(launchd_dict(spec), fmt=plistlib.FMT_XML, sort_keys=False)


def _systemd_quote(word: str, *, dollar: bool = True) -> str:
    """Quote one word for ExecStart= (``dollar``) or Environment= (no ``$`` expansion
    there); ``%`` specifiers are escaped in both."""
    word = word.replace("%", "%%")
    if dollar:
        word = word.replace("$", "$$")
    if word and not re.search(r'[\s"\'\\;]', word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_systemd(spec: ServiceSpec) -> str:
    """A unit for ``~/.config/systemd/user/`` (or ``/etc/systemd/system/`` with User=)."""
    exec_start = " ".join(_systemd_quote(a) for a in spec.arguments)
    what = "API server" if spec.role == "api" else "Open WebUI runs proxy"
    timeout = stop_timeout(spec.drain_timeout)
    lines = [
        "# Rendered by `gateway service render systemd`; re-render rather than edit.",
        "# Never add --replace here: under Restart=always it starts a restart loop.",
        "[Unit]",
        f"Description=artifact gateway ({what})",
        "After=network-online.target",
        "Wants=network-online.target",
        "StartLimitIntervalSec=120",
        "StartLimitBurst=10",
        "",
        "[Service]",
        "# READY=1 is sent once every listener is bound; STOPPING=1 when the drain starts",
        "Type=notify",
        "NotifyAccess=main",
        f"ExecStart={exec_start}",
        f"Environment={_systemd_quote('GATEWAY_CONFIG=' + str(spec.config_path), dollar=False)}",
        "Environment=PYTHONUNBUFFERED=1",
        # taken literally up to the end of the line (no quotes), specifiers expanded
        f"WorkingDirectory={str(spec.workdir).replace('%', '%%')}",
        "Restart=always",
        f"RestartSec={RESTART_SEC}",
        f"# exit {EXIT_USAGE} = bad configuration or invocation: restarting cannot fix it",
        f"RestartPreventExitStatus={EXIT_USAGE}",
        "# SIGTERM to the main process only; SIGKILL to everything left after the timeout",
        "KillMode=mixed",
        "KillSignal=SIGTERM",
        f"# drain_timeout_seconds = {spec.drain_timeout:g}: stop must wait longer than the drain",
        f"TimeoutStopSec={timeout}",
        "# two file descriptors per relayed stream (client + upstream); see docs/operations.md",
        f"LimitNOFILE={NOFILE_LIMIT}",
        f"SyslogIdentifier=artifact-gateway-{spec.role}",
        "",
        "[Install]",
        "WantedBy=default.target",
        "",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------- launchctl print


@dataclass(frozen=True)
class NotLoaded:
    """``launchctl print`` could not find the service."""

    label: str
    domain: str
    text: str


@dataclass
class LaunchdJob:
    """The top-level facts of ``launchctl print gui/<uid>/<label>``."""

    target: str = ""
    fields: dict[str, str] = field(default_factory=dict)
    arguments: list[str] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)

    def get(self, key: str) -> str | None:
        return self.fields.get(key)

    @property
    def label(self) -> str:
        return self.target.rsplit("/", 1)[-1] if self.target else ""

    @property
    def domain(self) -> str:
        return self.target.rsplit("/", 1)[0] if "/" in self.target else ""

    @property
    def state(self) -> str:
        return self.fields.get("state", "unknown")

    @property
    def pid(self) -> int | None:
        return _int(self.fields.get("pid"))

    @property
    def runs(self) -> int | None:
        return _int(self.fields.get("runs"))

    @property
    def exit_timeout(self) -> int | None:
        return _int((self.fields.get("exit timeout") or "").split(" ")[0])

    @property
    def minimum_runtime(self) -> int | None:
        return _int(self.fields.get("minimum runtime"))

    @property
    def last_exit_code(self) -> int | None:
        """``0``, ``78: EX_CONFIG`` -> 78; ``(never exited)`` -> None."""
        raw = self.fields.get("last exit code", "")
        m = re.match(r"-?\d+", raw)
        return int(m.group()) if m else None

    @property
    def last_signal(self) -> int | None:
        """``Killed: 9`` -> 9."""
        raw = self.fields.get("last terminating signal", "")
        m = re.search(r":\s*(\d+)\s*$", raw)
        return int(m.group(1)) if m else None

    @property
    def properties(self) -> set[str]:
        return {p.strip() for p in self.fields.get("properties", "").split("|") if p.strip()}


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    value = value.strip()
    return int(value) if re.fullmatch(r"-?\d+", value) else None


_NOT_FOUND = re.compile(
    r'Could not find service "(?P<label>[^"]*)" in domain for (?:user )?(?P<domain>.*)'
)


def parse_launchctl_print(text: str) -> LaunchdJob | NotLoaded:
    """Parse ``launchctl print <service-target>`` output (stdout + stderr).

    Only the top level of the service block is kept (nested blocks such as
    ``resource coalition`` repeat keys like ``state``), plus the ``arguments`` and
    ``environment`` blocks. Indentation may be tabs or spaces.
    """
    m = _NOT_FOUND.search(text)
    if m is not None:
        return NotLoaded(m.group("label"), m.group("domain").strip(), text)
    job = LaunchdJob()
    depth = 0
    block: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.endswith("{") and "=" in line:
            name = line[:-1].rsplit("=", 1)[0].strip()
            if depth == 0:
                job.target = name
            elif depth == 1:
                block = name
            depth += 1
            continue
        if line == "}":
            depth = max(0, depth - 1)
            if depth <= 1:
                block = None
            continue
        if depth == 1:
            key, sep, value = line.partition(" = ")
            if sep:
                job.fields[key.strip()] = value.strip()
        elif depth == 2 and block == "arguments":
            job.arguments.append(line)
        elif depth == 2 and block == "environment":
            key, sep, value = line.partition(" => ")
            if sep:
                job.environment[key.strip()] = value.strip()
    if not job.target:
        raise ValueError("this does not look like `launchctl print` output for one service")
    return job


# --------------------------------------------------------------------------- diagnose

Severity = Literal["ok", "warn", "error"]


@dataclass(frozen=True)
class Finding:
    code: str
    severity: Severity
    title: str
    details: tuple[str, ...] = ()
    fix: tuple[str, ...] = ()


_EXIT_MEANING = {
    0: "it exited cleanly (a drain after SIGTERM, or `kill -TERM` by someone)",
    1: "it failed; the traceback is in the log file",
    EXIT_USAGE: "bad configuration or invocation; the log names the config key",
    EXIT_ALREADY_RUNNING: (
        "another gateway instance holds the state directory's lock (probably one started "
        "by hand: find it with `cat <state_dir>/gateway.lock` and stop it)"
    ),
    78: (
        "EX_CONFIG from launchd itself: the job could not be spawned -- the program path "
        "does not exist or is not executable, or the directory of StandardOutPath/"
        "StandardErrorPath does not exist"
    ),
}


def _bootout_bootstrap(domain: str, label: str, plist_path: str) -> tuple[str, ...]:
    return (
        f"launchctl bootout {domain}/{label}",
        f"launchctl bootstrap {domain} {plist_path}",
    )


def _fmt_args(args: Sequence[str]) -> str:
    return " ".join(a if a and " " not in a else repr(a) for a in args)


@dataclass(frozen=True)
class _Job:
    """What the fix lines name: the launchd target, the plist, the config and the role."""

    domain: str
    label: str
    plist_path: str
    config: str
    role: str

    def reload(self) -> tuple[str, ...]:
        return _bootout_bootstrap(self.domain, self.label, self.plist_path)

    def render(self) -> str:
        return (
            f"gateway service render launchd --role {self.role} --config {self.config} "
            f"--out {self.plist_path}"
        )


def _config_and_role(
    plist: Mapping[str, Any] | None, live: LaunchdJob | NotLoaded, config_path: str | None
) -> tuple[str, str]:
    """The config file and role the job runs with: ``config_path`` if given, else the
    plist's (or the loaded job's) ``--config`` argument or ``GATEWAY_CONFIG``."""
    sources: list[tuple[list[str], Mapping[str, Any]]] = []
    if plist is not None:
        sources.append(
            (
                [str(a) for a in plist.get("ProgramArguments", [])],
                dict(plist.get("EnvironmentVariables", {})),
            )
        )
    if isinstance(live, LaunchdJob):
        sources.append((live.arguments, live.environment))
    config, role = config_path, None
    for args, env in sources:
        if role is None and len(args) > 1 and args[1] in ("run", "proxy"):
            role = "proxy" if args[1] == "proxy" else "api"
        if config is None and "--config" in args[:-1]:
            config = args[args.index("--config") + 1]
        if config is None and env.get("GATEWAY_CONFIG"):
            config = str(env["GATEWAY_CONFIG"])
    return config or "<config file>", role or "api"


def diagnose(
    plist: Mapping[str, Any] | None,
    live: LaunchdJob | NotLoaded,
    *,
    plist_path: str = "<plist>",
    domain: str | None = None,
    drain_timeout: float | None = None,
    config_path: str | None = None,
) -> list[Finding]:
    """Compare the plist on disk with the loaded job and explain every problem.

    The fix lines name the job's real config file: ``config_path``, else the one in the
    plist or the loaded job's arguments.
    """
    label = str(plist.get("Label")) if plist and plist.get("Label") else ""
    config, role = _config_and_role(plist, live, config_path)
    if isinstance(live, NotLoaded):
        the_domain = domain or _domain_from_not_found(live.domain)
        job = _Job(the_domain, label or live.label, plist_path, config, role)
        return [_not_loaded(plist, job)]
    job = _Job(
        domain or live.domain or f"gui/{os.getuid()}", live.label or label, plist_path, config, role
    )
    findings: list[Finding] = []
    if plist is not None:
        findings += _plist_findings(plist, live, job)
    if "--replace" in live.arguments:
        findings.append(_replace_in_arguments(live, job))
    findings += _flapping(live, job)
    if live.state != "running":
        findings.append(_not_running(live, job))
    if (
        drain_timeout is not None
        and live.exit_timeout is not None
        and live.exit_timeout <= drain_timeout
    ):
        findings.append(_exit_timeout_too_short(live.exit_timeout, drain_timeout))
    if not any(f.severity == "error" for f in findings):
        title = f"{job.label} is running as defined (pid {live.pid}, runs {live.runs or 0})"
        findings.insert(0, Finding("OK", "ok", title))
    return findings


def _not_loaded(plist: Mapping[str, Any] | None, job: _Job) -> Finding:
    details = [
        "launchd does not know this job: it was never bootstrapped, was booted "
        "out, or its plist was refused at load time."
    ]
    fix = [f"plutil -lint {job.plist_path}", f"launchctl bootstrap {job.domain} {job.plist_path}"]
    if plist is None:
        details.append("There is no plist on disk either: render one first.")
        fix.insert(0, job.render())
    return Finding(
        "NOT_LOADED",
        "error",
        f"{job.label} is not loaded in {job.domain}",
        tuple(details),
        tuple(fix),
    )


def _drift(plist: Mapping[str, Any], live: LaunchdJob) -> list[str]:
    """How the loaded definition differs from the plist on disk, one line per field."""
    drift: list[str] = []
    want_args = [str(a) for a in plist.get("ProgramArguments", [])]
    want_program = str(plist.get("Program") or (want_args[0] if want_args else ""))
    if want_args and live.arguments and want_args != live.arguments:
        drift += [
            "arguments differ:",
            f"  plist: {_fmt_args(want_args)}",
            f"  live:  {_fmt_args(live.arguments)}",
        ]
    live_program = live.get("program")
    if want_program and live_program and want_program != live_program:
        drift.append(f"program: plist {want_program}  live {live_program}")
    want_env = {str(k): str(v) for k, v in dict(plist.get("EnvironmentVariables", {})).items()}
    for key, value in sorted(want_env.items()):
        have = live.environment.get(key)
        if have != value:
            drift.append(f"environment {key}: plist {value!r}  live {have!r}")
    for pkey, lkey in (("StandardOutPath", "stdout path"), ("StandardErrorPath", "stderr path")):
        if pkey in plist and live.get(lkey) not in (None, str(plist[pkey])):
            drift.append(f"{lkey}: plist {plist[pkey]}  live {live.get(lkey)}")
    wd = live.get("working directory")
    if "WorkingDirectory" in plist and wd is not None and wd != str(plist["WorkingDirectory"]):
        drift.append(f"working directory: plist {plist['WorkingDirectory']}  live {wd}")
    if "ExitTimeOut" in plist and live.exit_timeout not in (None, int(plist["ExitTimeOut"])):
        drift.append(f"exit timeout: plist {plist['ExitTimeOut']}  live {live.exit_timeout}")
    throttle = plist.get("ThrottleInterval")
    if throttle is not None and live.minimum_runtime not in (None, int(throttle)):
        drift.append(
            f"throttle: plist ThrottleInterval {throttle}  "
            f"live minimum runtime {live.minimum_runtime}"
        )
    if plist.get("KeepAlive") and live.properties and "keepalive" not in live.properties:
        drift.append("KeepAlive: set in the plist, missing from the loaded job's properties")
    return drift


def _plist_findings(plist: Mapping[str, Any], live: LaunchdJob, job: _Job) -> list[Finding]:
    findings: list[Finding] = []
    drift = _drift(plist, live)
    if drift:
        findings.append(
            Finding(
                "STALE_DEFINITION",
                "error",
                "the loaded job differs from the plist on disk",
                (
                    *drift,
                    "launchd keeps the definition it read at bootstrap. "
                    "`launchctl kickstart -k` restarts the job with that loaded (old) "
                    "definition, so it will NOT apply the plist; neither does editing "
                    "the file. Unload and load it again:",
                ),
                job.reload(),
            )
        )
    live_path = live.get("path")
    if live_path and job.plist_path != "<plist>" and Path(live_path) != Path(job.plist_path):
        findings.append(
            Finding(
                "OTHER_PLIST",
                "warn",
                "the job was loaded from another file than the plist checked here",
                (f"loaded from {live_path}", f"checked     {job.plist_path}"),
                (f"gateway service doctor --plist {live_path}",),
            )
        )
    if "--replace" in [str(a) for a in plist.get("ProgramArguments", [])]:
        findings.append(
            Finding(
                "REPLACE_IN_PLIST",
                "error",
                "the plist on disk runs `gateway run --replace`",
                (
                    "--replace is for interactive use: under KeepAlive it makes copies "
                    "take each other down in a restart loop.",
                ),
                (job.render(), *job.reload()),
            )
        )
    return findings


def _replace_in_arguments(live: LaunchdJob, job: _Job) -> Finding:
    return Finding(
        "REPLACE_IN_ARGUMENTS",
        "error",
        "the loaded job runs with --replace",
        (
            f"live arguments: {_fmt_args(live.arguments)}",
            "Every start SIGTERMs the instance that holds the lock; launchd "
            "(KeepAlive) then starts the job again, which replaces the other "
            "copy, and so on: a restart loop ('runs' climbs). Newer gateways "
            "refuse --replace under launchd (XPC_SERVICE_NAME is set) and exit 2, "
            "so KeepAlive respawns them every ThrottleInterval instead. The fix is the definition: render "
            "it without --replace and reload it (kickstart -k would restart the "
            "same loaded arguments).",
        ),
        (job.render(), *job.reload()),
    )


def _flapping(live: LaunchdJob, job: _Job) -> list[Finding]:
    runs = live.runs or 0
    sig = live.last_signal
    sig_text = live.get("last terminating signal")
    if sig != 9 and runs < FLAPPING_RUNS:
        return []
    details = [f"runs = {runs} since it was loaded"]
    if sig_text:
        details.append(f"last terminating signal = {sig_text}")
    if sig == 9:
        details.append(
            "SIGKILL (9) from launchd means the job did not exit within ExitTimeOut "
            f"(exit timeout = {live.exit_timeout}) after SIGTERM: a drain longer than "
            "the exit timeout, or a process stuck on a client that stopped reading. "
            "ExitTimeOut must be above server.drain_timeout_seconds (render sets "
            "drain + 5 s)."
        )
    if runs >= FLAPPING_RUNS:
        code = live.last_exit_code
        meaning = (
            f"; last exit code {code}: {_EXIT_MEANING.get(code, 'see the log')}"
            if code is not None
            else ""
        )
        details.append(
            f"launchd keeps restarting it (KeepAlive) and it keeps exiting{meaning}. Common "
            "causes here: --replace in the definition, a second gateway started by hand "
            f"holding the lock (exit 3), a bad config (exit 2: `gateway config check "
            f"--config {job.config}` names the key)."
        )
    return [
        Finding(
            "FLAPPING",
            "error" if sig == 9 or live.state != "running" else "warn",
            "the job is being restarted over and over"
            if runs >= FLAPPING_RUNS
            else "the job was killed with SIGKILL",
            tuple(details),
            (
                f"tail -n 50 {live.get('stderr path') or '<log file>'}",
                f"launchctl print {job.domain}/{job.label} | grep -E 'state|runs|last'",
            ),
        )
    ]


def _not_running(live: LaunchdJob, job: _Job) -> Finding:
    code = live.last_exit_code
    details = [f"state = {live.state}", f"last exit code = {live.get('last exit code')}"]
    if code is not None:
        details.append(_EXIT_MEANING.get(code, "see the log file"))
    if live.get("last terminating signal"):
        details.append(f"last terminating signal = {live.get('last terminating signal')}")
    if live.state == "spawn scheduled":
        details.append(
            "launchd will start it again once the throttle interval "
            f"(minimum runtime = {live.minimum_runtime}) has passed."
        )
    fix = [f"tail -n 50 {live.get('stderr path') or '<log file>'}"]
    if code == EXIT_USAGE:
        fix.append(f"gateway config check --config {job.config}")
    fix.append(f"launchctl kickstart {job.domain}/{job.label}")
    return Finding(
        "NOT_RUNNING", "error", f"{job.label} is loaded but not running", tuple(details), tuple(fix)
    )


def _exit_timeout_too_short(exit_timeout: int, drain_timeout: float) -> Finding:
    return Finding(
        "EXIT_TIMEOUT_TOO_SHORT",
        "warn",
        "launchd may SIGKILL the gateway before its drain ends",
        (f"exit timeout = {exit_timeout} s, drain_timeout_seconds = {drain_timeout:g} s",),
        (f"set ExitTimeOut to {stop_timeout(drain_timeout)} and reload",),
    )


def _domain_from_not_found(text: str) -> str:
    """``gui: 501`` -> ``gui/501``."""
    m = re.match(r"(\w+):\s*(\d+)", text)
    return f"{m.group(1)}/{m.group(2)}" if m else f"gui/{os.getuid()}"


def format_report(
    findings: Sequence[Finding], live: LaunchdJob | NotLoaded, plist_path: str
) -> str:
    lines: list[str] = []
    if isinstance(live, LaunchdJob):
        lines.append(f"service  {live.target}")
        lines.append(f"plist    {plist_path}")
        parts = [live.state + (f" (pid {live.pid})" if live.pid else "")]
        for key in ("runs", "last exit code", "last terminating signal"):
            if live.get(key):
                parts.append(f"{key} = {live.get(key)}")
        lines.append("state    " + ", ".join(parts))
    else:
        lines.append(f"service  {live.label} (not loaded)")
        lines.append(f"plist    {plist_path}")
    lines.append("")
    for f in findings:
        # "[OK] com.artifact-gateway.api is running ..."; "[ERROR] NOT_RUNNING: ..."
        code = "" if f.severity == "ok" else f"{f.code}: "
        lines.append(f"[{f.severity.upper()}] {code}{f.title}")
        lines.extend(f"    {d}" for d in f.details)
        if f.fix:
            lines.append("  fix:")
            lines.extend(f"    {c}" for c in f.fix)
    return "\n".join(lines) + "\n"
