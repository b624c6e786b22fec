#!/usr/bin/env python3
"""Install the real Hermes agent the Hermes tests run, outside the clone, once.

    python3 tests/e2e/hermes/install.py          # install (or reuse) it
    python3 tests/e2e/hermes/install.py --check  # exit 0 when installed, 1 when not

A venv with ``hermes-agent==0.19.0`` and ``aiohttp==3.14.1`` under
``${XDG_CACHE_HOME:-~/.cache}/artifact-gateway/hermes-agent-0.19.0/venv``. Hermes's
API server platform imports ``aiohttp``, which only its ``messaging`` extra pulls in
(with Telegram, Discord and Slack clients we do not need); that extra pins
``aiohttp==3.14.1``, so the same pin is installed alone. A stamp file is written only
after the install succeeded and ``hermes --version`` runs, so an interrupted install
is redone from scratch and a complete one is reused in well under a second. Two
installs at once (two checkouts) take turns on a lock file; the second one then
finds the first one's stamp.

Signals: SIGTERM or SIGINT at any moment stops the running step (``python -m venv``
and its ``ensurepip`` child, or pip and whatever pip started: each step runs in its
own process group, and the whole group is ended), removes nothing but the stamp, and
ends by that signal (as the Open WebUI installer and dev.py do). No child survives it.

Standard library only: it runs before any project venv exists. The test fixtures
import the path helpers below so that both agree on where things are.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

HERMES_VERSION = "0.19.0"
#: the version hermes-agent 0.19.0's ``messaging`` extra pins (its API server imports it)
AIOHTTP_SPEC = "aiohttp==3.14.1"
STAMP_NAME = ".install-complete.json"
LOCK_NAME = ".install.lock"
#: how long a step's process group gets after SIGTERM before SIGKILL
GRACE_SECONDS = 5.0


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "artifact-gateway" / f"hermes-agent-{HERMES_VERSION}"


def venv_dir() -> Path:
    return cache_dir() / "venv"


def venv_python() -> Path:
    return venv_dir() / "bin" / "python"


def hermes_bin() -> Path:
    """The ``hermes`` console script of the cached venv."""
    return venv_dir() / "bin" / "hermes"


def stamp_path() -> Path:
    return cache_dir() / STAMP_NAME


def _stamp_expected() -> dict[str, str]:
    return {
        "hermes-agent": HERMES_VERSION,
        "aiohttp": AIOHTTP_SPEC,
        "python": ".".join(map(str, sys.version_info[:2])),
    }


def hermes_installed() -> bool:
    """True when a previous run finished the venv (stamp written after success)."""
    try:
        stamp = json.loads(stamp_path().read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(stamp, dict):
        return False
    want = _stamp_expected()
    return {k: stamp.get(k) for k in want} == want and hermes_bin().exists()


class Interrupted(Exception):
    """A SIGTERM or SIGINT arrived; ``signum`` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Steps:
    """Runs one child process group at a time and ends it when a signal arrives.

    The handler only records the signal and signals the current group; the main
    flow notices the record after every wait and raises :class:`Interrupted`.
    A signal that lands between ``Popen`` and the bookkeeping is caught by the
    check right after the child is recorded, so no child escapes.
    """

    def __init__(self) -> None:
        self.signalled = 0
        self.current: subprocess.Popen[str] | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> Steps:
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signalled = self.signalled or signum
        if self.current is not None:
            _signal_group(self.current.pid, signal.SIGTERM)

    def check(self) -> None:
        if self.signalled:
            raise Interrupted(self.signalled)

    def run(self, argv: list[str], *, quiet: bool = False, env: dict[str, str]) -> None:
        """Run ``argv`` in its own process group; its output shows (or only on failure)."""
        self.check()
        print("+", " ".join(argv), flush=True)
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=cache_dir(),  # not the clone: its own ``gateway`` package would shadow Hermes's
            start_new_session=True,  # its own group: pip's and venv's children die with it
        )
        self.current = proc
        try:
            if self.signalled:
                _signal_group(proc.pid, signal.SIGTERM)
            kept = _pump(proc, quiet)
            _reap_group(proc)
        finally:
            self.current = None
        self.check()
        if proc.returncode != 0:
            print("".join(kept), end="", file=sys.stderr)
            raise subprocess.CalledProcessError(proc.returncode, argv)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _pump(proc: subprocess.Popen[str], quiet: bool) -> list[str]:
    """Copy the child's output (pip's notes about unused local index paths dropped)."""
    assert proc.stdout is not None
    kept: list[str] = []
    for line in proc.stdout:
        if line.startswith("WARNING: Location '"):
            continue
        if quiet:
            kept.append(line)
        else:
            print(line, end="", flush=True)
    return kept


def _reap_group(proc: subprocess.Popen[str]) -> None:
    """Wait for the leader; then make sure nothing of its group is left.

    A grandchild may outlive the leader (or hold its output pipe): SIGTERM, a grace
    period, then SIGKILL for the whole group.
    """
    proc.wait()
    if _group_alive(proc.pid):
        _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_SECONDS
        while _group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        _signal_group(proc.pid, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - a pid reused by another user
        return False
    return True


@contextlib.contextmanager
def _install_lock() -> Iterator[None]:
    """One install at a time per cache folder (two checkouts may start one together)."""
    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / LOCK_NAME, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print("hermes-agent: another install is running; waiting for it ...", flush=True)
            fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def install_hermes(steps: Steps) -> None:
    if hermes_installed():
        print(f"hermes-agent {HERMES_VERSION}: cached in {venv_dir()}")
        return
    with _install_lock():
        if hermes_installed():  # the other install finished meanwhile
            print(f"hermes-agent {HERMES_VERSION}: cached in {venv_dir()}")
            return
        started = time.monotonic()
        stamp_path().unlink(missing_ok=True)
        print(f"hermes-agent {HERMES_VERSION}: installing into {venv_dir()} (a minute or two) ...")
        env = {**os.environ, "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        steps.run([sys.executable, "-m", "venv", "--clear", str(venv_dir())], env=env)
        pip = [str(venv_python()), "-m", "pip", "install", "-q"]
        steps.run([*pip, f"hermes-agent=={HERMES_VERSION}", AIOHTTP_SPEC], env=env)
        # it counts only once the console script runs and imports its API server platform
        steps.run([str(hermes_bin()), "--version"], quiet=True, env=env)
        steps.run(
            [str(venv_python()), "-c", "import aiohttp, gateway.platforms.api_server"],
            quiet=True,
            env=env,
        )
        steps.check()
        stamp = {**_stamp_expected(), "seconds": round(time.monotonic() - started, 1)}
        stamp_path().write_text(json.dumps(stamp, indent=2) + "\n")
        print(f"hermes-agent {HERMES_VERSION}: installed in {stamp['seconds']} s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="only report; exit 1 if incomplete")
    args = ap.parse_args(argv)
    if args.check:
        ok = hermes_installed()
        print(f"hermes-agent {HERMES_VERSION} venv: {'ok' if ok else 'missing'} ({venv_dir()})")
        return 0 if ok else 1
    with Steps() as steps:
        try:
            install_hermes(steps)
        except Interrupted as exc:
            print(f"hermes-agent: install stopped by {exc}; nothing left running", file=sys.stderr)
            sys.stderr.flush()
            signal.signal(exc.signum, signal.SIG_DFL)
            os.kill(os.getpid(), exc.signum)  # dies by it (as the caller expects)
            return 128 + exc.signum
        except subprocess.CalledProcessError as exc:
            print(f"hermes-agent: `{' '.join(exc.cmd)}` failed (exit {exc.returncode})")
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
