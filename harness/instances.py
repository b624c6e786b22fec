"""Real ``gateway run`` processes for multi-instance tests and benchmarks.

Each :class:`GatewayProcess` is one instance as an operator runs it: its own config
file and ``state_dir`` (its own instance lock), the shared ``database_url`` (empty:
SQLite under its ``state_dir``), listening on ``127.0.0.1:0``. The bound URL is read
from the instance's own startup line (``gateway … listening on http://…``), so no
port is guessed and none can be taken by someone else in between. Logs go to
``<base>/<name>.log``.

    a = GatewayProcess.create(base / "a", name="a", upstream_url=..., database_url=url)
    a.start(); a.wait_ready()
    ...
    a.kill()        # SIGKILL: no drain, no terminal event, leases stop being renewed
    a.start(); a.wait_ready()   # the same instance again (same state_dir, new port)
    a.stop()        # SIGTERM (drain), SIGKILL if it does not exit in time

The environment handed to the processes has no ``GATEWAY_*`` variable of the caller's
shell (an exported ``GATEWAY_DATABASE_URL`` must not redirect a test's instances) and
no systemd notification variables.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

__all__ = [
    "GatewayProcess",
    "UpstreamProcess",
    "clean_env",
    "gateway_toml",
    "start_all",
    "stop_all",
]

_LISTENING = re.compile(r"gateway \S+ listening on (http://[\d.]+:\d+) \(pid (\d+)\)")


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment without ``GATEWAY_*`` and systemd variables, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GATEWAY_") and k not in ("NOTIFY_SOCKET", "INVOCATION_ID")
    }
    env.update(extra or {})
    return env


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def gateway_toml(
    state_dir: Path,
    *,
    upstream_url: str,
    roots: Sequence[Path],
    keys: Iterable[tuple[str, str, str]],
    database_url: str = "",
    shared: bool = True,
    public_base_url: str = "http://gateway.test",
    sections: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """A gateway config file. ``keys``: ``(key, principal, role)``; ``roots`` are
    ``shared_roots`` (every principal's) unless ``shared`` is false; ``sections``: more
    tables, e.g. ``{"runs": {"lease_seconds": 3}}``."""
    lines = [f"state_dir = {_toml_value(str(state_dir))}"]
    if database_url:
        lines.append(f"database_url = {_toml_value(database_url)}")
    tables: dict[str, dict[str, Any]] = {
        "server": {"bind": "127.0.0.1:0", "public_base_url": public_base_url},
        "upstream": {"base_url": upstream_url},
        "artifacts": {
            "roots": [] if shared else [str(r) for r in roots],
            "shared_roots": [str(r) for r in roots] if shared else [],
        },
    }
    for name, values in (sections or {}).items():
        tables.setdefault(name, {}).update(values)
    arrays: list[str] = []
    for name, values in tables.items():
        lines.append(f"\n[{name}]")
        for k, v in values.items():
            if isinstance(v, list | tuple) and v and all(isinstance(x, dict) for x in v):
                for entry in v:  # an array of tables: [[name.k]] after the table
                    arrays.append(f"\n[[{name}.{k}]]")
                    arrays.extend(f"{ek} = {_toml_value(ev)}" for ek, ev in entry.items())
            else:
                lines.append(f"{k} = {_toml_value(v)}")
    lines.extend(arrays)
    for key, principal, role in keys:
        lines.append("\n[[auth.keys]]")
        lines.append(f"key = {_toml_value(key)}")
        lines.append(f"principal = {_toml_value(principal)}")
        lines.append(f"role = {_toml_value(role)}")
    return "\n".join(lines) + "\n"


@dataclass
class GatewayProcess:
    """One ``gateway run`` process (see the module docstring)."""

    name: str
    config: Path
    log: Path
    env: dict[str, str] = field(default_factory=clean_env)
    proc: subprocess.Popen[bytes] | None = None
    url: str = ""
    #: how many times it was started
    starts: int = 0

    @classmethod
    def create(
        cls,
        base: Path,
        *,
        name: str,
        upstream_url: str,
        roots: Sequence[Path],
        keys: Iterable[tuple[str, str, str]],
        database_url: str = "",
        public_base_url: str = "http://gateway.test",
        sections: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> GatewayProcess:
        """Write ``base/gateway.toml`` (``state_dir`` = ``base/state``); not started yet."""
        base.mkdir(parents=True, exist_ok=True)
        config = base / "gateway.toml"
        config.write_text(
            gateway_toml(
                base / "state",
                upstream_url=upstream_url,
                roots=roots,
                keys=keys,
                database_url=database_url,
                public_base_url=public_base_url,
                sections=sections,
            )
        )
        return cls(name, config, base.parent / f"{name}.log")

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} was never started"
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        """Start the process (returns at once; see :meth:`wait_ready`)."""
        if self.alive:
            raise RuntimeError(f"{self.name} is already running")
        self.url = ""
        self.starts += 1
        with self.log.open("ab") as out:
            out.write(f"--- start {self.starts} ---\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", "run", "--config", str(self.config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
            )

    def _bound_url(self) -> str:
        text = self.log.read_text(errors="replace")
        start = text.rfind(f"--- start {self.starts} ---")
        for m in _LISTENING.finditer(text, max(start, 0)):
            if int(m.group(2)) == self.pid:
                return m.group(1)
        return ""

    def wait_ready(self, timeout: float = 30.0, path: str = "/health/ready") -> float:
        """Until the process listens and ``path`` answers 200; seconds waited."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        with httpx.Client(timeout=2) as client:
            while time.monotonic() < deadline:
                if not self.alive:
                    raise RuntimeError(f"{self.name} exited; see {self.log}:\n{self.tail()}")
                if not self.url:
                    self.url = self._bound_url()
                if self.url:
                    try:
                        if client.get(self.url + path).status_code == 200:
                            return time.monotonic() - t0
                    except httpx.HTTPError:
                        pass
                time.sleep(0.05)
        raise RuntimeError(
            f"{self.name} not ready after {timeout} s; see {self.log}:\n{self.tail()}"
        )

    def kill(self) -> None:
        """SIGKILL (a crash: nothing runs in the process any more) and reap it."""
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM (drain) and wait; SIGKILL if it overstays. The exit status."""
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
        return self.wait_exit(timeout)

    def wait_exit(self, timeout: float = 15.0) -> int | None:
        """Wait for the process to exit (a second SIGTERM would cut its drain short);
        SIGKILL if it overstays. The exit status."""
        if self.proc is None:
            return None
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        return self.proc.returncode

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


@dataclass
class UpstreamProcess:
    """The demo upstream (:mod:`gateway.cli.demo_upstream`) in its own process."""

    root: Path
    log: Path
    chunk_delay: float = 0.02
    proc: subprocess.Popen[bytes] | None = None
    url: str = ""  # origin, without /v1

    def start(self, timeout: float = 30.0) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "gateway.cli.demo_upstream",
                    "--port",
                    "0",
                    "--root",
                    str(self.root),
                    "--outside",
                    str(self.root.parent / "outside"),
                    "--chunk-delay",
                    str(self.chunk_delay),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=clean_env(),
            )
        pattern = re.compile(r"demo upstream: base URL (http://[\d.]+:\d+)/v1")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = pattern.search(self.log.read_text(errors="replace"))
            if m:
                self.url = m.group(1)
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"the demo upstream did not start; see {self.log}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start_all(instances: Sequence[GatewayProcess], timeout: float = 30.0) -> None:
    """Start every instance at once, then wait until each is ready."""
    try:
        for inst in instances:
            inst.start()
        for inst in instances:
            inst.wait_ready(timeout)
    except BaseException:
        stop_all(instances)
        raise


def stop_all(instances: Sequence[GatewayProcess]) -> None:
    for inst in instances:
        if inst.alive:
            assert inst.proc is not None
            inst.proc.send_signal(signal.SIGTERM)
    for inst in instances:
        inst.wait_exit()
