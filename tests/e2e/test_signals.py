"""SIGTERM / SIGINT to the PID of ``dev.py`` or an install script, at several moments,
stops it and everything it started (tests/children.py): no descendant survives, the
demo's ports are free, an interrupted install leaves no stamp.

Each test watches the process tree under the script (``/proc``, every 20 ms) and
remembers every descendant it saw, so a child that was re-parented to init after its
parent died still counts. Linux only (``/proc``).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.procs import REPO, clean_env, free_port

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
#: the system's python3 (what a newcomer runs dev.py with), resolved past launchers
#: such as pyenv's shim, which need a PATH of their own
PYTHON3 = subprocess.run(
    [shutil.which("python3") or sys.executable, "-c", "import sys; print(sys.executable)"],
    capture_output=True,
    text=True,
    check=True,
).stdout.strip()


def _stat(pid: int) -> tuple[int, int, str] | None:
    """(parent pid, start time, state) of ``pid``; None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    return int(fields[1]), int(fields[19]), fields[0].decode()


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@dataclass
class Tree:
    """Every descendant of ``root`` ever seen: pid -> (start time, command line)."""

    root: int
    seen: dict[int, tuple[int, str]] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    def poll(self) -> None:
        parents: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit() and (st := _stat(int(entry))) is not None:
                parents[int(entry)] = st[0]
        known = {self.root, *self.seen}
        grew = True
        while grew:
            grew = False
            for pid, ppid in parents.items():
                if ppid in known and pid not in known and (st := _stat(pid)) is not None:
                    self.seen[pid] = (st[1], _cmdline(pid))
                    known.add(pid)
                    grew = True

    def watch(self) -> None:
        while not self.stop.is_set():
            self.poll()
            time.sleep(0.02)

    def survivors(self) -> list[str]:
        out = []
        for pid, (start, cmd) in self.seen.items():
            st = _stat(pid)
            if st is not None and st[1] == start and st[2] != "Z":
                out.append(f"{pid} {cmd}")
        return out

    def wait_for(self, pred: Callable[[str], bool], timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for _, cmd in list(self.seen.values()):
                if pred(cmd):
                    return cmd
            time.sleep(0.02)
        raise AssertionError(f"no such descendant; seen: {[c for _, c in self.seen.values()]}")


@dataclass
class Script:
    proc: subprocess.Popen[bytes]
    tree: Tree
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for_text(self, needle: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            if needle in self.text():
                return
            time.sleep(0.05)
        raise AssertionError(f"no {needle!r} in the output:\n{self.text()[-3000:]}")

    def stop_with(self, signum: int, timeout: float = 60.0) -> int:
        os.kill(self.proc.pid, signum)
        rc = self.proc.wait(timeout)
        time.sleep(0.3)  # a last look: what a dying parent left behind
        self.tree.poll()
        return rc


@pytest.fixture
def start(tmp_path: Path) -> Iterator[Callable[..., Script]]:
    started: list[Script] = []

    def go(argv: list[str], cwd: Path = REPO, **env: str) -> Script:
        log = tmp_path / f"out-{len(started)}.log"
        with log.open("wb") as fh:
            proc = subprocess.Popen(
                argv, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, env=clean_env(**env)
            )
        tree = Tree(proc.pid)
        threading.Thread(target=tree.watch, daemon=True).start()
        script = Script(proc, tree, log)
        started.append(script)
        return script

    yield go
    for script in started:
        script.tree.stop.set()
        if script.proc.poll() is None:
            script.proc.kill()
            script.proc.wait()
        for line in script.tree.survivors():  # never leave one behind, whatever failed
            os.kill(int(line.split()[0]), signal.SIGKILL)


def _ports_free(*ports: int) -> bool:
    for port in ports:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return False
    return True


def _demo_args() -> tuple[list[str], tuple[int, int, int]]:
    ports = (free_port(), free_port(), free_port())
    args = ["--port", str(ports[0]), "--upstream-port", str(ports[1])]
    return [*args, "--proxy-port", str(ports[2])], ports


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_dev_py_run_stops_the_demo_when_signalled_while_it_serves(
    start: Callable[..., Script], signum: int
) -> None:
    args, ports = _demo_args()
    script = start([PYTHON3, "dev.py", "run", *args])
    script.wait_for_text("Ctrl-C to stop.", 60)
    assert not _ports_free(*ports)
    rc = script.stop_with(signum)
    assert rc == 0, script.text()  # the demo drained and exited 0: dev.py's status
    assert "drained" in script.text()
    assert not script.tree.survivors()
    assert _ports_free(*ports)
    state = script.text().split("(state in ", 1)[1].split(")", 1)[0]
    assert not Path(state).exists(), "the demo's temporary directory was left behind"


@pytest.mark.parametrize("delay", [0.0, 0.4])
def test_dev_py_run_stops_when_signalled_while_starting(
    start: Callable[..., Script], delay: float
) -> None:
    """Before the demo exists (dev.py's own start-up) or while it imports."""
    args, ports = _demo_args()
    script = start([PYTHON3, "dev.py", "run", *args])
    if delay:
        script.tree.wait_for(lambda cmd: " demo " in cmd, 30)
        time.sleep(delay)
    rc = script.stop_with(signal.SIGTERM)
    assert rc in (0, -signal.SIGTERM), script.text()  # the demo's drain, or dev.py's own
    assert "Traceback" not in script.text()
    assert not script.tree.survivors()
    assert _ports_free(*ports)


def _copy_of_dev_py(tmp: Path) -> Path:
    """dev.py with what it imports and the real pyproject.toml, in a folder without a
    venv: its first run creates one there (the real .venv is not touched)."""
    root = tmp / "clone"
    (root / "tests").mkdir(parents=True)
    for name in ("dev.py", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, root / name)
    for name in ("__init__.py", "children.py", "needs.py"):
        shutil.copy(REPO / "tests" / name, root / "tests" / name)
    return root


@pytest.mark.parametrize(
    ("moment", "signum"),
    [
        ("ensurepip", signal.SIGTERM),
        ("ensurepip", signal.SIGINT),
        ("pip install", signal.SIGTERM),
    ],
)
def test_dev_py_stops_while_making_the_venv(
    start: Callable[..., Script], tmp_path: Path, moment: str, signum: int
) -> None:
    root = _copy_of_dev_py(tmp_path)
    script = start([PYTHON3, str(root / "dev.py"), "run"], cwd=root)
    script.tree.wait_for(lambda cmd: moment in cmd, 120)
    time.sleep(0.3)
    rc = script.stop_with(signum)
    assert rc == -signum, script.text()
    assert "Traceback" not in script.text()
    assert not script.tree.survivors()
    assert not (root / ".venv" / ".installed-pyproject-sha256").exists()


def test_dev_py_test_tears_the_tests_down_and_kills_what_they_left(
    start: Callable[..., Script], tmp_path: Path
) -> None:
    """pytest gets SIGINT (its fixtures' teardown runs: the fixture's server goes);
    a process a test started in a session of its own and never stopped goes too."""
    marker = tmp_path / "torn-down"
    test = tmp_path / "test_sleeper.py"
    test.write_text(
        "import subprocess, sys, time\n"
        "import pytest\n\n"
        "@pytest.fixture\n"
        "def server():\n"
        "    p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
        "    yield p\n"
        "    p.terminate(); p.wait()\n"
        f"    open({str(marker)!r}, 'w').close()\n\n"
        "def test_sleeps(server):\n"
        "    subprocess.Popen(['sleep', '301'], start_new_session=True)\n"
        "    print('test running', flush=True)\n"
        "    time.sleep(300)\n"
    )
    script = start([PYTHON3, "dev.py", "test", str(test), "-s", "-p", "no:cacheprovider"])
    script.wait_for_text("test running", 120)
    script.tree.wait_for(lambda cmd: cmd.startswith("sleep 301"), 10)
    rc = script.stop_with(signal.SIGTERM)
    assert rc == 2, script.text()  # pytest: interrupted
    assert marker.exists(), "the fixture was not torn down"
    assert not script.tree.survivors()


def test_dev_py_test_stops_a_trio_test_and_runs_no_other(
    start: Callable[..., Script], tmp_path: Path
) -> None:
    """SIGTERM during a trio test (which reports the interrupt as its own failure):
    the session stops after it, its async fixture torn down, the next test never
    starts (it ran against servers already gone, for 15-35 s, before)."""
    marker, second = tmp_path / "torn-down", tmp_path / "second-ran"
    test = tmp_path / "test_trio_sleeper.py"
    test.write_text(
        "import trio\n"
        "import pytest\n\n"
        "pytestmark = pytest.mark.trio\n\n"
        "@pytest.fixture\n"
        "async def server():\n"
        "    try:\n"
        "        yield 1\n"
        "    finally:  # (the suite's fixtures clean up so: an interrupt skips the rest)\n"
        f"        open({str(marker)!r}, 'w').close()\n\n"
        "async def test_sleeps(server):\n"
        "    print('test running', flush=True)\n"
        "    await trio.sleep(300)\n\n"
        "async def test_next():\n"
        f"    open({str(second)!r}, 'w').close()\n"
        "    await trio.sleep(300)\n"
    )
    script = start([PYTHON3, "dev.py", "test", str(test), "-s", "-p", "no:cacheprovider"])
    script.wait_for_text("test running", 120)
    t0 = time.monotonic()
    rc = script.stop_with(signal.SIGTERM)
    assert rc == 2, script.text()  # pytest: interrupted
    assert time.monotonic() - t0 < 10, script.text()
    assert marker.exists(), "the fixture was not torn down"
    assert not second.exists(), "the next test ran after the stop"
    assert not script.tree.survivors()


# (the Hermes installer: tests/e2e/hermes/test_install.py, the same moments)
@pytest.mark.parametrize("installer", ["tests/e2e/owui/install.py"])
@pytest.mark.parametrize(
    ("moment", "signum"),
    [
        ("ensurepip", signal.SIGTERM),
        ("pip install", signal.SIGTERM),
        ("pip install", signal.SIGINT),
    ],
)
def test_install_scripts_stop_with_their_children(
    start: Callable[..., Script], tmp_path: Path, moment: str, signum: int, installer: str
) -> None:
    """Each installer in a cache of its own (XDG_CACHE_HOME): the shared one is
    untouched; no apt-get on its PATH (a missing Chromium is only reported). It dies by
    the signal."""
    cache, no_tools = tmp_path / "cache", tmp_path / "empty-path"
    no_tools.mkdir()
    script = start([PYTHON3, installer], XDG_CACHE_HOME=str(cache), PATH=str(no_tools))
    script.tree.wait_for(lambda cmd: moment in cmd, 120)
    time.sleep(0.3)
    rc = script.stop_with(signum)
    assert rc == -signum, script.text()
    assert "Traceback" not in script.text()
    assert not script.tree.survivors()
    assert not list(cache.rglob(".install-complete.json"))
