#!/usr/bin/env python3
"""Newcomer entry point: `python3 dev.py run` / `python3 dev.py test`.

Needs only Python >= 3.11 and access to the package registry. On first use it
creates `.venv/` beside this file and installs the project with its test extra;
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
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / ("python.exe" if os.name == "nt" else "python")
STAMP = VENV / ".installed-pyproject-sha256"


def ensure_venv() -> None:
    if sys.version_info < (3, 11):
        sys.exit("artifact-gateway needs Python 3.11 or newer (found %s)" % sys.version.split()[0])
    if not PY.exists():
        print(f"creating {VENV} ...", flush=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if not STAMP.exists() or STAMP.read_text().strip() != digest:
        print("installing artifact-gateway[test] into .venv ...", flush=True)
        subprocess.run([str(PY), "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
        subprocess.run(
            [str(PY), "-m", "pip", "install", "-q", "-e", f"{ROOT}[test]"], check=True
        )
        STAMP.write_text(digest)


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
        return run([str(PY), "-m", "pytest", *rest])
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
