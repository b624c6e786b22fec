"""Single instance per state directory: an ``fcntl.flock`` on ``state_dir/<name>.lock``.

Why a lock and not a pid file: the kernel releases an ``flock`` when the holder's
last descriptor closes, so the lock is never stale -- not after a crash, not after
``kill -9``, not after the drain deadline's ``os._exit``. The file holds the
holder's pid (one line, so ``kill -TERM "$(cat gateway.lock)"`` works) for the
messages and for ``gateway run --replace``; the pid is information, the lock is
the truth. The file is never deleted (deleting a locked file lets a second process
lock a new inode under the same name).

The API server locks ``gateway.lock``; the runs proxy (a separate process on the
same state directory) will lock ``proxy.lock``, so each service is single-instance
without excluding the other.

Also here: :func:`detect_supervisor`, which tells whether this process was started
by launchd or systemd (``--replace`` is refused there, see :data:`REPLACE_LOOP`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "EXIT_ALREADY_RUNNING",
    "EXIT_USAGE",
    "REPLACE_LOOP",
    "AlreadyRunning",
    "InstanceLock",
    "detect_supervisor",
    "lock_path",
    "read_pid",
    "replace_running",
    "supervisor_of_pid",
    "this_process_supervisor",
]

#: ``gateway run`` exit status when another instance holds the lock (doctor knows it)
EXIT_ALREADY_RUNNING = 3
#: exit status for a refused invocation (``--replace`` under a supervisor)
EXIT_USAGE = 2

REPLACE_LOOP = (
    "--replace is for interactive use only. Under a supervisor it starts a restart loop: "
    "this instance SIGTERMs the running one, the supervisor (KeepAlive / Restart=always) "
    "starts that one again, the new copy (with the same --replace in its definition) "
    "SIGTERMs this one, and so on -- 'runs' climbs, and whichever copy cannot finish "
    "draining before ExitTimeOut/TimeoutStopSec is killed with SIGKILL. Remove --replace "
    "from the service definition (`gateway service render` never writes it) and restart "
    "through the supervisor: launchctl bootout + bootstrap, or systemctl restart."
)


class AlreadyRunning(Exception):
    """Another process holds the instance lock."""

    def __init__(self, path: Path, pid: int | None) -> None:
        self.path = path
        self.pid = pid
        who = f"pid {pid}" if pid is not None else "a process whose pid is not recorded yet"
        super().__init__(f"another instance ({who}) holds {path}")


def lock_path(state_dir: Path, name: str = "gateway") -> Path:
    return Path(state_dir) / f"{name}.lock"


def read_pid(path: Path) -> int | None:
    """The pid recorded in a lock file, or None (missing, empty, garbage)."""
    try:
        text = Path(path).read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    first = text.strip().splitlines()[0] if text.strip() else ""
    return int(first) if first.isdigit() and int(first) > 0 else None


@dataclass
class InstanceLock:
    """A held instance lock; :meth:`release` (or process exit) frees it."""

    path: Path
    fd: int

    @classmethod
    def acquire(cls, state_dir: Path, name: str = "gateway") -> InstanceLock:
        """Take the lock without waiting, or raise :class:`AlreadyRunning`.

        Creates ``state_dir`` (0700) if needed. ``OSError`` other than contention
        (unwritable directory...) propagates.
        """
        state = Path(state_dir)
        state.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = lock_path(state, name)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise AlreadyRunning(path, _holder_pid(path)) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        return cls(path, fd)

    @classmethod
    def wait(
        cls, state_dir: Path, timeout: float, name: str = "gateway", poll: float = 0.1
    ) -> InstanceLock | None:
        """Try to take the lock until ``timeout`` seconds pass; None if still held."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return cls.acquire(state_dir, name)
            except AlreadyRunning:
                if time.monotonic() >= deadline:
                    return None
                time.sleep(poll)

    def release(self) -> None:
        """Free the lock (idempotent). The pid stays in the file; it is only a hint."""
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1


def _holder_pid(path: Path, patience: float = 0.5) -> int | None:
    """Read the holder's pid; it writes it right after locking, so wait a moment."""
    deadline = time.monotonic() + patience
    while True:
        pid = read_pid(path)
        if pid is not None or time.monotonic() >= deadline:
            return pid
        time.sleep(0.02)


# --------------------------------------------------------------------------- supervisors


def _cgroup_leaf(pid: int | str = "self") -> str | None:
    """The last component of a process's cgroup v2 path (Linux), else None."""
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("0::"):
            return line[3:].rstrip("/").rsplit("/", 1)[-1]
    return None


def detect_supervisor(environ: Mapping[str, str], cgroup_leaf: str | None = None) -> str | None:
    """Name the supervisor this process runs under, from its environment, or None.

    * systemd sets ``NOTIFY_SOCKET`` for ``Type=notify`` units and ``INVOCATION_ID``
      for every unit it starts. A terminal that is itself a systemd service (GNOME's
      ``gnome-terminal-server``) leaks ``INVOCATION_ID`` into its shells, which live
      in a ``*.scope`` cgroup: with ``cgroup_leaf`` ending in ``.scope`` it is ignored.
    * launchd sets ``XPC_SERVICE_NAME`` to the job's label. Terminal.app sets it to
      ``"0"`` and GUI apps launched by launchd (iTerm2, VS Code...) to
      ``application.<bundle id>...``: both mean an interactive shell, not a job.
    """
    if environ.get("NOTIFY_SOCKET"):
        return "systemd (NOTIFY_SOCKET is set)"
    if environ.get("INVOCATION_ID") and not (cgroup_leaf or "").endswith(".scope"):
        return "systemd (INVOCATION_ID is set)"
    xpc = environ.get("XPC_SERVICE_NAME", "")
    if xpc and xpc != "0" and not xpc.startswith("application."):
        return f"launchd (XPC_SERVICE_NAME={xpc})"
    return None


def this_process_supervisor() -> str | None:
    """:func:`detect_supervisor` for this process."""
    return detect_supervisor(os.environ, _cgroup_leaf())


def _environ_of(pid: int) -> dict[str, str] | None:
    """Another process's environment (Linux /proc, same user only), else None."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def _parent_of(pid: int) -> int | None:
    try:
        out = subprocess.run(
            ["ps", "-o", "ppid=", "-p", str(pid)],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return int(out) if out.isdigit() else None


def supervisor_of_pid(pid: int) -> str | None:
    """Best effort: is process ``pid`` run by launchd or systemd?

    Linux: its environment (``/proc/<pid>/environ``). macOS: a launchd job's parent
    is launchd itself (pid 1), a shell-started process has the shell as parent.
    """
    env = _environ_of(pid)
    if env is not None:
        return detect_supervisor(env, _cgroup_leaf(pid))
    if sys.platform == "darwin" and _parent_of(pid) == 1:
        return "launchd (its parent is launchd, pid 1)"
    return None


def replace_running(
    state_dir: Path,
    held: AlreadyRunning,
    *,
    timeout: float,
    name: str = "gateway",
    say: Callable[[str], None],
) -> InstanceLock:
    """``--replace``: SIGTERM the holder, wait for the lock, return it.

    Raises :class:`AlreadyRunning` (with a message for the operator in ``args[0]``)
    when the holder cannot be identified, signalled, or does not exit in time.
    """
    pid = held.pid
    if pid is None:
        raise AlreadyRunning(held.path, None)
    supervised = supervisor_of_pid(pid)
    if supervised is not None:
        err = AlreadyRunning(held.path, pid)
        err.args = (
            f"pid {pid} is managed by {supervised}: replacing it would make the supervisor "
            "start it again, and the two would fight over the lock. Restart it through "
            "the supervisor instead (launchctl kickstart -k / bootout + bootstrap, "
            "or systemctl restart).",
        )
        raise err
    say(f"asking pid {pid} to drain (SIGTERM); waiting up to {timeout:.0f} s for it to exit")
    t0 = time.monotonic()
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass  # exited meanwhile: the lock is about to be free
    except PermissionError:
        err = AlreadyRunning(held.path, pid)
        err.args = (f"not allowed to signal pid {pid} (another user?)",)
        raise err from None
    lock = InstanceLock.wait(state_dir, timeout, name)
    if lock is None:
        err = AlreadyRunning(held.path, pid)
        err.args = (
            f"pid {pid} still holds {held.path} after {timeout:.0f} s; not starting. "
            "It may be stuck: check it, then stop it yourself.",
        )
        raise err
    say(f"pid {pid} exited after {time.monotonic() - t0:.1f} s; starting")
    return lock
