"""Operations end to end, with real processes: drain, single instance, health, smoke.

Every process is started with ``python -m gateway.cli`` / ``python -m
gateway.cli.demo_upstream`` from this interpreter, logs to a file under ``tmp_path``, and
is stopped in a ``finally`` (SIGTERM, then SIGKILL) whatever the test did.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import trio

from gateway.core.sse import SSEDecoder
from tests.procs import Proc, clean_env, free_port

KEY = "ops-alice-key-0123456789"
DRAIN = 3.0


def write_config(
    path: Path,
    *,
    state: Path,
    root: Path,
    port: int,
    upstream: str,
    drain: float = DRAIN,
    write_timeout: float = 10.0,
    proxy: str = "",
) -> Path:
    path.write_text(
        f"""state_dir = "{state}"

[server]
bind = "127.0.0.1:{port}"
public_base_url = "http://127.0.0.1:{port}"
drain_timeout_seconds = {drain}
write_timeout_seconds = {write_timeout}

[upstream]
base_url = "{upstream}"

[artifacts]
roots = ["{root}"]

[[auth.keys]]
key = "{KEY}"
principal = "alice"
{proxy}""",
        encoding="utf-8",
    )
    return path


@dataclass
class DemoUpstream:
    url: str  # OpenAI base URL (…/v1)
    root: Path


@pytest.fixture(scope="module")
def demo_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoUpstream]:
    base = tmp_path_factory.mktemp("upstream")
    root = base / "artifacts"
    proc = Proc(
        [
            "-m", "gateway.cli.demo_upstream", "--port", "0", "--root", str(root),
            "--outside", str(base / "outside"), "--chunk-delay", "0.02",
        ],
        base / "upstream.log",
    )  # fmt: skip
    try:
        m = proc.wait_for(r"base URL (http://127\.0\.0\.1:\d+/v1)")
        yield DemoUpstream(m.group(1), root)
    finally:
        proc.stop()


@dataclass
class Gateway:
    proc: Proc
    url: str
    config: Path
    state: Path


def start_gateway(
    tmp: Path, upstream: DemoUpstream, name: str = "gw", *, extra: tuple[str, ...] = (), **kw: float
) -> Gateway:
    port = free_port()
    state = tmp / f"{name}-state"
    cfg = write_config(
        tmp / f"{name}.toml",
        state=state,
        root=upstream.root,
        port=port,
        upstream=upstream.url,
        **kw,
    )
    proc = Proc(["-m", "gateway.cli", "run", "--config", str(cfg), *extra], tmp / f"{name}.log")
    try:
        proc.wait_for(r"listening on http://127\.0\.0\.1:\d+")
    except BaseException:
        proc.stop()
        raise
    return Gateway(proc, f"http://127.0.0.1:{port}", cfg, state)


def cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args],
        capture_output=True,
        text=True,
        env=env if env is not None else clean_env(),
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def running(
    demo_upstream: DemoUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    """One gateway for the tests that only need it up."""
    gw = start_gateway(tmp_path_factory.mktemp("running"), demo_upstream)
    try:
        yield gw
    finally:
        gw.proc.stop()


def stalled_client(port: int) -> socket.socket:
    """A client that sends a request for an endless fast stream and never reads.

    A tiny receive buffer makes the gateway's socket writes block within a moment.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    body = json.dumps(
        {
            "model": "demo-long",
            "stream": True,
            "messages": [{"role": "user", "content": "flood me"}],
            "demo_events": 5_000_000,
            "demo_delay": 0,
            "demo_batch": 500,
        }
    ).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    sock.sendall(head + body)
    return sock


def port_of(gw: Gateway) -> int:
    return int(gw.url.rsplit(":", 1)[1])


# --------------------------------------------------------------------------- drain


async def test_sigterm_drains_50_streams_and_a_stalled_client(
    demo_upstream: DemoUpstream, tmp_path: Path
) -> None:
    gw = start_gateway(tmp_path, demo_upstream)
    stalled: socket.socket | None = None
    try:
        bodies: dict[int, bytes] = {}
        started = 0
        all_started = trio.Event()
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
        async with httpx.AsyncClient(
            base_url=gw.url,
            headers={"Authorization": f"Bearer {KEY}"},
            timeout=httpx.Timeout(10, read=30),
            limits=limits,
        ) as client:

            async def read_stream(i: int) -> None:
                nonlocal started
                body = {
                    "model": "demo-long",
                    "stream": True,
                    "messages": [{"role": "user", "content": f"stream {i}"}],
                    "demo_events": 100_000,
                    "demo_delay": 0.05,
                }
                got = bytearray()
                async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                    assert r.status_code == 200
                    async for chunk in r.aiter_bytes():
                        if not got:
                            started += 1
                            if started == 50:
                                all_started.set()
                        got += chunk
                bodies[i] = bytes(got)

            async with trio.open_nursery() as nursery:
                for i in range(50):
                    nursery.start_soon(read_stream, i)
                stalled = stalled_client(port_of(gw))
                with trio.fail_after(15):
                    await all_started.wait()
                await trio.sleep(1.0)  # streams mid-flight; the stalled socket's buffers fill
                t0 = time.monotonic()
                gw.proc.popen.send_signal(signal.SIGTERM)
                rc = await trio.to_thread.run_sync(gw.proc.wait, DRAIN + 5)
                elapsed = time.monotonic() - t0
        assert rc == 0
        assert elapsed <= DRAIN + 1.0, f"exit took {elapsed:.2f} s"
        assert len(bodies) == 50
        for i, raw in bodies.items():
            events = SSEDecoder().feed(raw)
            assert events[-1].data == "[DONE]", f"stream {i} has no [DONE]"
            final = json.loads(events[-2].data)
            assert final["choices"][0]["finish_reason"] == "error", i
            assert final["error"]["code"] == "gateway_draining", i
            assert "gateway" in final  # the manifest rides on the terminal chunk
            assert raw.endswith(b"data: [DONE]\n\n")
        log = gw.proc.text()
        assert "received SIGTERM: draining" in log
        # the stalled connection was closed by the bounded write, not by the backstop
        assert "closing a connection whose client stopped reading" in log
        closed = re.search(r"drained in [\d.]+ s \((\d+) connection", log)
        assert closed is not None and int(closed.group(1)) >= 1, log[-2000:]
        assert "drain deadline reached" not in log
    finally:
        if stalled is not None:
            stalled.close()
        gw.proc.stop()


def test_second_signal_exits_at_once(demo_upstream: DemoUpstream, tmp_path: Path) -> None:
    gw = start_gateway(tmp_path, demo_upstream, drain=6.0)
    stalled = stalled_client(port_of(gw))
    try:
        time.sleep(1.0)
        gw.proc.popen.send_signal(signal.SIGTERM)
        gw.proc.wait_for("received SIGTERM: draining")
        time.sleep(0.2)
        assert gw.proc.popen.poll() is None  # still draining (the stalled client)
        t0 = time.monotonic()
        gw.proc.popen.send_signal(signal.SIGINT)
        assert gw.proc.wait(5) == 0
        assert time.monotonic() - t0 < 1.0
        assert "second signal during the drain" in gw.proc.text()
    finally:
        stalled.close()
        gw.proc.stop()


def test_a_request_still_arriving_at_the_drain_end_gets_a_json_503(
    demo_upstream: DemoUpstream, tmp_path: Path
) -> None:
    # a red-team pass: hypercorn answered it with a bare 500 (no body)
    gw = start_gateway(tmp_path, demo_upstream, drain=2.0)
    port = port_of(gw)
    sock = socket.create_connection(("127.0.0.1", port))
    try:
        sock.sendall(
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {KEY}\r\n"
            'Content-Length: 200\r\n\r\n{"model"'.encode()
        )
        time.sleep(0.5)
        gw.proc.popen.send_signal(signal.SIGTERM)
        sock.settimeout(10)
        got = b""
        while chunk := sock.recv(65536):
            got += chunk
        assert gw.proc.wait(10) == 0
    finally:
        sock.close()
        gw.proc.stop()
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503"), got
    assert b"connection: close" in head.lower()
    assert json.loads(body)["error"]["code"] == "gateway_draining"


def test_slow_reader_is_cut_by_the_write_timeout(
    demo_upstream: DemoUpstream, tmp_path: Path
) -> None:
    gw = start_gateway(tmp_path, demo_upstream, write_timeout=1.0)
    stalled = stalled_client(port_of(gw))
    try:
        gw.proc.wait_for("closing a connection whose client stopped reading", timeout=8)
        metrics = httpx.get(f"{gw.url}/metrics", timeout=5).text
        assert 'gateway_open_streams{route="/v1/chat/completions"} 0.0' in metrics
    finally:
        stalled.close()
        gw.proc.stop()


# --------------------------------------------------------------------------- single instance


def test_second_instance_is_refused(running: Gateway) -> None:
    res = cli("run", "--config", str(running.config), timeout=20)
    assert res.returncode == 3
    assert f"pid {running.proc.pid}" in res.stderr
    assert "--replace" in res.stderr
    assert httpx.get(f"{running.url}/health", timeout=5).status_code == 200  # untouched


@pytest.mark.parametrize(
    "supervisor",
    [
        {"XPC_SERVICE_NAME": "com.artifact-gateway.api"},
        {"INVOCATION_ID": "6f1c0b2e9d4a4e0f8b7c3a2d1e0f9a8b"},
        {"NOTIFY_SOCKET": "/run/user/1000/systemd/notify"},
    ],
)
def test_replace_is_refused_under_a_supervisor(
    running: Gateway, supervisor: dict[str, str]
) -> None:
    res = cli("run", "--replace", "--config", str(running.config), env=clean_env(**supervisor))
    assert res.returncode == 2
    assert "refusing --replace" in res.stderr and "restart loop" in res.stderr
    assert running.proc.popen.poll() is None  # it was not signalled
    assert httpx.get(f"{running.url}/health", timeout=5).status_code == 200


def test_replace_drains_the_running_one_and_takes_over(
    demo_upstream: DemoUpstream, tmp_path: Path
) -> None:
    old = start_gateway(tmp_path, demo_upstream)
    new: Proc | None = None
    try:
        new = Proc(
            ["-m", "gateway.cli", "run", "--replace", "--config", str(old.config)],
            tmp_path / "new.log",
        )
        assert old.proc.wait(DRAIN + 5) == 0
        new.wait_for(r"listening on http://127\.0\.0\.1:\d+")
        assert f"asking pid {old.proc.pid} to drain" in new.text()
        assert (old.state / "gateway.lock").read_text().strip() == str(new.pid)
        assert httpx.get(f"{old.url}/health", timeout=5).status_code == 200
    finally:
        old.proc.stop()
        if new is not None:
            new.stop()


def test_proxy_runs_beside_the_api_with_its_own_lock(
    running: Gateway, demo_upstream: DemoUpstream, tmp_path: Path
) -> None:
    port = free_port()
    cfg = write_config(
        tmp_path / "proxy.toml",
        state=running.state,  # the API server's state dir: the locks must not collide
        root=demo_upstream.root,
        port=port_of(running),
        upstream=demo_upstream.url,
        proxy=f'\n[proxy]\nbind = "127.0.0.1:{port}"\ngateway_url = "{running.url}"\n',
    )
    proxy = Proc(["-m", "gateway.cli", "proxy", "--config", str(cfg)], tmp_path / "proxy.log")
    try:
        proxy.wait_for(rf"proxy [\d.]+ listening on http://127\.0\.0\.1:{port}")
        res = cli("health", f"http://127.0.0.1:{port}/health", "--wait", "--interval", "0.2")
        assert res.returncode == 0, res.stdout + res.stderr
        assert (running.state / "proxy.lock").read_text().strip() == str(proxy.pid)
        second = cli("proxy", "--config", str(cfg))
        assert second.returncode == 3
        assert f"pid {proxy.pid}" in second.stderr and "proxy.lock" in second.stderr
        proxy.popen.send_signal(signal.SIGTERM)
        assert proxy.wait(DRAIN + 2) == 0
    finally:
        proxy.stop()
    assert running.proc.popen.poll() is None


# --------------------------------------------------------------------------- health


def test_health_poller_counts_tries_while_starting(
    demo_upstream: DemoUpstream, tmp_path: Path
) -> None:
    port = free_port()
    cfg = write_config(
        tmp_path / "gw.toml",
        state=tmp_path / "state",
        root=demo_upstream.root,
        port=port,
        upstream=demo_upstream.url,
    )
    poller = subprocess.Popen(
        [
            sys.executable, "-m", "gateway.cli", "health", f"http://127.0.0.1:{port}/health",
            "--wait", "--interval", "0.25", "--tries", "60",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
    )  # fmt: skip
    gw: Proc | None = None
    try:
        time.sleep(0.6)  # the poller fails a few times first
        gw = Proc(["-m", "gateway.cli", "run", "--config", str(cfg)], tmp_path / "gw.log")
        out, err = poller.communicate(timeout=30)
        assert poller.returncode == 0, err
        m = re.search(r"healthy on try (\d+) of 60", out)
        assert m is not None and int(m.group(1)) > 1, out
        assert "connection refused" in err
    finally:
        if poller.poll() is None:
            poller.kill()
            poller.communicate()
        if gw is not None:
            gw.stop()


def test_health_poller_against_a_running_server(running: Gateway) -> None:
    res = cli("health", f"{running.url}/health", "--wait", "--interval", "0.2")
    assert res.returncode == 0
    assert "healthy on try 1 of 30" in res.stdout
    res = cli("health", f"{running.url}/health/ready")
    assert res.returncode == 0 and "healthy on try 1 of 1" in res.stdout


def test_health_poller_never_healthy(running: Gateway) -> None:
    res = cli(
        "health", f"http://127.0.0.1:{free_port()}/health", "--tries", "3", "--interval", "0.1"
    )
    assert res.returncode == 1
    assert "not healthy after 3 tries" in res.stdout
    res = cli("health", f"{running.url}/no-such-route", "--tries", "2", "--interval", "0.1")
    assert res.returncode == 1
    assert "HTTP 404" in res.stdout


# --------------------------------------------------------------------------- smoke


def test_smoke_passes_against_a_running_gateway(running: Gateway) -> None:
    res = cli("smoke", running.url, "--key", KEY)
    assert res.returncode == 0, res.stdout + res.stderr
    assert re.search(r"smoke: all \d+ checks passed", res.stdout)
    assert "FAIL" not in res.stdout
    for needle in (
        "[private] no host-local path in the stream",
        "[private] download returns the file's bytes",
        "[public] tampered signature refused",
    ):
        assert needle in res.stdout


def test_smoke_fails_with_a_wrong_key(running: Gateway) -> None:
    res = cli("smoke", running.url, "--key", "not-a-key-of-this-gateway", "--mode", "private")
    assert res.returncode == 1
    assert "the key was refused" in res.stdout


def test_smoke_fails_when_the_gateway_is_down() -> None:
    res = cli("smoke", f"http://127.0.0.1:{free_port()}", "--key", KEY)
    assert res.returncode == 1
    assert "FAIL GET /health" in res.stdout
