"""tests/e2e/hermes/install.py: a signal at any moment stops it and everything it started.

Each test runs a fresh install into a throw-away ``XDG_CACHE_HOME`` and interrupts
it while a chosen child runs (``ensurepip`` under ``python -m venv``, or pip), then
checks that the script exits non-zero, that every process it had started is gone
(none left behind with parent 1), and that no stamp claims a complete install.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.hermes import install

SCRIPT = Path(install.__file__)


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            text = Path(f"/proc/{pid}/task/{tid}/children").read_text()
        except OSError:
            continue
        out.extend(int(c) for c in text.split())
    return out


def descendants(pid: int) -> dict[int, str]:
    """Every live descendant of ``pid`` with its command line."""
    found: dict[int, str] = {}
    todo = _children(pid)
    while todo:
        child = todo.pop()
        if child in found:
            continue
        try:
            cmd = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        found[child] = cmd
        todo.extend(_children(child))
    return found


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize(
    ("signum", "while_running"),
    [(signal.SIGTERM, "ensurepip"), (signal.SIGINT, "ensurepip"), (signal.SIGTERM, "pip install")],
)
def test_a_signal_mid_install_leaves_no_process_behind(
    tmp_path: Path, signum: int, while_running: str
) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    log = (tmp_path / "install.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT)], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        seen: dict[int, str] = {}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            seen.update(descendants(proc.pid))
            if any(while_running in cmd for cmd in seen.values()):
                break
            time.sleep(0.02)
        assert any(while_running in cmd for cmd in seen.values()), (
            f"never saw {while_running!r} running: {sorted(seen.values())}"
        )
        seen.update(descendants(proc.pid))
        proc.send_signal(signum)
        assert proc.wait(30) == -signum  # dies by it, as the Open WebUI installer does
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    time.sleep(0.2)  # orphans would still be running; reaped zombies vanish
    left = {pid: cmd for pid, cmd in seen.items() if alive(pid)}
    assert not left, f"left running after {signal.Signals(signum).name}: {left}"
    text = (tmp_path / "install.log").read_text()
    assert "nothing left running" in text, text
    stamp = tmp_path / "cache" / "artifact-gateway" / f"hermes-agent-{install.HERMES_VERSION}"
    assert not (stamp / install.STAMP_NAME).exists()


def test_check_reports_missing_and_exits_1(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    r = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], env=env, capture_output=True, text=True
    )
    assert r.returncode == 1
    assert "missing" in r.stdout and str(tmp_path) in r.stdout


def test_a_stamp_of_another_version_is_not_an_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    install.hermes_bin().parent.mkdir(parents=True)
    install.hermes_bin().write_text("#!/bin/sh\n")
    stamp = {**install._stamp_expected(), "hermes-agent": "0.18.0"}
    install.stamp_path().write_text(__import__("json").dumps(stamp))
    assert not install.hermes_installed()
    install.stamp_path().write_text(__import__("json").dumps(install._stamp_expected()))
    assert install.hermes_installed()
    install.stamp_path().write_text("[]")
    assert not install.hermes_installed()
