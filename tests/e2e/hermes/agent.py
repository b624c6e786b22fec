"""The real Hermes agent's API server as a test runs it (``hermes gateway run -v``).

:meth:`HermesAgent.start` writes a throw-away ``HERMES_HOME`` and ``HOME`` under
``base``: ``config.yaml`` points the model at a scripted OpenAI-compatible LLM
(:mod:`harness.scripted_llm`) and the terminal at ``base/project``; ``.env`` enables
the API server on 127.0.0.1 with a key of more than 16 characters (it refuses a
shorter one). Its port is picked free just before the start (Hermes reads a fixed
port from ``.env``; a lost race is retried). The process runs in its own process
group, started from the project folder, and :meth:`stop` ends the whole group:
SIGTERM, a grace period, then SIGKILL, so no tool's shell outlives it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from harness.scripted_llm import MODEL
from tests.e2e.hermes import install

#: what clients send Hermes as its bearer key (``API_SERVER_KEY``; 16+ characters)
HERMES_KEY = "hermes-test-key-0123456789abcdef"
#: the model name Hermes's API server answers as (its ``/v1/models``)
HERMES_MODEL = "hermes-agent"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_home(home: Path, *, llm_url: str, project: Path, port: int) -> None:
    """``config.yaml`` and ``.env`` of a throw-away ``HERMES_HOME`` (see the module doc)."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(
        "model:\n"
        f"  default: {MODEL}\n"
        "  provider: custom\n"
        f"  base_url: {llm_url}\n"
        "  api_key: sk-scripted-not-a-secret\n"
        "terminal:\n"
        "  backend: local\n"
        f"  cwd: {project}\n"
    )
    (home / ".env").write_text(
        "API_SERVER_ENABLED=true\n"
        "API_SERVER_HOST=127.0.0.1\n"
        f"API_SERVER_PORT={port}\n"
        f"API_SERVER_KEY={HERMES_KEY}\n"
    )


def _hermes_env(home: Path, user_home: Path) -> dict[str, str]:
    """The caller's environment without variables that would steer Hermes elsewhere."""
    drop = ("GATEWAY_", "OPENAI_", "OPENROUTER_", "ANTHROPIC_", "HERMES_", "API_SERVER_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.pop("VIRTUAL_ENV", None)
    env.update(HERMES_HOME=str(home), HOME=str(user_home), NO_COLOR="1")
    return env


@dataclass
class HermesAgent:
    """One running Hermes API server (see the module docstring)."""

    base: Path
    llm_url: str
    url: str = ""
    proc: subprocess.Popen[bytes] | None = None
    #: seconds from spawn to the first 200 of ``/health``, per start
    start_seconds: list[float] = field(default_factory=list)

    @property
    def home(self) -> Path:
        return self.base / "hermes-home"

    @property
    def user_home(self) -> Path:
        return self.base / "user-home"

    @property
    def project(self) -> Path:
        return self.base / "project"

    @property
    def log(self) -> Path:
        return self.base / "hermes.log"

    @property
    def key(self) -> str:
        return HERMES_KEY

    def start(self, timeout: float = 90.0, tries: int = 3) -> float:
        """Start and wait until ``/health`` answers; seconds it took."""
        for attempt in range(tries):
            port = free_port()
            self.project.mkdir(parents=True, exist_ok=True)
            self.user_home.mkdir(parents=True, exist_ok=True)
            write_home(self.home, llm_url=self.llm_url, project=self.project, port=port)
            t0 = time.monotonic()
            with self.log.open("ab") as out:
                out.write(f"--- start (port {port}) ---\n".encode())
                out.flush()
                self.proc = subprocess.Popen(
                    [str(install.hermes_bin()), "gateway", "run", "-v"],
                    cwd=self.project,
                    env=_hermes_env(self.home, self.user_home),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            self.url = f"http://127.0.0.1:{port}"
            if self._wait_healthy(t0 + timeout):
                took = time.monotonic() - t0
                self.start_seconds.append(took)
                return took
            self.stop()
            if attempt == tries - 1 or "Address already in use" not in self.tail():
                break
        raise RuntimeError(f"Hermes did not answer /health; its log {self.log}:\n{self.tail()}")

    def _wait_healthy(self, deadline: float) -> bool:
        with httpx.Client(timeout=2) as client:
            while time.monotonic() < deadline:
                if self.proc is None or self.proc.poll() is not None:
                    return False
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(self.url + "/health").status_code == 200:
                        return True
                time.sleep(0.1)
        return False

    def stop(self, grace: float = 15.0) -> None:
        """End its whole process group: SIGTERM, then SIGKILL after ``grace`` seconds."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)

    def tail(self, chars: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""
