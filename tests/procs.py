"""Child processes for end-to-end tests: a clean environment, free ports, and
:class:`Proc`, a process whose output goes to a log file the test can wait on."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: variables a supervisor sets; a child that saw them would act as a supervised service
SUPERVISOR_VARS = ("INVOCATION_ID", "NOTIFY_SOCKET", "XPC_SERVICE_NAME", "JOURNAL_STREAM")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def clean_env(**extra: str) -> dict[str, str]:
    """This environment minus anything that looks like a supervisor or a gateway config."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in SUPERVISOR_VARS and not k.startswith("GATEWAY_")
    }
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


class Proc:
    """A child process (``python ARGS``) whose stdout+stderr go to a log file."""

    def __init__(
        self,
        args: list[str],
        log: Path,
        env: dict[str, str] | None = None,
        *,
        stop_timeout: float = 10.0,
    ) -> None:
        self.log = log
        self.stop_timeout = stop_timeout
        self._fh = log.open("wb")
        self.popen = subprocess.Popen(
            [sys.executable, *args],
            stdout=self._fh,
            stderr=subprocess.STDOUT,
            env=env if env is not None else clean_env(),
            cwd=REPO,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout: float = 20.0) -> re.Match[str]:
        """The first match of ``pattern`` in the log; fails with the log's tail."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(pattern, self.text())
            if m is not None:
                return m
            if self.popen.poll() is not None:
                break
            time.sleep(0.02)
        raise AssertionError(f"no {pattern!r} in {self.log.name}:\n{self.text()[-3000:]}")

    def wait(self, timeout: float) -> int:
        return self.popen.wait(timeout)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after ``stop_timeout``; the log is closed either way."""
        try:
            if self.popen.poll() is None:
                self.popen.send_signal(signal.SIGTERM)
                try:
                    self.popen.wait(self.stop_timeout)
                except subprocess.TimeoutExpired:
                    self.popen.kill()
                    self.popen.wait(5)
        finally:
            self._fh.close()
