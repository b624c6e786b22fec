#!/usr/bin/env python3
"""Newcomer entry point: `python3 dev.py run` / `python3 dev.py test`.

Needs only Python >= 3.11 and access to the package registry. On first use it
creates `.venv/` beside this file and installs the project with its test and postgres extras;
later runs reuse it (re-installing when pyproject.toml changed). `test` also makes
sure the browser tests' prerequisites are there (`tests/e2e/owui/install.py`: Open
WebUI 0.12.4 in a cached venv outside the clone, Debian's chromium); the first time
that takes a few minutes, later it is a quick check. Set
`GATEWAY_SKIP_OPENWEBUI_INSTALL=1` to skip it (those tests then skip, or fail under CI=true).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / ("python.exe" if os.name == "nt" else "python")
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
    if sys.version_info < (3, 11):
        sys.exit("artifact-gateway needs Python 3.11 or newer (found %s)" % sys.version.split()[0])
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    fresh = not PY.exists()
    if not fresh and STAMP.exists() and STAMP.read_text().strip() == digest:
        return
    what = (
        "first run: creating .venv and installing"
        if fresh
        else "pyproject.toml changed: reinstalling"
    )
    print(f"dev.py: {what} artifact-gateway[test,postgres] (a minute or so) ...", end=" ", flush=True)
    t0 = time.monotonic()
    if fresh:
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    _pip("install", "-q", "--upgrade", "pip")
    _pip("install", "-q", "-e", f"{ROOT}[test,postgres]")
    STAMP.write_text(digest)
    print(f"done in {time.monotonic() - t0:.0f} s", flush=True)


def ensure_openwebui() -> None:
    """The browser tests' prerequisites; a failure here only makes those tests skip/fail."""
    if os.environ.get("GATEWAY_SKIP_OPENWEBUI_INSTALL", "") not in ("", "0"):
        return
    script = ROOT / "tests" / "e2e" / "owui" / "install.py"
    if subprocess.call([sys.executable, str(script)], cwd=ROOT) != 0:
        print(f"note: {script.relative_to(ROOT)} did not finish; the Open WebUI tests will say why")


def run(argv: list[str]) -> int:
    return subprocess.call(argv, cwd=ROOT)


def main() -> int:
    cmd = sys.argv[1] if len(sys.argv) > 1 else "help"
    rest = sys.argv[2:]
    if cmd == "run":
        ensure_venv()
        return run([str(BIN / "gateway"), "demo", *rest])
    if cmd == "test":
        ensure_venv()
        ensure_openwebui()
        # tests/progress.py: one summary line per test folder as it finishes
        return run([str(PY), "-m", "pytest", "-p", "tests.progress", *rest])
    if cmd == "lint":
        ensure_venv()
        rc = run([str(PY), "-m", "ruff", "check", "gateway", "harness", "tests"])
        rc |= run([str(PY), "-m", "ruff", "format", "--check", "gateway", "harness", "tests"])
        rc |= run([str(PY), "-m", "mypy"])
        return rc
    if cmd == "bench":
        ensure_venv()
        return run([str(PY), "-m", "harness.bench", *rest])
    if cmd == "setup":
        ensure_venv()
        return 0
    print(__doc__)
    print("commands: run | test [pytest args] | lint | bench [args] | setup")
    return 0 if cmd == "help" else 2


if __name__ == "__main__":
    raise SystemExit(main())
