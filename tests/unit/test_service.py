"""Service files, doctor, instance lock, health poller, smoke checker (no servers)."""

from __future__ import annotations

import io
import json
import plistlib
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway import cli
from gateway.api.smoke import (
    SELFTEST_DIR,
    check_selftest_stream,
    find_host_paths,
    selftest_content,
    selftest_script,
    write_selftest_file,
)
from gateway.cli.healthpoll import poll_health
from gateway.ops.lock import (
    AlreadyRunning,
    InstanceLock,
    detect_supervisor,
    lock_path,
    read_pid,
    replace_running,
    supervisor_of_pid,
)
from gateway.ops.supervisor import (
    LaunchdJob,
    NotLoaded,
    ServiceSpec,
    diagnose,
    format_report,
    parse_launchctl_print,
    render_launchd,
    render_systemd,
    stop_timeout,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "launchctl"
EXE = Path("/Users/alice/src/artifact-gateway/.venv/bin/gateway")
CONFIG = Path("/Users/alice/.config/artifact-gateway/config.toml")
LOGS = Path("/Users/alice/Library/Logs/artifact-gateway")
LIVE_PLIST = "/Users/alice/Library/LaunchAgents/com.artifact-gateway.api.plist"


def alice_spec(**kw: Any) -> ServiceSpec:
    """The definition the captured ``launchctl print`` texts were loaded from."""
    args: dict[str, Any] = {
        "role": "api",
        "executable": EXE,
        "config_path": CONFIG,
        "drain_timeout": 10.0,
        "log_dir": LOGS,
    }
    args.update(kw)
    return ServiceSpec(**args)


def systemd_sections(text: str) -> dict[str, list[tuple[str, str]]]:
    sections: dict[str, list[tuple[str, str]]] = {}
    current = ""
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
            sections[current] = []
            continue
        key, _, value = line.partition("=")
        sections[current].append((key, value))
    return sections


def one(section: list[tuple[str, str]], key: str) -> str:
    values = [v for k, v in section if k == key]
    assert len(values) == 1, (key, values)
    return values[0]


# --------------------------------------------------------------------------- render


def test_launchd_plist_fields() -> None:
    spec = alice_spec()
    plist = plistlib.loads(render_launchd(spec))
    assert plist["Label"] == "com.artifact-gateway.api"
    assert plist["ProgramArguments"] == [str(EXE), "run", "--config", str(CONFIG)]
    assert "--replace" not in plist["ProgramArguments"]
    assert plist["EnvironmentVariables"]["GATEWAY_CONFIG"] == str(CONFIG)
    assert plist["RunAtLoad"] is True
    assert plist["KeepAlive"] is True
    assert isinstance(plist["ThrottleInterval"], int) and plist["ThrottleInterval"] >= 1
    assert isinstance(plist["ExitTimeOut"], int) and plist["ExitTimeOut"] > 10.0
    assert plist["StandardOutPath"] == str(LOGS / "api.log")
    assert plist["StandardErrorPath"] == str(LOGS / "api.log")
    assert plist["WorkingDirectory"] == str(CONFIG.parent)
    # two descriptors per relayed stream: room for server.max_connections (16384)
    assert plist["SoftResourceLimits"]["NumberOfFiles"] >= 2 * 16384
    assert "HardResourceLimits" not in plist  # launchd's own (unlimited) stays


def test_launchd_proxy_role_and_fractional_drain() -> None:
    plist = plistlib.loads(render_launchd(alice_spec(role="proxy", drain_timeout=12.5)))
    assert plist["Label"] == "com.artifact-gateway.proxy"
    assert plist["ProgramArguments"][1] == "proxy"
    assert plist["ExitTimeOut"] > 12.5
    assert plist["StandardErrorPath"].endswith("/proxy.log")


def test_systemd_unit_fields() -> None:
    text = render_systemd(alice_spec())
    sections = systemd_sections(text)
    svc = sections["Service"]
    assert one(svc, "Type") == "notify"
    assert shlex.split(one(svc, "ExecStart")) == [str(EXE), "run", "--config", str(CONFIG)]
    assert "--replace" not in one(svc, "ExecStart")
    assert one(svc, "Restart") == "always"
    assert int(one(svc, "RestartSec")) >= 1
    assert int(one(svc, "TimeoutStopSec")) > 10.0
    assert one(svc, "KillMode") == "mixed"
    assert int(one(svc, "LimitNOFILE")) >= 2 * 16384
    envs = [v for k, v in svc if k == "Environment"]
    assert f"GATEWAY_CONFIG={CONFIG}" in envs
    assert one(sections["Install"], "WantedBy") == "default.target"


def test_systemd_quotes_spaces_and_specifiers(tmp_path: Path) -> None:
    odd = Path("/home/bob/my configs/gw%1$x.toml")
    text = render_systemd(alice_spec(config_path=odd, executable=Path("/opt/gw/bin/gateway")))
    svc = systemd_sections(text)["Service"]
    exec_start = one(svc, "ExecStart")
    assert '"/home/bob/my configs/gw%%1$$x.toml"' in exec_start
    envs = [v for k, v in svc if k == "Environment"]
    assert '"GATEWAY_CONFIG=/home/bob/my configs/gw%%1$x.toml"' in envs  # no $ expansion there
    assert one(svc, "WorkingDirectory") == "/home/bob/my configs"


def test_spec_refuses_relative_paths_and_unknown_roles() -> None:
    with pytest.raises(ValueError, match="absolute"):
        alice_spec(config_path=Path("gw.toml"))
    with pytest.raises(ValueError, match="role"):
        alice_spec(role="worker")
    assert stop_timeout(10) == 15 and stop_timeout(0.5) == 6


def test_cli_render_writes_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "gw.toml"
    cfg.write_text(f'state_dir = "{tmp_path / "state"}"\n[server]\ndrain_timeout_seconds = 7\n')
    out = tmp_path / "LaunchAgents" / "com.artifact-gateway.api.plist"
    rc = cli.main(
        [
            "service", "render", "launchd", "--config", str(cfg), "--out", str(out),
            "--log-dir", str(tmp_path / "logs"), "--executable", "/opt/gw/bin/gateway",
        ]
    )  # fmt: skip
    assert rc == 0
    plist = plistlib.loads(out.read_bytes())
    assert plist["ProgramArguments"] == ["/opt/gw/bin/gateway", "run", "--config", str(cfg)]
    assert plist["ExitTimeOut"] == 12
    assert (tmp_path / "logs").is_dir()  # launchd cannot create it (EX_CONFIG)
    assert "launchctl bootstrap" in capsys.readouterr().err

    rc = cli.main(["service", "render", "systemd", "--role", "proxy", "--config", str(cfg)])
    assert rc == 0
    unit = capsys.readouterr().out
    assert "ExecStart=" in unit and " proxy --config " in unit


def test_cli_render_needs_a_config(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.delenv("GATEWAY_CONFIG", raising=False)
    assert cli.main(["service", "render", "systemd"]) == 2
    assert "--config" in capsys.readouterr().err


# --------------------------------------------------------------------------- doctor


def codes(name: str, plist_path: str = LIVE_PLIST) -> dict[str, str]:
    live = parse_launchctl_print((DATA / name).read_text())
    plist = plistlib.loads(render_launchd(alice_spec()))
    return {f.code: f.severity for f in diagnose(plist, live, plist_path=plist_path)}


def test_captured_texts_exist() -> None:
    names = {p.name for p in DATA.glob("*.txt")}
    assert {
        "healthy.txt",
        "stale-replace.txt",
        "flapping.txt",
        "not-running.txt",
        "unloaded.txt",
        "lock-conflict.txt",
    } <= names


def test_parse_healthy() -> None:
    job = parse_launchctl_print((DATA / "healthy.txt").read_text())
    assert isinstance(job, LaunchdJob)
    assert job.target == "gui/501/com.artifact-gateway.api"
    assert job.domain == "gui/501" and job.label == "com.artifact-gateway.api"
    assert job.state == "running"  # not the nested coalitions' "state = active"
    assert job.pid == 48213 and job.runs == 1
    assert job.arguments == [str(EXE), "run", "--config", str(CONFIG)]
    assert job.environment["GATEWAY_CONFIG"] == str(CONFIG)
    assert "PATH" not in job.environment  # that is "default environment"
    assert job.exit_timeout == 15 and job.minimum_runtime == 10
    assert job.last_exit_code is None and job.last_signal is None
    assert job.properties == {"keepalive", "runatload", "inferred program"}


def test_parse_exit_codes_and_signals() -> None:
    flapping = parse_launchctl_print((DATA / "flapping.txt").read_text())
    assert isinstance(flapping, LaunchdJob)
    assert flapping.last_signal == 9 and flapping.runs == 347
    dead = parse_launchctl_print((DATA / "not-running.txt").read_text())
    assert isinstance(dead, LaunchdJob)
    assert dead.last_exit_code == 78 and dead.pid is None and dead.state == "not running"


def test_parse_unloaded_and_garbage() -> None:
    res = parse_launchctl_print((DATA / "unloaded.txt").read_text())
    assert res == NotLoaded("com.artifact-gateway.api", "gui: 501", res.text)
    with pytest.raises(ValueError):
        parse_launchctl_print("hello\n")


def test_parse_space_indented_output() -> None:
    text = (DATA / "healthy.txt").read_text().replace("\t", "    ")
    job = parse_launchctl_print(text)
    assert isinstance(job, LaunchdJob) and job.pid == 48213 and len(job.arguments) == 4


def test_doctor_healthy() -> None:
    assert codes("healthy.txt") == {"OK": "ok"}


def test_doctor_stale_with_replace() -> None:
    found = codes("stale-replace.txt")
    assert found["STALE_DEFINITION"] == "error"
    assert found["REPLACE_IN_ARGUMENTS"] == "error"
    assert "OK" not in found and "FLAPPING" not in found
    live = parse_launchctl_print((DATA / "stale-replace.txt").read_text())
    plist = plistlib.loads(render_launchd(alice_spec()))
    stale = next(
        f for f in diagnose(plist, live, plist_path=LIVE_PLIST) if f.code == "STALE_DEFINITION"
    )
    text = " ".join(stale.details)
    assert "kickstart -k" in text and "--replace" in text
    assert stale.fix == (
        "launchctl bootout gui/501/com.artifact-gateway.api",
        f"launchctl bootstrap gui/501 {LIVE_PLIST}",
    )


def test_doctor_flapping_sigkill() -> None:
    assert codes("flapping.txt") == {"FLAPPING": "error"}


def test_doctor_not_running_ex_config() -> None:
    live = parse_launchctl_print((DATA / "not-running.txt").read_text())
    findings = diagnose(plistlib.loads(render_launchd(alice_spec())), live, plist_path=LIVE_PLIST)
    assert [f.code for f in findings] == ["NOT_RUNNING"]
    assert "StandardOutPath" in " ".join(findings[0].details)


def test_doctor_lock_conflict_loop() -> None:
    found = codes("lock-conflict.txt")
    assert found == {"FLAPPING": "error", "NOT_RUNNING": "error"}


def test_doctor_unloaded() -> None:
    found = codes("unloaded.txt")
    assert found == {"NOT_LOADED": "error"}
    live = parse_launchctl_print((DATA / "unloaded.txt").read_text())
    (finding,) = diagnose(None, live, plist_path=LIVE_PLIST)
    assert f"launchctl bootstrap gui/501 {LIVE_PLIST}" in finding.fix


def test_doctor_other_plist_and_replace_in_plist() -> None:
    live = parse_launchctl_print((DATA / "healthy.txt").read_text())
    plist = plistlib.loads(render_launchd(alice_spec()))
    plist["ProgramArguments"].insert(2, "--replace")
    found = {f.code for f in diagnose(plist, live, plist_path="/tmp/elsewhere.plist")}
    assert {"OTHER_PLIST", "REPLACE_IN_PLIST", "STALE_DEFINITION"} <= found


def test_doctor_exit_timeout_below_drain() -> None:
    live = parse_launchctl_print((DATA / "healthy.txt").read_text())
    plist = plistlib.loads(render_launchd(alice_spec()))
    found = {f.code for f in diagnose(plist, live, plist_path=LIVE_PLIST, drain_timeout=30)}
    assert found == {"OK", "EXIT_TIMEOUT_TOO_SHORT"}


@pytest.mark.parametrize(
    ("name", "rc", "expected"),
    [
        ("healthy.txt", 0, {"OK", "OTHER_PLIST"}),
        ("stale-replace.txt", 1, {"STALE_DEFINITION", "REPLACE_IN_ARGUMENTS", "OTHER_PLIST"}),
        ("flapping.txt", 1, {"FLAPPING", "OTHER_PLIST"}),
        ("not-running.txt", 1, {"NOT_RUNNING", "OTHER_PLIST"}),
        ("lock-conflict.txt", 1, {"FLAPPING", "NOT_RUNNING", "OTHER_PLIST"}),
        ("unloaded.txt", 1, {"NOT_LOADED"}),
    ],
)
def test_cli_doctor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, rc: int, expected: set[str]
) -> None:
    plist_file = tmp_path / "com.artifact-gateway.api.plist"
    plist_file.write_bytes(render_launchd(alice_spec()))
    argv = ["service", "doctor", "--plist", str(plist_file), "--launchctl-print"]
    assert cli.main([*argv, str(DATA / name), "--json"]) == rc
    assert {f["code"] for f in json.loads(capsys.readouterr().out)} == expected
    assert cli.main([*argv, str(DATA / name)]) == rc  # the human report
    assert "[" in capsys.readouterr().out


def test_cli_doctor_reads_stdin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    plist_file = tmp_path / "api.plist"
    plist_file.write_bytes(render_launchd(alice_spec()))
    monkeypatch.setattr(sys, "stdin", io.StringIO((DATA / "stale-replace.txt").read_text()))
    assert (
        cli.main(["service", "doctor", "--plist", str(plist_file), "--launchctl-print", "-"]) == 1
    )
    out = capsys.readouterr().out
    assert "STALE_DEFINITION" in out and "bootout" in out and "kickstart -k" in out


# --------------------------------------------------------------------------- lock


def test_lock_excludes_and_names_the_pid(tmp_path: Path) -> None:
    first = InstanceLock.acquire(tmp_path / "state")
    try:
        assert read_pid(first.path) == __import__("os").getpid()
        with pytest.raises(AlreadyRunning) as info:
            InstanceLock.acquire(tmp_path / "state")
        assert info.value.pid == __import__("os").getpid()
        assert InstanceLock.acquire(tmp_path / "state", name="proxy").path.name == "proxy.lock"
        assert InstanceLock.wait(tmp_path / "state", 0.2) is None
    finally:
        first.release()
    again = InstanceLock.acquire(tmp_path / "state")
    again.release()
    again.release()  # idempotent
    assert lock_path(tmp_path / "state").exists()  # never deleted


def test_read_pid_garbage(tmp_path: Path) -> None:
    f = tmp_path / "x.lock"
    assert read_pid(f) is None
    for text in ("", "\n", "abc\n", "-5\n", "0\n"):
        f.write_text(text)
        assert read_pid(f) is None
    f.write_text("4242\n")
    assert read_pid(f) == 4242


@pytest.mark.parametrize(
    ("env", "supervised"),
    [
        ({}, False),
        ({"XPC_SERVICE_NAME": "0"}, False),  # Terminal.app
        ({"XPC_SERVICE_NAME": "application.com.googlecode.iterm2.1234.5678"}, False),
        ({"XPC_SERVICE_NAME": "com.artifact-gateway.api"}, True),
        ({"INVOCATION_ID": "0b2c5cf8a1e64c6f9d1b3f1c2a7e9d40"}, True),
        ({"NOTIFY_SOCKET": "/run/user/1000/systemd/notify"}, True),
    ],
)
def test_detect_supervisor(env: dict[str, str], supervised: bool) -> None:
    assert (detect_supervisor(env) is not None) is supervised


def test_invocation_id_leaked_into_a_terminal_scope_is_not_a_supervisor() -> None:
    env = {"INVOCATION_ID": "0b2c5cf8a1e64c6f9d1b3f1c2a7e9d40"}
    assert detect_supervisor(env, "vte-spawn-1f0e2d3c.scope") is None
    assert detect_supervisor(env, "artifact-gateway-api.service") is not None
    assert detect_supervisor({**env, "NOTIFY_SOCKET": "/run/x"}, "session-3.scope") is not None


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
def test_replace_refuses_a_supervised_holder(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "INVOCATION_ID": "0b2c5cf8a1e64c6f9d1b3f1c2a7e9d40"}
    held = subprocess.Popen(["sleep", "30"], env=env)
    try:
        time.sleep(0.1)
        assert supervisor_of_pid(held.pid) == "systemd (INVOCATION_ID is set)"
        said: list[str] = []
        with pytest.raises(AlreadyRunning) as info:
            replace_running(
                tmp_path,
                AlreadyRunning(tmp_path / "gateway.lock", held.pid),
                timeout=1,
                say=said.append,
            )
        assert "managed by systemd" in info.value.args[0]
        assert said == [] and held.poll() is None  # never signalled
    finally:
        held.kill()
        held.wait()


def test_hard_exit_backstop_exits_zero() -> None:
    code = (
        "import time, logging\n"
        "from gateway.http.serve import _hard_exit_after\n"
        "_hard_exit_after(0.3, lambda: 'test')\n"
        "time.sleep(10)\n"
        "raise SystemExit(7)\n"
    )
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, timeout=20, check=False
    )
    assert proc.returncode == 0
    assert time.monotonic() - t0 < 5
    assert b"drain deadline reached (test)" in proc.stderr


# --------------------------------------------------------------------------- health


def test_poll_health_counts_tries() -> None:
    answers = iter([None, 503, 200])
    slept: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        status = next(answers)
        if status is None:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(status, json={"status": "ok" if status == 200 else "unready"})

    seen: list[tuple[int, str]] = []
    res = poll_health(
        "http://gw/health",
        tries=5,
        interval=1.0,
        transport=httpx.MockTransport(handler),
        sleep=slept.append,
        on_try=lambda n, why: seen.append((n, why)),
    )
    assert res.healthy and res.tries == 3 and res.status == 200
    assert [n for n, _ in seen] == [1, 2]
    assert "refused" in seen[0][1] and "HTTP 503" in seen[1][1]
    assert len(slept) == 2
    assert "healthy on try 3 of 5" in res.summary("http://gw/health", 5)


def test_poll_health_never() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, json={"status": "unready"})

    res = poll_health(
        "http://gw/health/ready",
        tries=3,
        interval=0,
        transport=httpx.MockTransport(handler),
        sleep=lambda s: None,
    )
    assert not res.healthy and res.tries == 3 and res.status == 503
    assert "not healthy after 3 tries" in res.summary("http://gw/health/ready", 3)


@pytest.mark.parametrize(
    ("url", "status", "tries", "hint"),
    [
        ("http://gw:8642", 404, 1, "/ is not a health endpoint: try /health"),
        ("http://gw:8642/v1/models", 401, 1, "/v1/models is not a health endpoint"),
        ("http://gw:8642/health", 404, 1, "polling again would not change it"),
        ("http://gw:8642/health", 429, 3, None),  # may change: tried again
        ("http://gw:8642/health", 408, 3, None),
        ("http://gw:8642/health", 502, 3, None),
    ],
)
def test_poll_health_stops_at_an_answer_that_cannot_change(
    url: str, status: int, tries: int, hint: str | None
) -> None:
    """A server that answers 4xx (not 408/429) is up and this URL is wrong: no 30 s of
    retries, and the summary says what to try."""
    res = poll_health(
        url,
        tries=3,
        interval=0,
        transport=httpx.MockTransport(lambda r: httpx.Response(status, json={"error": "x"})),
        sleep=lambda s: None,
    )
    assert not res.healthy and res.tries == tries and res.status == status
    summary = res.summary(url, 3)
    assert (hint in summary) if hint else ("(" not in summary.split("->", 1)[1])


# --------------------------------------------------------------------------- smoke


def test_selftest_file_and_script(tmp_path: Path) -> None:
    nonce = "ab" * 16
    path = write_selftest_file(tmp_path, nonce)
    assert path.parent.name == SELFTEST_DIR
    assert path.read_bytes() == selftest_content(nonce)
    with pytest.raises(ValueError):
        write_selftest_file(tmp_path, "../../etc")
    pieces = selftest_script(str(path), nonce)
    body = b"".join(pieces)
    assert str(path).encode() in body  # the raw upstream body does mention the path
    assert len(pieces) > 8
    with pytest.raises(UnicodeDecodeError):
        for piece in pieces:
            piece.decode()  # one piece ends inside a UTF-8 character


def test_smoke_checker_catches_a_leak(tmp_path: Path) -> None:
    nonce = "cd" * 16
    path = write_selftest_file(tmp_path, nonce)
    raw = b"".join(selftest_script(str(path), nonce))  # unrewritten: leaks, no manifest
    checks, art = check_selftest_stream(raw, nonce, "private")
    failed = {c.name for c in checks if not c.ok}
    assert "no host-local path in the stream" in failed
    assert "terminal chunk carries the manifest" in failed
    assert art is None


def test_smoke_checker_reports_draining() -> None:
    chunk = {
        "choices": [{"index": 0, "delta": {}, "finish_reason": "error"}],
        "error": {"code": "gateway_draining", "message": "restarting"},
    }
    raw = b"data: " + json.dumps(chunk).encode() + b"\n\ndata: [DONE]\n\n"
    checks, art = check_selftest_stream(raw, "ef" * 16, "private")
    assert art is None
    assert any(not c.ok and "gateway_draining" in c.detail for c in checks)


def test_find_host_paths() -> None:
    assert find_host_paths("see /Users/alice/out/report.pdf and /tmp/x.txt") == [
        "/Users/alice/out/report.pdf",
        "/tmp/x.txt",
    ]
    assert find_host_paths("[r.pdf](http://127.0.0.1:8642/v1/artifacts/abc?exp=1&sig=x)") == []


# --------------------------------------------------------------------------- report texts


def test_report_says_ok_once_and_fixes_name_the_real_config() -> None:
    plist = plistlib.loads(render_launchd(alice_spec()))
    healthy = parse_launchctl_print((DATA / "healthy.txt").read_text())
    report = format_report(diagnose(plist, healthy, plist_path=LIVE_PLIST), healthy, LIVE_PLIST)
    assert "[OK] com.artifact-gateway.api is running as defined" in report
    assert "[OK] OK" not in report
    stale = parse_launchctl_print((DATA / "stale-replace.txt").read_text())
    fixes = [c for f in diagnose(plist, stale, plist_path=LIVE_PLIST) for c in f.fix]
    assert (
        f"gateway service render launchd --role api --config {CONFIG} --out {LIVE_PLIST}" in fixes
    )
    assert not any("<config" in c for c in fixes)
    # without a plist, the loaded job's own arguments name the config
    (unloaded,) = diagnose(None, parse_launchctl_print((DATA / "unloaded.txt").read_text()))
    assert unloaded.fix[0].startswith("gateway service render launchd --role api --config ")
    explicit = diagnose(plist, stale, plist_path=LIVE_PLIST, config_path="/etc/gw.toml")
    assert any("--config /etc/gw.toml" in c for f in explicit for c in f.fix)
