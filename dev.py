#!/usr/bin/env python3
"""Newcomer entry point: `python3 dev.py run` / `python3 dev.py test`.

Needs only Python >= 3.11 and access to the package registry. On first use it
creates `.venv/` beside this file and installs the project with its test and postgres extras;
later runs reuse it (re-installing when pyproject.toml changed). `test` (and `setup`)
also make sure what the tests run is there: as root, Debian's `postgresql` and
`chromium` (one apt-get update; the package starts no cluster, the tests run their
own), then Open WebUI 0.12.4 in a cached venv outside the clone
(`tests/e2e/owui/install.py`); the first time that takes a few minutes, later it is a
quick check. Set
`GATEWAY_SKIP_OPENWEBUI_INSTALL=1` to skip it (those tests then skip, or fail under CI=true).
Likewise the real Hermes agent 0.19.0 (`tests/e2e/hermes/install.py`, about a minute the
first time); `GATEWAY_SKIP_HERMES_INSTALL=1` skips it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / ("python.exe" if os.name == "nt" else "python")
LINTED = ("gateway", "harness", "tests", "integrations", "dev.py")
STAMP = VENV / ".installed-pyproject-sha256"


def _pip(*args: str) -> None:
    """Run pip quietly: its output (setuptools and wheel chatter) shows only on failure."""
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    proc = subprocess.run(
        [str(PY), "-m", "pip", *args], capture_output=True, text=True, env=env, check=False
    )
    if proc.returncode != 0:
        print(flush=True)  # end the progress line
        sys.stderr.write(proc.stdout + proc.stderr)
        sys.exit(f"dev.py: `pip {' '.join(args)}` failed (exit {proc.returncode}); output above")


def ensure_venv() -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 - dev.py runs under whatever python3 is
        sys.exit(f"artifact-gateway needs Python 3.11 or newer (found {sys.version.split()[0]})")
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    fresh = not PY.exists()
    if not fresh and STAMP.exists() and STAMP.read_text().strip() == digest:
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
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    _pip("install", "-q", "--upgrade", "pip")
    _pip("install", "-q", "-e", f"{ROOT}[test,postgres]")
    STAMP.write_text(digest)
    print(f"done in {time.monotonic() - t0:.0f} s", flush=True)


def _pg_server_present() -> bool:
    """initdb, pg_ctl and postgres in ``$GATEWAY_PG_BINDIR`` or Debian's layout."""
    dirs = [Path(os.environ["GATEWAY_PG_BINDIR"])] if os.environ.get("GATEWAY_PG_BINDIR") else []
    dirs += sorted(Path("/usr/lib/postgresql").glob("*/bin"))
    return any(all((d / n).exists() for n in ("initdb", "pg_ctl", "postgres")) for d in dirs)


def _missing_packages() -> list[str]:
    missing = []
    if not _pg_server_present():
        missing.append("postgresql")  # tests/conftest.py runs its own throw-away cluster
    browser = os.environ.get("GATEWAY_SKIP_OPENWEBUI_INSTALL", "") in ("", "0")
    if browser and not Path("/usr/bin/chromium").exists():
        missing.append("chromium")  # the browser tests' headless Chromium
    if shutil.which("valgrind") is None:
        missing.append("valgrind")  # python -m harness.bench instructions (and its test)
    return missing


def ensure_system_packages() -> None:
    """Debian's postgresql, chromium and valgrind, with one ``apt-get update``, as root only.

    The package must not start a cluster of its own (``policy-rc.d`` answers 101 while
    it installs); the tests start and stop theirs. Not root, or no apt-get: a note, and
    the tests that need them skip (or fail under ``CI=true``) saying why.
    """
    missing = _missing_packages()
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
            proc = subprocess.run([apt, *args], capture_output=True, text=True, env=env)
            if proc.returncode != 0:
                print(flush=True)
                sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
                print(f"note: apt-get {args[0]} failed (exit {proc.returncode}); output above")
                return
    finally:
        if made_policy:
            policy.unlink(missing_ok=True)
    print(f"done in {time.monotonic() - t0:.0f} s", flush=True)


def ensure_openwebui() -> None:
    """The browser tests' prerequisites; a failure here only makes those tests skip/fail."""
    if os.environ.get("GATEWAY_SKIP_OPENWEBUI_INSTALL", "") not in ("", "0"):
        return
    script = ROOT / "tests" / "e2e" / "owui" / "install.py"
    if subprocess.call([sys.executable, str(script)], cwd=ROOT) != 0:
        print(f"note: {script.relative_to(ROOT)} did not finish; the Open WebUI tests will say why")


def ensure_hermes() -> None:
    """The real Hermes agent the ``hermes`` tests run; a failure only makes them skip/fail."""
    if os.environ.get("GATEWAY_SKIP_HERMES_INSTALL", "") not in ("", "0"):
        return
    script = ROOT / "tests" / "e2e" / "hermes" / "install.py"
    if subprocess.call([sys.executable, str(script)], cwd=ROOT) != 0:
        print(f"note: {script.relative_to(ROOT)} did not finish; the Hermes tests will say why")


def run(argv: list[str]) -> int:
    """Run ``argv`` and return its status. Ctrl-C reaches the child from the terminal
    (one process group) and it ends its own way (the demo drains and removes its
    directory, pytest reports); this process only waits for it, with no traceback of
    its own (``subprocess.call`` printed a ``KeyboardInterrupt`` after the demo's
    goodbye). A second signal sent to the child would end it without its cleanup, so
    nothing is forwarded."""
    proc = subprocess.Popen(argv, cwd=ROOT)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # after the fork: the
    try:  # child keeps Python's own Ctrl-C handling
        return proc.wait()
    finally:
        signal.signal(signal.SIGINT, previous)


RUN_HELP = """usage: python3 dev.py run [--port P] [--upstream-port P] [--proxy-port P]
                         [--log-format text|json]

Creates .venv (first run), then runs `gateway demo`: a scripted demo upstream, the
gateway and the Open WebUI runs proxy in one process, no LLM, throw-away state.

  --port P           the gateway (API server) port (default 8642)
  --upstream-port P  the demo upstream's port (default 9000)
  --proxy-port P     the Open WebUI runs proxy's port (default 8653)
  --log-format F     text (default) or json log lines on stderr

Once .venv exists, `python3 dev.py run --help` shows `gateway demo --help`."""


def main() -> int:
    cmd = sys.argv[1] if len(sys.argv) > 1 else "help"
    rest = sys.argv[2:]
    if cmd == "run":
        if {"-h", "--help"} & set(rest) and not PY.exists():
            print(RUN_HELP)  # help without installing first
            return 0
        ensure_venv()
        return run([str(BIN / "gateway"), "demo", *rest])
    if cmd == "test":
        ensure_venv()
        ensure_system_packages()
        ensure_openwebui()
        ensure_hermes()
        # tests/progress.py: one summary line per test folder as it finishes
        return run([str(PY), "-m", "pytest", "-p", "tests.progress", *rest])
    if cmd == "lint":
        ensure_venv()
        rc = run([str(PY), "-m", "ruff", "check", *LINTED])
        rc |= run([str(PY), "-m", "ruff", "format", "--check", *LINTED])
        rc |= run([str(PY), "-m", "mypy"])
        return rc
    if cmd == "bench":
        ensure_venv()
        return run([str(PY), "-m", "harness.bench", *rest])
    if cmd == "setup":
        ensure_venv()
        ensure_system_packages()
        ensure_openwebui()
        ensure_hermes()
        return 0
    print(__doc__)
    print("commands: run | test [pytest args] | lint | bench [args] | setup")
    return 0 if cmd == "help" else 2


if __name__ == "__main__":
    raise SystemExit(main())
