#!/usr/bin/env python3
"""Newcomer entry point: `python3 dev.py run` / `python3 dev.py test`.

Needs only Python >= 3.11 and access to the package registry. On first use it
creates `.venv/` beside this file and installs the project with its test and postgres extras;
later runs reuse it (re-installing when pyproject.toml changed). `test` then installs
what the selected tests need and nothing else (tests/needs.py decides): as root,
Debian's `postgresql` for the PostgreSQL tests, `valgrind` for the instruction-count
benchmark's test, `chromium` and Open WebUI 0.12.4 in a cached venv outside the clone
(`tests/e2e/owui/install.py`) for the browser tests (marker `openwebui`), the Hermes
agent (`tests/e2e/hermes/install.py`, when present) for marker `hermes`. `setup`
installs all of it. Set `GATEWAY_SKIP_OPENWEBUI_INSTALL=1` (or
`GATEWAY_SKIP_HERMES_INSTALL=1`) to skip one (those tests then skip, or fail under CI=true).

Signals: SIGTERM, SIGINT or SIGHUP sent to dev.py's own PID at any moment (while the
venv is made, while pip or an installer runs, while the demo or the tests run) stop
dev.py and everything it started, as `gateway run` stops: the running child gets its
stop signal (the demo drains, pytest stops after the test it interrupts and tears its
fixtures down), leftovers are killed, and dev.py ends as that command did, as a shell
reports a job that handled the signal: 0 for the demo that drained, 2 for pytest
(interrupted); by the same signal when it came before the command started or the
command died by it. In a terminal the child has the keyboard, so
Ctrl-C and Ctrl-Z reach it as if the shell had started it. See tests/children.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import venv
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.children import Supervisor  # noqa: E402  (standard library only)
from tests.needs import NEEDS, static_needs  # noqa: E402

VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / ("python.exe" if os.name == "nt" else "python")
LINTED = ("gateway", "harness", "tests", "integrations", "dev.py")
STAMP = VENV / ".installed-pyproject-sha256"
#: how long `gateway demo` may drain (its drain_timeout_seconds is 10) and pytest
#: may tear down (servers, Open WebUI, PostgreSQL) after dev.py is told to stop
DEMO_GRACE = 20.0
PYTEST_GRACE = 60.0


@dataclass(frozen=True)
class Prerequisite:
    """An install script of the tests (``SCRIPT``: no argument installs or reuses,
    ``--check`` exits 0 when installed, 1 when not), run when a selected test needs it."""

    need: str
    script: str
    skip_env: str

    @property
    def path(self) -> Path:
        return ROOT / self.script

    def skipped(self) -> bool:
        return os.environ.get(self.skip_env, "") not in ("", "0")


PREREQUISITES = (
    Prerequisite("openwebui", "tests/e2e/owui/install.py", "GATEWAY_SKIP_OPENWEBUI_INSTALL"),
    Prerequisite("hermes", "tests/e2e/hermes/install.py", "GATEWAY_SKIP_HERMES_INSTALL"),
)
#: the Debian package each need brings (one apt-get run for all)
SYSTEM_PACKAGES = {"postgres": "postgresql", "openwebui": "chromium", "valgrind": "valgrind"}


def _pip(sup: Supervisor, *args: str) -> None:
    """Run pip quietly: its output (setuptools and wheel chatter) shows only on failure."""
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    done = sup.run([str(PY), "-m", "pip", *args], capture=True, env=env)
    if done.returncode != 0:
        print(flush=True)  # end the progress line
        sys.stderr.write(done.output)
        sys.exit(f"dev.py: `pip {' '.join(args)}` failed (exit {done.returncode}); output above")


def ensure_venv(sup: Supervisor) -> None:
    """``.venv`` with the project installed; made again from scratch when a previous
    attempt did not finish (the stamp is written last)."""
    if sys.version_info < (3, 11):  # noqa: UP036 - dev.py runs under whatever python3 is
        sys.exit(f"artifact-gateway needs Python 3.11 or newer (found {sys.version.split()[0]})")
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    fresh = not (PY.exists() and STAMP.exists())
    if not fresh and STAMP.read_text().strip() == digest:
        return
    what = (
        "first run: creating .venv and installing"
        if fresh
        else "pyproject.toml changed: reinstalling"
    )
    print(
        f"dev.py: {what} artifact-gateway[test,postgres] (a minute or so) ...", end=" ", flush=True
    )
    t0 = time.monotonic()
    if fresh:
        # pip comes from ensurepip as a child of ours (venv's with_pip would run it
        # where a signal could not stop it)
        venv.EnvBuilder(with_pip=False, clear=True).create(VENV)
        sup.check()
        _pip_bootstrap(sup)
    _pip(sup, "install", "-q", "--upgrade", "pip")
    _pip(sup, "install", "-q", "-e", f"{ROOT}[test,postgres]")
    STAMP.write_text(digest)
    print(f"done in {time.monotonic() - t0:.0f} s", flush=True)


def _pip_bootstrap(sup: Supervisor) -> None:
    done = sup.run([str(PY), "-m", "ensurepip", "--upgrade", "--default-pip"], capture=True)
    if done.returncode != 0:
        sys.stderr.write(done.output)
        sys.exit(f"dev.py: ensurepip failed (exit {done.returncode}); output above")


def _pg_server_present() -> bool:
    """initdb, pg_ctl and postgres in ``$GATEWAY_PG_BINDIR`` or Debian's layout."""
    dirs = [Path(os.environ["GATEWAY_PG_BINDIR"])] if os.environ.get("GATEWAY_PG_BINDIR") else []
    dirs += sorted(Path("/usr/lib/postgresql").glob("*/bin"))
    return any(all((d / n).exists() for n in ("initdb", "pg_ctl", "postgres")) for d in dirs)


def _package_present(package: str) -> bool:
    if package == "postgresql":
        return _pg_server_present()
    if package == "chromium":
        return Path("/usr/bin/chromium").exists()
    return shutil.which(package) is not None


def _prerequisite(need: str) -> Prerequisite | None:
    return next((p for p in PREREQUISITES if p.need == need and p.path.exists()), None)


def _missing(sup: Supervisor, needs: set[str]) -> set[str]:
    """The needs that are neither installed nor skipped by their variable."""
    out = set()
    for need in needs:
        pre = _prerequisite(need)
        if pre is not None and pre.skipped():
            continue
        package = SYSTEM_PACKAGES.get(need)
        if package is not None and not _package_present(package):
            out.add(need)
        elif pre is not None:
            check = sup.run([sys.executable, str(pre.path), "--check"], capture=True, cwd=ROOT)
            if check.returncode != 0:
                out.add(need)
    return out


_SELECTING = ("-k", "-m", "--deselect", "--lf", "--last-failed", "--ff", "--sw")


def needed_by(sup: Supervisor, args: list[str]) -> set[str]:
    """What the tests ``args`` select need that is missing. The file-level scan is
    instant; only when it finds something missing and ``args`` select tests within
    files does pytest collect them to tell exactly (a few seconds)."""
    missing = _missing(sup, static_needs(args))
    selecting = any(a.startswith(_SELECTING) or "::" in a for a in args)
    if not missing or not selecting:
        return missing
    with tempfile.TemporaryDirectory(prefix="dev-needs-") as tmp:
        report = Path(tmp) / "needs.json"
        argv = [str(PY), "-m", "pytest", "-p", "tests.needs", "--collect-only", "-q"]
        done = sup.run(
            [*argv, "--needs-report", str(report), *args],
            capture=True,
            cwd=ROOT,
            stop_signal=signal.SIGINT,
        )
        if done.returncode != 0 or not report.exists():
            return missing  # the run itself will show the collection error
        exact = set(json.loads(report.read_text())["needs"])
    return missing & exact


def ensure_system_packages(sup: Supervisor, needs: set[str]) -> None:
    """Debian's packages of ``needs`` with one ``apt-get update``, as root only.

    The package must not start a cluster of its own (``policy-rc.d`` answers 101 while
    it installs); the tests start and stop theirs. Not root, or no apt-get: a note, and
    the tests that need them skip (or fail under ``CI=true``) saying why.
    """
    missing = sorted(
        SYSTEM_PACKAGES[n]
        for n in needs
        if n in SYSTEM_PACKAGES and not _package_present(SYSTEM_PACKAGES[n])
    )
    apt = shutil.which("apt-get")
    if not missing:
        return
    if apt is None or not hasattr(os, "geteuid") or os.geteuid() != 0:
        print(
            f"note: {' and '.join(missing)} missing; as root: apt-get install {' '.join(missing)}"
        )
        return
    print(f"dev.py: installing Debian's {' and '.join(missing)} ...", end=" ", flush=True)
    t0 = time.monotonic()
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    policy = Path("/usr/sbin/policy-rc.d")
    made_policy = not policy.exists()
    if made_policy:
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    try:
        for args in (
            ["update", "-q"],
            ["install", "-y", "-q", "--no-install-recommends", *missing],
        ):
            done = sup.run([apt, *args], capture=True, env=env, grace=60.0)
            if done.returncode != 0:
                print(flush=True)
                sys.stderr.write(done.output[-8000:])
                print(f"note: apt-get {args[0]} failed (exit {done.returncode}); output above")
                return
    finally:
        if made_policy:
            policy.unlink(missing_ok=True)
    print(f"done in {time.monotonic() - t0:.0f} s", flush=True)


def ensure_prerequisites(sup: Supervisor, needs: set[str]) -> None:
    """The install scripts of ``needs``; a failure only makes those tests skip/fail."""
    for pre in PREREQUISITES:
        if pre.need not in needs or pre.skipped() or not pre.path.exists():
            continue
        done = sup.run([sys.executable, str(pre.path)], cwd=ROOT, grace=60.0)
        if done.returncode != 0:
            print(f"note: {pre.script} did not finish; the tests that need it will say why")


def ensure_needs(sup: Supervisor, needs: set[str]) -> None:
    if not needs:
        return
    ensure_system_packages(sup, needs)
    ensure_prerequisites(sup, needs)


def run_command(sup: Supervisor, argv: list[str], *, stop_signal: int | None, grace: float) -> int:
    """The command dev.py was asked for: it gets the terminal (Ctrl-C and Ctrl-Z reach
    it as if the shell had started it, and it ends its own way) and, when dev.py is
    told to stop, ``stop_signal`` (None: the signal dev.py got). Its status is dev.py's,
    or dev.py dies by the signal that killed it."""
    done = sup.run(
        argv, cwd=ROOT, foreground=True, stop_signal=stop_signal, grace=grace, raise_on_stop=False
    )
    return done.returncode if done.returncode >= 0 else 128 - done.returncode


def run(argv: list[str]) -> int:
    """``argv`` as dev.py's command, under a supervisor of its own (see module docstring)."""
    with Supervisor() as sup:
        return run_command(sup, argv, stop_signal=None, grace=DEMO_GRACE)


RUN_HELP = """usage: python3 dev.py run [--port P] [--upstream-port P] [--proxy-port P]
                         [--log-format text|json]

Creates .venv (first run), then runs `gateway demo`: a scripted demo upstream, the
gateway and the Open WebUI runs proxy in one process, no LLM, throw-away state.

  --port P           the gateway (API server) port (default 8642)
  --upstream-port P  the demo upstream's port (default 9000)
  --proxy-port P     the Open WebUI runs proxy's port (default 8653)
  --log-format F     text (default) or json log lines on stderr

Once .venv exists, `python3 dev.py run --help` shows `gateway demo --help`."""


def dispatch(sup: Supervisor, cmd: str, rest: list[str]) -> int:
    if cmd == "run":
        if {"-h", "--help"} & set(rest) and not PY.exists():
            print(RUN_HELP)  # help without installing first
            return 0
        ensure_venv(sup)
        demo = [str(BIN / "gateway"), "demo", *rest]
        return run_command(sup, demo, stop_signal=None, grace=DEMO_GRACE)
    if cmd == "test":
        ensure_venv(sup)
        ensure_needs(sup, needed_by(sup, rest))
        # tests/progress.py: one summary line per test folder as it finishes
        # (tests/stopping.py: a stop signal stops the whole run, wherever the tests are)
        pytest = [str(PY), "-m", "pytest", "-p", "tests.progress", "-p", "tests.stopping", *rest]
        # SIGTERM: tests/conftest.py stops the session after the test it interrupts
        return run_command(sup, pytest, stop_signal=signal.SIGTERM, grace=PYTEST_GRACE)
    if cmd == "lint":
        ensure_venv(sup)
        rc = run_command(sup, [str(PY), "-m", "ruff", "check", *LINTED], stop_signal=None, grace=5)
        fmt = [str(PY), "-m", "ruff", "format", "--check", *LINTED]
        rc |= run_command(sup, fmt, stop_signal=None, grace=5)
        rc |= run_command(sup, [str(PY), "-m", "mypy"], stop_signal=None, grace=5)
        return rc
    if cmd == "bench":
        ensure_venv(sup)
        bench = [str(PY), "-m", "harness.bench", *rest]
        return run_command(sup, bench, stop_signal=signal.SIGINT, grace=PYTEST_GRACE)
    if cmd == "setup":
        ensure_venv(sup)
        ensure_needs(sup, _missing(sup, set(NEEDS)))
        return 0
    print(__doc__)
    print("commands: run | test [pytest args] | lint | bench [args] | setup")
    return 0 if cmd == "help" else 2


def main() -> int:
    cmd = sys.argv[1] if len(sys.argv) > 1 else "help"
    with Supervisor() as sup:
        return dispatch(sup, cmd, sys.argv[2:])


if __name__ == "__main__":
    raise SystemExit(main())
