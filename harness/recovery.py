"""Health-recovery scenario: real processes killed and restarted.

``python -m harness health-recovery`` starts the demo upstream, ``gateway run`` and
``gateway proxy`` as separate processes (a throw-away state dir, free ports), then:

1. waits until both answer ``/health`` (polled once a second);
2. for each service: SIGKILL it, start it again with the same command, poll
   ``/health`` once a second and report the try on which it recovered (the kernel
   drops the dead process's single-instance lock, so the restart is not refused);
3. starts a slow stream through the gateway, sends SIGTERM, and checks the stream
   ends with a proper terminal event (``gateway_draining`` + ``[DONE]``) and the
   process exits 0; then restarts it and polls again.

Every process is stopped at the end, whatever happened.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from gateway.cli.healthpoll import poll_health
from harness.instances import gateway_toml

KEY = "recovery-alice-key-0123456789"
PROXY_KEY = "recovery-proxy-key-0123456789"
OWUI_KEY = "recovery-owui-key-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Service:
    name: str
    argv: list[str]
    health: str
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None

    def start(self) -> None:
        assert self.log is not None
        out = self.log.open("ab")
        self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, env=self.env)
        out.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@dataclass
class Report:
    lines: list[tuple[str, str, bool]] = field(default_factory=list)

    def add(self, step: str, outcome: str, ok: bool) -> None:
        self.lines.append((step, outcome, ok))
        print(f"{'ok  ' if ok else 'FAIL'}  {step:<38} {outcome}", flush=True)

    @property
    def ok(self) -> bool:
        return all(ok for _, _, ok in self.lines)


def _config(base: Path, gw_port: int, proxy_port: int, up_port: int) -> Path:
    gateway = f"http://127.0.0.1:{gw_port}"
    server = {"bind": f"127.0.0.1:{gw_port}", "public_base_url": gateway}
    proxy: dict[str, Any] = {"bind": f"127.0.0.1:{proxy_port}", "gateway_url": gateway}
    proxy.update({"gateway_key": PROXY_KEY, "client_keys": [OWUI_KEY]})
    cfg = base / "gateway.toml"
    cfg.write_text(
        gateway_toml(
            base / "state",
            upstream_url=f"http://127.0.0.1:{up_port}/v1",
            roots=[base / "artifacts"],
            keys=[(KEY, "alice", "user"), (PROXY_KEY, "owui-proxy", "proxy")],
            sections={"server": {**server, "drain_timeout_seconds": 4.0}, "proxy": proxy},
        ),
        encoding="utf-8",
    )
    return cfg


def _stream_during_sigterm(gw: Service, base_url: str, report: Report) -> None:
    """Start a slow stream, SIGTERM the gateway mid-stream, check the terminal event."""
    result: dict[str, object] = {}

    def reader() -> None:
        body = {
            "model": "demo-long",
            "stream": True,
            "demo_events": 400,
            "demo_delay": 0.02,
            "messages": [{"role": "user", "content": "go"}],
        }
        try:
            with (
                httpx.Client(timeout=httpx.Timeout(10, read=30)) as c,
                c.stream(
                    "POST",
                    base_url + "/v1/chat/completions",
                    json=body,
                    headers={"Authorization": f"Bearer {KEY}"},
                ) as r,
            ):
                result["raw"] = b"".join(r.iter_raw())
        except httpx.HTTPError as exc:
            result["error"] = repr(exc)

    t = threading.Thread(target=reader)
    t.start()
    time.sleep(1.0)
    assert gw.proc is not None
    t0 = time.monotonic()
    gw.proc.send_signal(signal.SIGTERM)
    try:
        code = gw.proc.wait(15)
    except subprocess.TimeoutExpired:
        gw.proc.kill()
        code = -9
    took = time.monotonic() - t0
    t.join(20)
    raw = result.get("raw", b"")
    assert isinstance(raw, bytes)
    lines = [ln for ln in raw.decode("utf-8", "replace").split("\n") if ln.startswith("data:")]
    terminal = lines[-2] if len(lines) >= 2 else ""
    done = bool(lines) and lines[-1].strip() == "data: [DONE]"
    code_seen = ""
    with contextlib.suppress(ValueError, KeyError, TypeError):
        code_seen = json.loads(terminal[5:])["error"]["code"]
    ok = done and code_seen == "gateway_draining" and code == 0
    report.add(
        "SIGTERM with a stream in flight",
        f"exit {code} after {took:.2f} s; terminal error {code_seen or 'missing'}; "
        f"[DONE] {'yes' if done else 'no'}",
        ok,
    )


def run(interval: float = 1.0, tries: int = 30) -> int:
    base = Path(tempfile.mkdtemp(prefix="harness-recovery-"))
    (base / "artifacts").mkdir()
    gw_port, proxy_port, up_port = free_port(), free_port(), free_port()
    cfg = _config(base, gw_port, proxy_port, up_port)
    env = {**os.environ, "GATEWAY_CONFIG": str(cfg)}
    env.pop("NOTIFY_SOCKET", None)
    env.pop("INVOCATION_ID", None)
    py = sys.executable
    upstream = Service(
        "demo upstream",
        [
            py,
            "-m",
            "gateway.cli.demo_upstream",
            "--port",
            str(up_port),
            "--root",
            str(base / "artifacts"),
            "--outside",
            str(base / "outside"),
        ],
        f"http://127.0.0.1:{up_port}/v1/models",
        env,
    )
    gateway = Service(
        "gateway",
        [py, "-m", "gateway.cli", "run", "--config", str(cfg)],
        f"http://127.0.0.1:{gw_port}/health",
        env,
    )
    proxy = Service(
        "proxy",
        [py, "-m", "gateway.cli", "proxy", "--config", str(cfg)],
        f"http://127.0.0.1:{proxy_port}/health",
        env,
    )
    report = Report()
    services = [upstream, gateway, proxy]
    for s in services:
        s.log = base / (s.name.replace(" ", "-") + ".log")
    try:
        for s in services:
            s.start()
        for s in services:
            r = poll_health(s.health, tries=tries, interval=interval)
            report.add(
                f"{s.name} first start", f"healthy on try {r.tries} ({r.elapsed:.1f} s)", r.healthy
            )
        for s in (gateway, proxy):
            assert s.proc is not None
            s.proc.kill()
            s.proc.wait(10)
            s.start()
            r = poll_health(s.health, tries=tries, interval=interval)
            report.add(
                f"{s.name} after SIGKILL + restart",
                f"healthy on try {r.tries} ({r.elapsed:.1f} s)" if r.healthy else r.detail,
                r.healthy,
            )
        _stream_during_sigterm(gateway, f"http://127.0.0.1:{gw_port}", report)
        gateway.start()
        r = poll_health(gateway.health, tries=tries, interval=interval)
        report.add(
            "gateway after SIGTERM + restart",
            f"healthy on try {r.tries} ({r.elapsed:.1f} s)",
            r.healthy,
        )
        r = poll_health(proxy.health, tries=3, interval=interval)
        gw_seen = ""
        try:
            gw_seen = json.loads(
                r.detail.split(" ", 2)[-1] if r.detail.startswith("HTTP") else r.detail
            )["gateway"]
        except (ValueError, KeyError, TypeError):
            gw_seen = r.detail[:60]
        report.add(
            "proxy sees the restarted gateway", f"proxy /health gateway={gw_seen}", gw_seen == "ok"
        )
    finally:
        for s in reversed(services):
            s.stop()
        if report.ok:
            import shutil

            shutil.rmtree(base, ignore_errors=True)
        else:
            print(f"logs kept in {base}", file=sys.stderr)
    print(
        f"\n{sum(ok for *_, ok in report.lines)} passed, {sum(not ok for *_, ok in report.lines)} failed"
    )
    return 0 if report.ok else 1
