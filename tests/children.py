"""Child processes that go when their parent is told to stop (standard library only).

``dev.py`` and the install scripts (``tests/e2e/*/install.py``) start pip, ensurepip,
apt-get, pytest and ``gateway demo``. Each runs through a :class:`Supervisor`, whose
contract is the one ``gateway run`` keeps: SIGTERM, SIGINT (unless the parent was
started with it ignored) or SIGHUP sent to the parent's own PID, at any moment, stops
the parent and everything it started:

* every child runs in a process group of its own, so the parent knows what to stop
  and a signal to the parent reaches the child exactly once, forwarded (a Ctrl-C
  from the terminal reaches the child group alone while it has the terminal, see
  ``foreground``);
* on a stop signal the running child gets its own stop signal (``stop_signal``:
  SIGTERM drains ``gateway demo``, SIGINT lets pytest tear its fixtures down), then
  SIGKILL for its whole group if it is still there after ``grace`` seconds; a second
  stop signal forwards once more (``gateway run`` exits at once on a second one);
* whatever is left in the child's group once the child has gone (a process it failed
  to stop) gets SIGTERM, then SIGKILL; on Linux the parent is also a child subreaper,
  so a descendant that left the group (``setsid``) is found and stopped the same way;
* then the parent ends by the same signal (its own parent sees "terminated by
  SIGTERM"), never with a traceback. A stop signal while no child runs raises
  :class:`Stopped` at once, with the same ending.

``foreground=True`` (``dev.py run`` and ``dev.py test`` in a terminal): the child's
group gets the terminal, as a shell gives it to a job, so Ctrl-C and Ctrl-Z reach
the child as if it had been started by the shell, and ``pytest --pdb`` can read the
keyboard. Ctrl-Z stops the parent too; ``fg`` resumes both.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

__all__ = ["STOP_SIGNALS", "Finished", "Stopped", "Supervisor", "orphans_of"]

STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP") if hasattr(signal, name)
)
POSIX = os.name == "posix"
#: how long leftovers of a child's group get between SIGTERM and SIGKILL
LEFTOVER_GRACE = 3.0
_PR_SET_CHILD_SUBREAPER = 36


class Stopped(BaseException):
    """A stop signal arrived (a ``BaseException``, as ``KeyboardInterrupt``)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass
class Finished:
    returncode: int
    output: str = ""


def _become_subreaper() -> bool:
    """Linux: orphaned descendants become our children instead of init's."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def orphans_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux ``/proc``; elsewhere none)."""
    out = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            out.append(int(entry))
    return out


def _signal_group(pgid: int, signum: int) -> bool:
    """Send ``signum`` to a process group; False when the group is gone."""
    try:
        os.killpg(pgid, signum)
        return True
    except (ProcessLookupError, PermissionError):
        return False


class Supervisor:
    """Runs children one at a time and stops them when this process is told to stop."""

    def __init__(self, *, say: Callable[[str], None] | None = None) -> None:
        self._say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self.signum: int | None = None
        self._child: subprocess.Popen[Any] | None = None
        self._child_stop: int | None = signal.SIGTERM
        self._deadline = float("inf")
        self._grace = 10.0
        self._previous: dict[int, Any] = {}
        self._subreaper = False
        self._spawning = False

    # -- installing and removing the handlers ---------------------------------------

    def __enter__(self) -> Supervisor:
        for signum in STOP_SIGNALS:
            current = signal.getsignal(signum)
            if current is signal.SIG_IGN:  # started with it ignored (nohup, `cmd &`)
                continue
            self._previous[signum] = current
            signal.signal(signum, self._on_signal)
        self._subreaper = _become_subreaper()
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        self.reap_orphans()
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
        if isinstance(exc, Stopped):
            self.end_by_signal()

    def end_by_signal(self) -> None:
        """Die by the stop signal received, as if this process had not caught it."""
        signum = self.signum if self.signum is not None else signal.SIGTERM
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        time.sleep(1.0)  # the signal is delivered before this returns
        os._exit(128 + signum)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        first = self.signum is None
        self.signum = signum
        if self._spawning:
            return  # run() forwards it once the child is known
        child = self._child
        if child is None or child.poll() is not None:
            raise Stopped(signum)
        self._forward(signum, first=first)

    def _forward(self, signum: int, *, first: bool) -> None:
        child = self._child
        assert child is not None
        if first:
            self._say(
                f"received {signal.Signals(signum).name}: stopping {_name(child.args)} "
                f"(pid {child.pid})"
            )
            self._deadline = time.monotonic() + self._grace
        stop = self._child_stop
        if stop is None:
            stop = signal.SIGTERM if signum == getattr(signal, "SIGHUP", None) else signum
        if POSIX:
            _signal_group(child.pid, stop)
        else:
            child.terminate()

    def check(self) -> None:
        """Raise :class:`Stopped` if a stop signal arrived (between children)."""
        if self.signum is not None:
            raise Stopped(self.signum)

    # -- running a child -------------------------------------------------------------

    def run(
        self,
        argv: Sequence[str],
        *,
        stop_signal: int | None = signal.SIGTERM,
        grace: float = 10.0,
        capture: bool = False,
        on_line: Callable[[str], None] | None = None,
        foreground: bool = False,
        raise_on_stop: bool = True,
        **popen: Any,
    ) -> Finished:
        """Run ``argv`` to its end; ``capture`` keeps its output (stdout + stderr),
        ``on_line`` gets each line as it comes. ``stop_signal`` is what the child gets
        when we are told to stop (None: the signal we got, SIGHUP as SIGTERM).

        When a stop signal arrived meanwhile, raises :class:`Stopped` once the child
        and its group are gone; with ``raise_on_stop=False`` (the last command of a
        script) only when the child died by a signal: a child that handled the stop
        and exited with a status of its own has that status returned, as a shell
        does for a job that ends itself on Ctrl-C."""
        self.check()
        piped = capture or on_line is not None
        if piped:
            popen.update(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if POSIX:
            popen["process_group"] = 0
        self._child_stop, self._grace, self._deadline = stop_signal, grace, float("inf")
        lines: list[str] = []
        with self._terminal(foreground) as terminal:
            self._spawning = True  # a signal now is only noted: the child is not known yet
            try:
                child = self._child = subprocess.Popen(list(argv), **popen)
            finally:
                self._spawning = False
            reader = self._reader(child, lines, on_line) if piped else None
            try:
                terminal(child.pid)
                if self.signum is not None:  # arrived while it was being started
                    self._forward(self.signum, first=True)
                returncode = self._wait(child, terminal)
            finally:
                self._child = None
                self._stop_leftovers(child)
                if reader is not None:
                    reader.join(LEFTOVER_GRACE)
        if raise_on_stop or returncode < 0:
            self.check()
        return Finished(returncode, "".join(lines))

    @staticmethod
    def _reader(
        child: subprocess.Popen[Any], lines: list[str], on_line: Callable[[str], None] | None
    ) -> threading.Thread:
        def read() -> None:
            assert child.stdout is not None
            for line in child.stdout:
                lines.append(line)
                if on_line is not None:
                    on_line(line)

        thread = threading.Thread(target=read, daemon=True)
        thread.start()
        return thread

    def _wait(self, child: subprocess.Popen[Any], terminal: Callable[[int], None]) -> int:
        """Wait for ``child``; SIGKILL its group once the grace after a stop is over."""
        while True:
            if not POSIX:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    return child.wait(0.1)
            else:
                pid, status = os.waitpid(child.pid, os.WNOHANG | os.WUNTRACED)
                if pid == child.pid and os.WIFSTOPPED(status):
                    self._suspend(child, terminal)
                elif pid == child.pid:
                    child.returncode = os.waitstatus_to_exitcode(status)
                    return child.returncode
            if time.monotonic() > self._deadline:
                self._say(
                    f"{_name(child.args)} did not stop within {self._grace:.0f} s: killing it"
                )
                self._kill(child)
                self._deadline = float("inf")
            time.sleep(0.05)

    @staticmethod
    def _kill(child: subprocess.Popen[Any]) -> None:
        if POSIX:
            _signal_group(child.pid, signal.SIGKILL)
        else:
            child.kill()

    def _suspend(self, child: subprocess.Popen[Any], terminal: Callable[[int], None]) -> None:
        """The child's group was stopped (Ctrl-Z): stop with it, as a shell's job would;
        on ``fg``/``bg`` give the terminal back (when ours) and continue the group."""
        terminal(os.getpgrp())
        os.kill(os.getpid(), signal.SIGSTOP)
        terminal(child.pid)
        _signal_group(child.pid, signal.SIGCONT)

    def _stop_leftovers(self, child: subprocess.Popen[Any]) -> None:
        """Whatever is left in the child's group once the child is gone, and orphans."""
        if child.poll() is None:  # an exception while waiting: the child first
            self._kill(child)
            child.wait()
        if POSIX and _signal_group(child.pid, signal.SIGTERM):
            deadline = time.monotonic() + LEFTOVER_GRACE
            while time.monotonic() < deadline and _signal_group(child.pid, 0):
                self.reap_orphans(kill=False)
                time.sleep(0.05)
            _signal_group(child.pid, signal.SIGKILL)
        self.reap_orphans()

    def reap_orphans(self, *, kill: bool = True) -> None:
        """Stop and reap the descendants that were re-parented to us (subreaper)."""
        if not self._subreaper:
            return
        leftovers = orphans_of(os.getpid())
        if kill and leftovers:
            for pid in leftovers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + LEFTOVER_GRACE
            while time.monotonic() < deadline and any(_alive(p) for p in leftovers):
                self._reap(leftovers)
                time.sleep(0.05)
            for pid in leftovers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self._reap(leftovers, block=kill)

    @staticmethod
    def _reap(pids: list[int], *, block: bool = False) -> None:
        for pid in pids:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0 if block else os.WNOHANG)

    @contextlib.contextmanager
    def _terminal(self, foreground: bool) -> Iterator[Callable[[int], None]]:
        """``give(pgid)``: make ``pgid`` (the child's group, or ours) the terminal's
        foreground group, only while the terminal is ours or the child's (not after
        ``bg`` gave it back to the shell); ours again at the end."""
        fd = _tty_fd() if foreground and POSIX else None
        if fd is None:
            yield lambda pgid: None
            return
        mine = os.getpgrp()
        groups = {mine}

        def give(pgid: int) -> None:
            groups.add(pgid)
            with contextlib.suppress(OSError):
                if os.tcgetpgrp(fd) in groups:
                    old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
                    try:
                        os.tcsetpgrp(fd, pgid)
                    finally:
                        signal.signal(signal.SIGTTOU, old)

        try:
            yield give
        finally:
            give(mine)


def _tty_fd() -> int | None:
    """stdin's descriptor when it is a terminal whose foreground group is ours."""
    try:
        fd = sys.stdin.fileno()
        if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
            return fd
    except (OSError, ValueError, AttributeError):
        pass
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie not yet reaped counts as gone
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
        return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] != b"Z"
    except OSError:
        return True


def _name(args: Any) -> str:
    argv = [str(a) for a in args] if isinstance(args, list | tuple) else [str(args)]
    shown = [os.path.basename(argv[0]), *argv[1:3]]
    return " ".join(shown) + (" ..." if len(argv) > 3 else "")
