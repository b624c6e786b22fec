"""``gateway demo``: the demo upstream and the gateway in one process, no LLM needed.

A throw-away state dir (signing key, SQLite) and artifact root are created under a
temporary directory, demo keys are configured, and the URLs plus a ready-to-paste
``curl -N`` command are printed. Ctrl-C drains and exits.
"""

from __future__ import annotations

import logging
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import trio

from gateway.app import create_app
from gateway.config import Config, config_from_dict
from gateway.demo_upstream import create_demo_upstream_app
from gateway.proxy import create_proxy_app
from gateway.server import run_until_signalled

DEMO_USER_KEY = "demo-alice-key-0123456789"
DEMO_BOB_KEY = "demo-bob-key-0123456789ab"
DEMO_PROXY_KEY = "demo-proxy-key-0123456789"
DEMO_OWUI_KEY = "demo-openwebui-key-0123456789"


def demo_config(
    base: Path,
    *,
    upstream_url: str,
    bind: str,
    public_base_url: str,
    proxy_bind: str = "127.0.0.1:8653",
) -> Config:
    return config_from_dict(
        {
            "state_dir": str(base / "state"),
            "server": {"bind": bind, "public_base_url": public_base_url},
            "upstream": {"base_url": upstream_url},
            "artifacts": {"roots": [str(base / "artifacts")], "default_link_mode": "private"},
            "auth": {
                "keys": [
                    {"key": DEMO_USER_KEY, "principal": "alice", "role": "user"},
                    {"key": DEMO_BOB_KEY, "principal": "bob", "role": "user"},
                    {"key": DEMO_PROXY_KEY, "principal": "openwebui-proxy", "role": "proxy"},
                ]
            },
            "proxy": {
                "bind": proxy_bind,
                "gateway_url": public_base_url,
                "gateway_key": DEMO_PROXY_KEY,
                "client_keys": [DEMO_OWUI_KEY],
            },
        }
    )


def main(
    argv: list[str] | None = None,
    *,
    port: int = 8642,
    upstream_port: int = 9000,
    proxy_port: int = 8653,
) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    base = Path(tempfile.mkdtemp(prefix="artifact-gateway-demo-"))
    try:
        (base / "artifacts").mkdir()
        upstream_app = create_demo_upstream_app(base / "artifacts", outside_dir=base / "outside")
        bind = f"127.0.0.1:{port}"
        cfg = demo_config(
            base,
            upstream_url=f"http://127.0.0.1:{upstream_port}/v1",
            bind=bind,
            public_base_url=f"http://127.0.0.1:{port}",
            proxy_bind=f"127.0.0.1:{proxy_port}",
        )
        app = create_app(cfg)
        proxy_app = create_proxy_app(cfg)

        def ready(urls: list[list[str]]) -> None:
            gw = urls[1][0]
            px = urls[2][0]
            print(
                "\n".join(
                    [
                        "",
                        f"demo upstream  {urls[0][0]}/v1  (scripted, no LLM)",
                        f"gateway        {gw}  (state in {base})",
                        f"keys           alice: {DEMO_USER_KEY}   bob: {DEMO_BOB_KEY}",
                        "",
                        "try:",
                        f"  curl -N {gw}/v1/chat/completions \\",
                        f"    -H 'Authorization: Bearer {DEMO_USER_KEY}' -H 'Content-Type: application/json' \\",
                        '    -d \'{"model": "demo", "stream": true, "messages": [{"role": "user", "content": "make me a report"}]}\'',
                        "",
                        f"Open WebUI runs proxy {px}  (connection key {DEMO_OWUI_KEY}); as Open WebUI calls it:",
                        f"  curl -N {px}/v1/chat/completions \\",
                        f"    -H 'Authorization: Bearer {DEMO_OWUI_KEY}' -H 'X-OpenWebUI-User-Id: u-alice' \\",
                        "    -H 'Content-Type: application/json' \\",
                        '    -d \'{"model": "demo", "stream": true, "download_link_mode": "public", "messages": [{"role": "user", "content": "hi"}]}\'',
                        "",
                        "Ctrl-C to stop.",
                    ]
                ),
                flush=True,
            )

        apps: list[tuple[Any, str, trio.Event | None]] = [
            (upstream_app, f"127.0.0.1:{upstream_port}", None),
            (app, bind, app.gateway.draining),
            (proxy_app, f"127.0.0.1:{proxy_port}", proxy_app.proxy.draining),
        ]
        trio.run(
            lambda: run_until_signalled(
                apps, drain_timeout=cfg.server.drain_timeout_seconds, on_ready=ready
            )
        )
        return 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
