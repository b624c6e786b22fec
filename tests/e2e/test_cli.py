"""The command line as an operator meets it: help texts, ``config``, start-up warnings,
log formats, the demo's options, and the hints of ``service`` and ``smoke``.

Every command runs as a real subprocess (``python -m gateway.cli`` / ``python -m
gateway.cli.demo``) with an environment free of ``GATEWAY_*`` variables.
"""

from __future__ import annotations

import argparse
import json
import os
import plistlib
import re
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gateway.cli import build_parser
from gateway.ops.config import config_from_dict
from gateway.ops.supervisor import ServiceSpec, render_launchd

ROOT = Path(__file__).resolve().parents[2]
LAUNCHCTL = ROOT / "tests" / "data" / "launchctl"
KEY = "cli-alice-key-0123456789"
OWUI_KEY = "cli-owui-key-0123456789ab"


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
    for var in ("INVOCATION_ID", "NOTIFY_SOCKET", "XPC_SERVICE_NAME", "JOURNAL_STREAM"):
        env.pop(var, None)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def gateway(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env if env is not None else clean_env(),
        cwd=ROOT,
        timeout=60,
        check=False,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def running(
    args: list[str], log: Path, ready: str, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """A serving command, its stdout+stderr in ``log``, until ``ready`` appears in it."""
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, *args], stdout=fh, stderr=subprocess.STDOUT,
            env=env if env is not None else clean_env(), cwd=ROOT,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 30
            while ready not in log.read_text(errors="replace"):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"no {ready!r} in:\n{log.read_text(errors='replace')}")
                time.sleep(0.05)
            yield proc
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)


def write_config(path: Path, tmp: Path, body: str = "") -> Path:
    (tmp / "art").mkdir(exist_ok=True)
    path.write_text(
        f'state_dir = "{tmp / "state"}"\n[artifacts]\nroots = ["{tmp / "art"}"]\n' + body,
        encoding="utf-8",
    )
    return path


# --------------------------------------------------------------------------- help


def _parsers() -> dict[str, argparse.ArgumentParser]:
    """Every subcommand's parser, from the real one: {"run": ..., "config check": ...}."""
    out: dict[str, argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    out[" ".join([*path, name])] = sub
                    walk(sub, [*path, name])

    walk(build_parser(), [])
    return out


def test_top_level_help() -> None:
    res = gateway("--help")
    assert res.returncode == 0
    text = res.stdout
    assert "managed-download links" in text and "examples:" in text and "exit status" in text
    for command in ("run", "proxy", "demo", "config", "health", "smoke", "service"):
        line = next(li for li in text.splitlines() if li.strip().startswith(command + " "))
        assert len(line.split(None, 1)[1]) > 10, line  # a one-line description


@pytest.mark.parametrize("command", sorted(_parsers()))
def test_every_command_has_a_description_and_an_example(command: str) -> None:
    res = gateway(*command.split(), "--help")
    assert res.returncode == 0, res.stderr
    paragraphs = res.stdout.split("\n\n")
    assert paragraphs[0].startswith(f"usage: gateway {command}")
    description = paragraphs[1].strip()
    assert description.endswith(".") and description[0].isupper(), description
    assert re.search(r"^examples?:\n  gateway ", res.stdout, re.M), res.stdout
    for action in _parsers()[command]._actions:
        if not isinstance(action, argparse._SubParsersAction):  # its commands have help
            assert action.help, f"gateway {command}: {action.dest} has no help"


def test_demo_help_describes_every_option() -> None:
    for res in (gateway("demo", "--help"), _demo_module("--help")):
        assert res.returncode == 0
        for option, words in (
            ("--port", "gateway (API server) port (default 8642)"),
            ("--upstream-port", "demo upstream's port (default 9000)"),
            ("--proxy-port", "runs proxy's port (default 8653)"),
            ("--log-format", "json for log shippers"),
        ):
            assert option in res.stdout and words in " ".join(res.stdout.split()), option


def _demo_module(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli.demo", *args],
        capture_output=True, text=True, env=clean_env(), cwd=ROOT, timeout=60, check=False,
    )  # fmt: skip


# --------------------------------------------------------------------------- config


def test_example_piped_into_check_passes(tmp_path: Path) -> None:
    example = gateway("config", "example")
    assert example.returncode == 0 and example.stderr == ""
    assert "# [[auth.keys]]" in example.stdout
    checked = gateway("config", "check", "--config", "-", stdin=example.stdout)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.startswith("# effective configuration; file: <stdin>")
    effective = tomllib.loads(checked.stdout)
    assert effective["server"]["bind"] == "127.0.0.1:8642"
    assert config_from_dict(effective) == config_from_dict({})  # nothing secret to mask here
    err = checked.stderr.splitlines()
    assert any("the API server will refuse every request" in li for li in err)
    assert err[-1].startswith("gateway: configuration is valid with ")


def test_check_a_file_with_env_overrides_and_secrets(tmp_path: Path) -> None:
    cfg = write_config(
        tmp_path / "gw.toml",
        tmp_path,
        f'[[auth.keys]]\nkey = "{KEY}"\nprincipal = "alice"\n'
        f'[proxy]\nclient_keys = ["{OWUI_KEY}"]\ngateway_key = "{KEY}"\n',
    )
    env = clean_env(
        GATEWAY_CONFIG=str(cfg),
        GATEWAY_BIND="0.0.0.0:9999",
        GATEWAY_DATABASE_URL="postgresql://gw:pg-pass-123@db/gateway",
    )
    res = gateway("config", "check", env=env)
    assert res.returncode == 0, res.stderr
    assert f"file: {cfg}" in res.stdout
    assert 'bind = "0.0.0.0:9999"  # from $GATEWAY_BIND' in res.stdout
    assert (
        'database_url = "postgresql://gw:****@db/gateway"  # from $GATEWAY_DATABASE_URL'
        in res.stdout
    )
    for secret in (KEY, OWUI_KEY, "pg-pass-123"):
        assert secret not in res.stdout + res.stderr
    assert f'key = "****{KEY[-4:]}"' in res.stdout
    assert "public_base_url points at loopback" in res.stderr
    assert "role = \"user\" key of 'alice'" in res.stderr


@pytest.mark.parametrize(
    ("body", "env", "words"),
    [
        ("[server]\nbind = 'nowhere'\n", {}, "config key 'server.bind': invalid bind 'nowhere'"),
        ("[sever]\n", {}, "config key 'sever': unknown key; did you mean 'server'?"),
        ("", {"GATEWAY_LOG_FORMAT": "xml"}, "(from environment variable GATEWAY_LOG_FORMAT)"),
        ("[server\n", {}, "invalid TOML in "),
    ],
)
def test_check_refuses_naming_the_key(
    tmp_path: Path, body: str, env: dict[str, str], words: str
) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text(body, encoding="utf-8")
    res = gateway("config", "check", "--config", str(cfg), env=clean_env(**env))
    assert res.returncode == 2
    assert res.stdout == ""
    (line,) = res.stderr.splitlines()
    assert line.startswith("gateway: ") and words in line, line


def test_check_missing_file_reads_as_a_sentence(tmp_path: Path) -> None:
    res = gateway("config", "check", "--config", str(tmp_path / "nope.toml"))
    assert res.returncode == 2
    assert res.stderr == f"gateway: config file not found: {tmp_path / 'nope.toml'}\n"


# --------------------------------------------------------------------------- serving


def test_run_warns_without_keys_and_logs_json(tmp_path: Path) -> None:
    port = free_port()
    cfg = write_config(tmp_path / "gw.toml", tmp_path, f'[server]\nbind = "127.0.0.1:{port}"\n')
    log = tmp_path / "gw.log"
    args = ["-m", "gateway.cli", "run", "--config", str(cfg), "--log-format", "json"]
    with running(args, log, "listening on"):
        pass
    lines = [json.loads(li) for li in log.read_text().splitlines() if li.startswith("{")]
    assert lines, log.read_text()
    assert all(li["process"] == "gateway" for li in lines)
    warning = next(li for li in lines if li["level"] == "warning")
    assert "no [[auth.keys]] configured: the API server will refuse every request" in warning["msg"]
    assert any(li["logger"] == "hypercorn.error" and "Running on" in li["msg"] for li in lines)


def test_proxy_warns_and_smoke_says_it_is_the_proxy(tmp_path: Path) -> None:
    port = free_port()
    cfg = write_config(tmp_path / "gw.toml", tmp_path, f'[proxy]\nbind = "127.0.0.1:{port}"\n')
    log = tmp_path / "proxy.log"
    with running(["-m", "gateway.cli", "proxy", "--config", str(cfg)], log, "listening on"):
        smoke = gateway("smoke", f"http://127.0.0.1:{port}", "--key", KEY)
    text = log.read_text()
    assert re.search(
        r" proxy +WARN  proxy.client_keys is empty: the runs proxy will refuse every request", text
    ), text
    assert "proxy.gateway_key is empty" in text
    assert smoke.returncode == 1
    assert "Open WebUI runs proxy" in smoke.stdout and "http://127.0.0.1:8642" in smoke.stdout
    assert "smoke: 1 of 1 checks FAILED" in smoke.stdout


def test_demo_module_parses_its_options_and_tags_each_app(tmp_path: Path) -> None:
    ports = {name: free_port() for name in ("gateway", "upstream", "proxy")}
    args = [
        "-m", "gateway.cli.demo", "--port", str(ports["gateway"]),
        "--upstream-port", str(ports["upstream"]), "--proxy-port", str(ports["proxy"]),
    ]  # fmt: skip
    log = tmp_path / "demo.log"
    with running(args, log, "Ctrl-C to stop."):
        import httpx

        health = httpx.get(f"http://127.0.0.1:{ports['proxy']}/health", timeout=10)
        assert health.status_code == 200
    text = log.read_text()
    for name, port in ports.items():
        line = next(li for li in text.splitlines() if f"Running on http://127.0.0.1:{port}" in li)
        assert line[24:].startswith(f"{name:<8} INFO  hypercorn: "), line
    # the proxy's call to the gateway's /health is logged by the gateway, tagged as such
    access = [li for li in text.splitlines() if " access: " in li and "path=/health" in li]
    assert {li[24:32].strip() for li in access} == {"gateway", "proxy"}, access
    assert "HTTP Request:" not in text  # httpx's per-request INFO lines are off


def test_demo_refuses_a_bad_log_format_variable() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "gateway.cli.demo"],
        capture_output=True, text=True, env=clean_env(GATEWAY_LOG_FORMAT="xml"),
        cwd=ROOT, timeout=60, check=False,
    )  # fmt: skip
    assert res.returncode == 2
    assert "GATEWAY_LOG_FORMAT" in res.stderr


# --------------------------------------------------------------------------- service


def test_service_render_without_a_config_says_what_to_pass() -> None:
    res = gateway("service", "render", "systemd")
    assert res.returncode == 2
    assert "config key" not in res.stderr and "<file>" not in res.stderr
    assert "pass --config PATH" in res.stderr and "gateway config example" in res.stderr


def test_service_doctor_names_the_real_config(tmp_path: Path) -> None:
    config = "/Users/alice/.config/artifact-gateway/config.toml"
    spec = ServiceSpec(
        role="api",
        executable=Path("/Users/alice/src/artifact-gateway/.venv/bin/gateway"),
        config_path=Path(config),
        drain_timeout=10.0,
        log_dir=Path("/Users/alice/Library/Logs/artifact-gateway"),
    )
    plist = tmp_path / "com.artifact-gateway.api.plist"
    plist.write_bytes(render_launchd(spec))
    ok = gateway(
        "service",
        "doctor",
        "--plist",
        str(plist),
        "--launchctl-print",
        str(LAUNCHCTL / "healthy.txt"),
    )
    assert "[OK] com.artifact-gateway.api is running as defined" in ok.stdout, ok.stdout
    assert "[OK] OK" not in ok.stdout
    stale = gateway(
        "service",
        "doctor",
        "--plist",
        str(plist),
        "--launchctl-print",
        str(LAUNCHCTL / "stale-replace.txt"),
    )
    assert stale.returncode == 1
    assert (
        f"gateway service render launchd --role api --config {config} --out {plist}" in stale.stdout
    )
    assert "<config>" not in stale.stdout
    data = plistlib.loads(plist.read_bytes())
    assert data["ProgramArguments"][-1] == config


# --------------------------------------------------------------------------- issue 36, item 7


def _warnings(stderr: str) -> list[str]:
    """The warning sentences of ``config check`` (``gateway: warning: ...``) or of a
    serving command's text log (``... WARN  ...``)."""
    out = []
    for line in stderr.splitlines():
        if line.startswith("gateway: warning: "):
            out.append(line.removeprefix("gateway: warning: "))
        elif " WARN  " in line:
            out.append(line.split(" WARN  ", 1)[1])
    return out


def test_check_warns_for_the_example_exactly_what_run_warns_at_start(tmp_path: Path) -> None:
    """The example written to a file, checked, then started: the same sentences, and no
    word about file descriptors (a default start fits max_connections to the host)."""
    example = gateway("config", "example").stdout
    port = free_port()
    cfg = tmp_path / "gw.toml"
    cfg.write_text(example, encoding="utf-8")
    env = clean_env(GATEWAY_STATE_DIR=str(tmp_path / "state"), GATEWAY_BIND=f"127.0.0.1:{port}")
    checked = gateway("config", "check", "--config", str(cfg), env=env)
    assert checked.returncode == 0, checked.stderr
    log = tmp_path / "gw.log"
    with running(["-m", "gateway.cli", "run", "--config", str(cfg)], log, "listening on", env):
        pass
    started = _warnings(log.read_text())
    assert started == _warnings(checked.stderr), log.read_text()
    assert any("refuse every request" in w for w in started)
    assert not any("descriptor" in w for w in started)


def test_check_prints_owner_prefix_only_under_proxy_keys(tmp_path: Path) -> None:
    cfg = tmp_path / "gw.toml"
    cfg.write_text(
        f'[artifacts]\nroots = ["{tmp_path}/{{principal}}"]\n'
        f'[[auth.keys]]\nkey = "{KEY}"\nprincipal = "alice"\n'
        '[[auth.keys]]\nkey = "cli-proxy-key-0123456789"\nprincipal = "p"\nrole = "proxy"\n',
        encoding="utf-8",
    )
    res = gateway("config", "check", "--config", str(cfg))
    assert res.returncode == 0, res.stderr
    out = res.stdout
    user, proxy = out.split("[[auth.keys]]")[1:3]
    assert "owner_prefix" not in user
    assert 'owner_prefix = "openwebui:"' in proxy


def test_run_bind_wins_over_the_file_and_the_variable(tmp_path: Path) -> None:
    port = free_port()
    cfg = write_config(tmp_path / "gw.toml", tmp_path, '[server]\nbind = "127.0.0.1:1"\n')
    env = clean_env(GATEWAY_BIND="127.0.0.1:2")
    log = tmp_path / "gw.log"
    args = ["-m", "gateway.cli", "run", "--config", str(cfg), "--bind", f"127.0.0.1:{port}"]
    with running(args, log, "listening on", env):
        pass
    assert f"listening on http://127.0.0.1:{port}" in log.read_text()
    bad = gateway("run", "--config", str(cfg), "--bind", "nowhere")
    assert bad.returncode == 2 and bad.stderr.startswith("gateway: --bind 'nowhere': "), bad.stderr


def test_log_level_has_a_variable(tmp_path: Path) -> None:
    port = free_port()
    cfg = write_config(tmp_path / "gw.toml", tmp_path, f'[server]\nbind = "127.0.0.1:{port}"\n')
    log = tmp_path / "gw.log"
    env = clean_env(GATEWAY_LOG_LEVEL="warning")
    with running(["-m", "gateway.cli", "run", "--config", str(cfg)], log, "refuse every", env):
        time.sleep(1.0)
    assert " INFO " not in log.read_text()
    res = gateway("config", "check", "--config", str(cfg), env=clean_env(GATEWAY_LOG_LEVEL="debug"))
    assert 'level = "debug"  # from $GATEWAY_LOG_LEVEL' in res.stdout
    bad = gateway("config", "check", env=clean_env(GATEWAY_LOG_LEVEL="loud"))
    assert bad.returncode == 2 and "GATEWAY_LOG_LEVEL" in bad.stderr


def test_demo_names_the_busy_port(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        args = ["--port", str(free_port()), "--upstream-port", str(free_port())]
        res = _demo_module(*args, "--proxy-port", str(port))
    assert res.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port} (--proxy-port): " in res.stderr, res.stderr


def test_ctrl_c_while_a_server_loads_ends_without_a_traceback() -> None:
    """SIGINT before the server's own handler is installed (during its imports) is
    Python's KeyboardInterrupt: the command ends as interrupted, quietly."""
    code = (
        "import sys, gateway.cli as cli, gateway.cli.serve as serve\n"
        "def loading(args):\n    raise KeyboardInterrupt\n"
        "serve._cmd_run = loading\n"
        "sys.exit(cli.main(['run']))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=clean_env(),
        cwd=ROOT, timeout=60, check=False,
    )  # fmt: skip
    assert res.returncode == -signal.SIGINT, res.stderr
    assert "Traceback" not in res.stderr and "KeyboardInterrupt" not in res.stderr
