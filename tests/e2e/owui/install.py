#!/usr/bin/env python3
"""Install what the Open WebUI browser tests need, outside the clone, once.

    python3 tests/e2e/owui/install.py          # install (or reuse) everything
    python3 tests/e2e/owui/install.py --check  # exit 0 when installed, 1 when not

* A venv with ``open-webui==0.12.4`` under
  ``${XDG_CACHE_HOME:-~/.cache}/artifact-gateway/openwebui-0.12.4/venv``. Open WebUI
  pulls PyTorch (accelerate, sentence-transformers); ``torch==2.13.0`` is installed
  first because it satisfies their ranges (``torch>=2.0``) and, on our machines, pip
  takes its CPU build from local disk instead of downloading a multi-GB CUDA build.
  A stamp file is written only after the install succeeded and the package imports,
  so an interrupted install is redone from scratch, and a complete one is reused
  in well under a second.
* Debian's ``chromium`` (``/usr/bin/chromium``): installed with apt-get when missing
  and running as root; otherwise the command to run is printed. Playwright's own
  browser download is not used (it is not reachable from CI).

Standard library only: it runs before any project venv exists. The test fixtures
import the path helpers below so that both agree on where things are.

SIGTERM, SIGINT or SIGHUP stop it at any moment with everything it started (ensurepip,
pip and its build steps, apt-get): each runs under ``tests/children.py``'s supervisor,
and an interrupted install leaves no stamp, so the next run starts it again.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import venv
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository's root for `tests`
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.children import Supervisor  # standard library only

OPENWEBUI_VERSION = "0.12.4"
#: admitted by Open WebUI 0.12.4's requirements; a CPU build of it lies on our machines' disk
TORCH_SPEC = "torch==2.13.0"
CHROMIUM = Path("/usr/bin/chromium")
STAMP_NAME = ".install-complete.json"
TEMPLATE_NAME = "data-template"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "artifact-gateway" / f"openwebui-{OPENWEBUI_VERSION}"


def venv_dir() -> Path:
    return cache_dir() / "venv"


def venv_python() -> Path:
    return venv_dir() / "bin" / "python"


def stamp_path() -> Path:
    return cache_dir() / STAMP_NAME


def data_template() -> Path:
    """A ``DATA_DIR`` with every migration applied and nothing else (no user, no config).

    Each test session copies it instead of migrating an empty database (~6 s of the
    ~20 s startup on 2 cores). Made by ``install.py`` after the venv; optional.
    """
    return cache_dir() / TEMPLATE_NAME


def _stamp_expected() -> dict[str, str]:
    return {
        "open-webui": OPENWEBUI_VERSION,
        "torch": TORCH_SPEC,
        "python": ".".join(map(str, sys.version_info[:2])),
    }


def openwebui_installed() -> bool:
    """True when a previous run finished the venv (stamp written after success)."""
    try:
        stamp = json.loads(stamp_path().read_text())
    except (OSError, ValueError):
        return False
    want = _stamp_expected()
    got = {k: stamp.get(k) for k in want}
    return got == want and venv_python().exists()


def chromium_installed() -> bool:
    return CHROMIUM.exists() and os.access(CHROMIUM, os.X_OK)


#: the supervisor of this script's children (made by :func:`main`)
_SUPERVISOR: Supervisor | None = None


def _run(argv: list[str], *, quiet: bool = False, **kw: object) -> None:
    """Run a command; drop pip's notes about this machine's unused local index paths.

    ``quiet``: show the output only if the command fails.
    """
    print("+", " ".join(argv), flush=True)

    def show(line: str) -> None:
        if not quiet and not line.startswith("WARNING: Location '"):
            print(line, end="", flush=True)

    sup = _SUPERVISOR or Supervisor()
    done = sup.run(argv, on_line=show, grace=30.0, **kw)
    if done.returncode != 0:
        if quiet:
            kept = (
                line
                for line in done.output.splitlines(keepends=True)
                if not line.startswith("WARNING: Location '")
            )
            print("".join(kept), end="", file=sys.stderr)
        raise subprocess.CalledProcessError(done.returncode, argv)


def install_openwebui() -> None:
    if openwebui_installed():
        print(f"Open WebUI {OPENWEBUI_VERSION}: cached in {venv_dir()}")
        return
    started = time.monotonic()
    stamp_path().unlink(missing_ok=True)
    print(f"Open WebUI {OPENWEBUI_VERSION}: installing into {venv_dir()} (a few minutes) ...")
    cache_dir().mkdir(parents=True, exist_ok=True)
    # pip from ensurepip as a child of ours (venv's with_pip runs it out of reach)
    venv.EnvBuilder(with_pip=False, clear=True).create(venv_dir())
    _run([str(venv_python()), "-m", "ensurepip", "--upgrade", "--default-pip"], quiet=True)
    pip = [str(venv_python()), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    env = {**os.environ, "PIP_NO_INPUT": "1"}
    _run([*pip, TORCH_SPEC], env=env)
    _run([*pip, f"open-webui=={OPENWEBUI_VERSION}"], env=env)
    # the package must import (its frontend build must be there) before it counts
    _run(
        [
            str(venv_python()),
            "-c",
            "import importlib.metadata as m, importlib.util as u, pathlib; "
            f"assert m.version('open-webui') == {OPENWEBUI_VERSION!r}; "
            "root = pathlib.Path(u.find_spec('open_webui').origin).parent; "
            "assert (root / 'frontend' / 'index.html').exists(), root",
        ],
        env=env,
    )
    stamp = {**_stamp_expected(), "seconds": round(time.monotonic() - started, 1)}
    stamp_path().write_text(json.dumps(stamp, indent=2) + "\n")
    print(f"Open WebUI {OPENWEBUI_VERSION}: installed in {stamp['seconds']} s")


def make_data_template() -> None:
    """Apply Open WebUI's migrations to an empty ``DATA_DIR`` once (see data_template)."""
    target = data_template()
    if (target / "webui.db").exists():
        return
    building = cache_dir() / (TEMPLATE_NAME + ".building")
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(parents=True)
    env = {
        **os.environ,
        "DATA_DIR": str(building),
        "FROM_INIT_PY": "true",  # what `open-webui serve` sets: use the packaged frontend
        "OFFLINE_MODE": "true",
        "HF_HUB_OFFLINE": "1",
        "WEBUI_SECRET_KEY": "only-for-migrations",
    }
    started = time.monotonic()
    # importing open_webui.config runs the alembic migrations (ENABLE_DB_MIGRATIONS)
    _run(
        [str(venv_python()), "-c", "import open_webui.config"],
        quiet=True,
        env=env,
        cwd=str(building),
    )
    building.rename(target)
    print(f"Open WebUI data template: migrated in {time.monotonic() - started:.1f} s")


def install_chromium() -> bool:
    if chromium_installed():
        print(f"Chromium: {CHROMIUM}")
        return True
    apt = shutil.which("apt-get")
    if os.geteuid() != 0 or apt is None:
        print(
            f"Chromium: {CHROMIUM} is missing. Install Debian's package as root:\n"
            "    apt-get update && apt-get install -y chromium",
            file=sys.stderr,
        )
        return False
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    _run([apt, "update", "-q"], quiet=True, env=env)
    _run([apt, "install", "-y", "-q", "--no-install-recommends", "chromium"], quiet=True, env=env)
    return chromium_installed()


def main(argv: list[str] | None = None) -> int:
    global _SUPERVISOR
    with Supervisor() as _SUPERVISOR:
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="only report; exit 1 if incomplete")
    args = ap.parse_args(argv)
    if args.check:
        ok_owui, ok_chromium = openwebui_installed(), chromium_installed()
        print(
            f"Open WebUI {OPENWEBUI_VERSION} venv: {'ok' if ok_owui else 'missing'} ({venv_dir()})"
        )
        print(f"Chromium: {'ok' if ok_chromium else 'missing'} ({CHROMIUM})")
        return 0 if ok_owui and ok_chromium else 1
    started = time.monotonic()
    ok = install_chromium()
    install_openwebui()
    make_data_template()
    print(f"done in {time.monotonic() - started:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
