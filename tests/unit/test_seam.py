"""The one seam into hypercorn (gateway.http.seam): installed, it makes hypercorn's trio
worker serve every connection with the gateway's handler; on a hypercorn it was not
tested with, nothing is served (one clear line), rather than serving unprotected."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from quart_trio import QuartTrio

from gateway.http import seam
from gateway.http.connection import ConnectionPolicy
from gateway.http.serve import serve_app

ROOT = Path(__file__).resolve().parents[2]


def _app() -> QuartTrio:
    app = QuartTrio("seam")

    @app.get("/")
    async def index() -> str:
        return "ok"

    return app


def test_the_tested_versions_are_the_pinned_one() -> None:
    """The version the seam accepts is the one ``pyproject.toml`` pins (an upgrade is a
    change of both, with this suite run on it)."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = [d for d in deps if d.startswith("hypercorn")]
    assert pins == [f"hypercorn=={seam.TESTED[-1]}"]


def test_another_hypercorn_is_refused_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(seam, "version", lambda name: "0.17.3")
    with pytest.raises(seam.UnsupportedServer) as err:
        seam.check()
    message = str(err.value)
    assert "\n" not in message and "hypercorn 0.17.3" in message and seam.TESTED[-1] in message
    with pytest.raises(seam.UnsupportedServer):
        seam.install()


async def test_serve_app_serves_through_the_handler(nursery: trio.Nursery) -> None:
    policy = ConnectionPolicy()
    urls = await nursery.start(
        partial(
            serve_app, _app(), "127.0.0.1:0", shutdown_trigger=trio.sleep_forever, policy=policy
        )
    )
    assert seam.installed()
    async with httpx.AsyncClient() as client:
        assert (await client.get(urls[0] + "/")).text == "ok"
    assert policy.plain == 1  # counted by the gateway's handler, and nothing else


async def test_another_server_keeps_hypercorns_own_handler(nursery: trio.Nursery) -> None:
    """A hypercorn server not started by ``serve_app`` (no gateway server on its config)
    is served by hypercorn's own ``TCPServer``, seam installed or not."""
    seam.install()
    config = Config()
    config.bind = ["127.0.0.1:0"]
    urls = await nursery.start(partial(serve, _app(), config, shutdown_trigger=trio.sleep_forever))
    async with httpx.AsyncClient() as client:
        answer = await client.get(urls[0] + "/")
    assert answer.text == "ok" and answer.headers["server"].startswith("hypercorn")


def test_gateway_run_refuses_an_unknown_hypercorn(tmp_path: Path) -> None:
    """``gateway run`` on a hypercorn the handler does not know exits 1 with one line,
    before it listens (the interpreter is told hypercorn is 0.17.3)."""
    cfg = tmp_path / "gateway.toml"
    cfg.write_text(f'state_dir = "{tmp_path / "state"}"\n[server]\nbind = "127.0.0.1:0"\n')
    code = (
        "import importlib.metadata as m\n"
        "real = m.version\n"
        "m.version = lambda name: '0.17.3' if name == 'hypercorn' else real(name)\n"
        "from gateway.cli import main\n"
        f"raise SystemExit(main(['run', '--config', {str(cfg)!r}]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 1, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if "hypercorn" in ln]
    assert len(lines) == 1 and re.search(r"hypercorn 0\.17\.3 is installed", lines[0]), out.stderr
    assert "Traceback" not in out.stderr and "listening" not in out.stderr
