"""``gateway demo``: the demo upstream, the gateway and the runs proxy in one process.

No LLM needed. A throw-away state dir (signing key, SQLite) and artifact root are
created under a temporary directory, demo keys are configured, and the URLs plus
ready-to-paste ``curl -N`` commands are printed. Ctrl-C drains and exits.
``python -m gateway.cli.demo`` takes the same options as ``gateway demo``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from gateway.core.errors import ConfigError
from gateway.ops.config import Config, config_from_dict

DEMO_USER_KEY = "demo-alice-key-0123456789"
DEMO_BOB_KEY = "demo-bob-key-0123456789ab"
DEMO_PROXY_KEY = "demo-proxy-key-0123456789"
DEMO_OWUI_KEY = "demo-openwebui-key-0123456789"

SUMMARY = "demo upstream, gateway and runs proxy in one process, no LLM"
DETAILS = """\
A scripted OpenAI-compatible upstream (it writes demo files and mentions their host
paths), the API server rewriting them into links, and the Open WebUI runs proxy, with
demo keys and a throw-away state directory. It prints the URLs and curl commands to
try; Ctrl-C drains and exits. No configuration file is read."""
EXAMPLE_ARGS = ("", " --port 18642 --upstream-port 19000 --proxy-port 18653 --log-format json")


#: connections per server in the demo (a production server's default is 16,384)
DEMO_MAX_CONNECTIONS = 1024


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
            # the demo's users share one folder on purpose: its scripted upstream writes
            # every answer's files there (a real deployment gives each its own folder)
            "artifacts": {
                "roots": [],
                "shared_roots": [str(base / "artifacts")],
                "default_link_mode": "private",
            },
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``gateway demo`` and ``python -m gateway.cli.demo``."""
    parser.add_argument(
        "--port", type=int, default=8642, help="the gateway (API server) port (default 8642)"
    )
    parser.add_argument(
        "--upstream-port",
        type=int,
        default=9000,
        help="the scripted OpenAI-compatible demo upstream's port (default 9000)",
    )
    parser.add_argument(
        "--proxy-port",
        type=int,
        default=8653,
        help="the Open WebUI runs proxy's port (default 8653)",
    )
    parser.add_argument(
        "--log-format",
        choices=["text", "json"],
        help="log lines on stderr: text for people, json for log shippers "
        "(default: $GATEWAY_LOG_FORMAT, else text)",
    )


def _banner(urls: list[list[str]], base: Path) -> str:
    gw, px = urls[1][0], urls[2][0]
    chat = '{"model": "demo", "stream": true, "messages": [{"role": "user", "content": "make me a report"}]}'
    proxied = '{"model": "demo", "stream": true, "download_link_mode": "public", "messages": [{"role": "user", "content": "hi"}]}'
    return "\n".join(
        [
            "",
            f"demo upstream  {urls[0][0]}/v1  (scripted, no LLM)",
            f"gateway        {gw}  (state in {base})",
            f"keys           alice: {DEMO_USER_KEY}   bob: {DEMO_BOB_KEY}",
            "",
            "try:",
            f"  curl -N {gw}/v1/chat/completions \\",
            f"    -H 'Authorization: Bearer {DEMO_USER_KEY}' -H 'Content-Type: application/json' \\",
            f"    -d '{chat}'",
            "",
            f"Open WebUI runs proxy {px}  (connection key {DEMO_OWUI_KEY}); as Open WebUI calls it:",
            f"  curl -N {px}/v1/chat/completions \\",
            f"    -H 'Authorization: Bearer {DEMO_OWUI_KEY}' -H 'X-OpenWebUI-User-Id: u-alice' \\",
            "    -H 'Content-Type: application/json' \\",
            f"    -d '{proxied}'",
            "",
            "Ctrl-C to stop.",
        ]
    )


def serve_demo(*, port: int = 8642, upstream_port: int = 9000, proxy_port: int = 8653) -> int:
    """Serve the three apps until SIGINT/SIGTERM; the temporary directory goes with them."""
    import trio

    from gateway.api.app import create_app
    from gateway.cli.demo_upstream import create_demo_upstream_app
    from gateway.http.serve import run_until_signalled
    from gateway.proxy import create_proxy_app

    base = Path(tempfile.mkdtemp(prefix="artifact-gateway-demo-"))
    try:
        (base / "artifacts").mkdir()
        upstream_app = create_demo_upstream_app(base / "artifacts", outside_dir=base / "outside")
        cfg = demo_config(
            base,
            upstream_url=f"http://127.0.0.1:{upstream_port}/v1",
            bind=f"127.0.0.1:{port}",
            public_base_url=f"http://127.0.0.1:{port}",
            proxy_bind=f"127.0.0.1:{proxy_port}",
        )
        app = create_app(cfg)
        proxy_app = create_proxy_app(cfg)
        apps: list[tuple[Any, str, trio.Event | None]] = [
            (upstream_app, f"127.0.0.1:{upstream_port}", None),
            (app, cfg.server.bind, app.gateway.draining),
            (proxy_app, cfg.proxy.bind, proxy_app.proxy.draining),
        ]

        def ready(urls: list[list[str]]) -> None:
            print(_banner(urls, base), flush=True)

        trio.run(
            lambda: run_until_signalled(
                apps,
                drain_timeout=cfg.server.drain_timeout_seconds,
                on_ready=ready,
                # a demo for one person: no warning that the host's descriptor limit
                # would not hold 16,384 streams
                max_connections=DEMO_MAX_CONNECTIONS,
            )
        )
        return 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run(args: argparse.Namespace) -> int:
    """``gateway demo`` with parsed options: logging, then :func:`serve_demo`."""
    from gateway.http.seam import UnsupportedServer
    from gateway.http.serve import find_bind_error
    from gateway.ops.logs import configure_logging

    try:
        names = ("GATEWAY_LOG_FORMAT", "GATEWAY_LOG_LEVEL")
        logcfg = config_from_dict({}, {n: os.environ.get(n, "") for n in names}).log
    except ConfigError as exc:
        print(f"gateway: {exc.message}", file=sys.stderr, flush=True)
        return 2
    configure_logging("demo", args.log_format or logcfg.format, logcfg.level)
    try:
        return serve_demo(
            port=args.port, upstream_port=args.upstream_port, proxy_port=args.proxy_port
        )
    except UnsupportedServer as exc:
        print(f"gateway: cannot serve: {exc}", file=sys.stderr, flush=True)
        return 1
    except BaseException as exc:
        bind_err = find_bind_error(exc)
        if bind_err is None:
            raise
        print(
            f"gateway: cannot listen on {_busy_ports(args)}: {bind_err.strerror or bind_err}; "
            "is another demo or gateway running? Pick other ports with "
            "--port/--upstream-port/--proxy-port.",
            file=sys.stderr,
            flush=True,
        )
        return 1


def _busy_ports(args: argparse.Namespace) -> str:
    """Which of the demo's ports cannot be bound now (named by their option)."""
    import socket

    busy = []
    for option, port in (
        ("--port", args.port),
        ("--upstream-port", args.upstream_port),
        ("--proxy-port", args.proxy_port),
    ):
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                busy.append(f"127.0.0.1:{port} ({option})")
    return " and ".join(busy) or "one of its ports"


def main(argv: list[str] | None = None) -> int:
    """``python -m gateway.cli.demo [options]`` (``argv`` defaults to ``sys.argv[1:]``)."""
    parser = argparse.ArgumentParser(
        prog="python -m gateway.cli.demo",
        description=SUMMARY[0].upper() + SUMMARY[1:] + ".\n\n" + DETAILS,
        epilog="examples:\n" + "\n".join(f"  python -m gateway.cli.demo{a}" for a in EXAMPLE_ARGS),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
