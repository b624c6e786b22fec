"""gateway.ops.logs: the text and JSON line formats, access lines, per-app tags."""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Iterator
from typing import Literal

import pytest
import trio

from gateway.ops import logs
from gateway.ops.logs import (
    AccessEntry,
    access_message,
    app_tag,
    configure_logging,
    format_access_line,
    log_access,
    tagged,
)

ENTRY = AccessEntry(
    method="POST",
    path="/v1/chat/completions",
    route="/v1/chat/completions",
    status=200,
    bytes=2210,
    duration_ms=412.66,
    principal="alice",
)
WHEN = 1767621787.4125  # 2026-01-05T14:03:07.412Z


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    """configure_logging into a buffer; the handler is removed afterwards."""
    buf = io.StringIO()
    handler = configure_logging("gateway", "text", "info", stream=buf)
    try:
        yield buf
    finally:
        logging.getLogger().removeHandler(handler)
        logging.getLogger().setLevel(logging.WARNING)


def test_access_message_is_logfmt() -> None:
    assert access_message(ENTRY) == (
        "method=POST path=/v1/chat/completions route=/v1/chat/completions status=200 "
        "bytes=2210 duration_ms=412.7 principal=alice"
    )


def test_access_message_quotes_what_could_forge_a_line() -> None:
    crafted = AccessEntry("GET", '/x y\n2026 INFO forged "q"', "unmatched", 404, 0, 0.0, "-")
    message = access_message(crafted)
    assert "\n" not in message
    assert 'path="/x y\\n2026 INFO forged \\"q\\""' in message
    assert message.split()[-1] == "principal=-"


def test_the_quick_access_message_is_the_general_one() -> None:
    """access_message writes the numbers without looking at them (they need no quotes):
    the same line as every field through the quoting rule, in the entry's field order."""
    assert logs._ACCESS_FIELDS == (
        "method", "path", "route", "status", "bytes", "duration_ms", "principal"
    )  # fmt: skip
    entries = [
        ENTRY,
        AccessEntry("GET", '/x y\n"q"=\\', "un matched", 404, 0, 0.0, "a b"),
        AccessEntry("", "", "", -1, -5, -0.04, ""),
        AccessEntry("POST", "/é", "/r", 599, 10**12, float("inf"), "openwebui:u=1"),
    ]
    for e in entries:
        general = " ".join(f"{k}={logs._logfmt_value(getattr(e, k))}" for k in logs._ACCESS_FIELDS)
        assert access_message(e) == general


def test_text_access_line() -> None:
    line = format_access_line(ENTRY, "text", when=WHEN)
    when, rest = line[:23], line[24:]
    assert when[:10].count("-") == 2 and when[19] == "."  # local time, milliseconds
    assert rest == "gateway  INFO  access: " + access_message(ENTRY)


def test_json_access_line() -> None:
    line = format_access_line(ENTRY, "json", process="proxy", when=WHEN)
    data = json.loads(line)
    assert data["ts"] == "2026-01-05T14:03:07.412Z"
    assert (data["level"], data["process"], data["logger"]) == ("info", "proxy", "gateway.access")
    assert data["msg"] == access_message(ENTRY)
    assert {k: data[k] for k in ("method", "path", "route", "status", "bytes", "principal")} == {
        "method": "POST",
        "path": "/v1/chat/completions",
        "route": "/v1/chat/completions",
        "status": 200,
        "bytes": 2210,
        "principal": "alice",
    }
    assert data["duration_ms"] == 412.7
    assert isinstance(data["pid"], int)


def test_log_access_goes_through_the_handler(stream: io.StringIO) -> None:
    log_access(
        logging.getLogger("gateway.access"), "bob", "GET", "/health", "/health", 200, 54, 1.25
    )
    assert stream.getvalue().endswith(
        "gateway  INFO  access: method=GET path=/health route=/health status=200 bytes=54 "
        "duration_ms=1.2 principal=bob\n"
    )


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_the_direct_access_line_is_the_line_logging_writes(
    fmt: Literal["text", "json"], monkeypatch: pytest.MonkeyPatch
) -> None:
    # an access line is written without a LogRecord when the gateway's handler alone
    # would write it; it must be the very line the logging path writes
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])  # pytest's capture handlers aside
    buf = io.StringIO()
    handler = configure_logging("proxy", fmt, "info", stream=buf)
    monkeypatch.setattr(time, "time", lambda: 1767621787.4127)
    access = logging.getLogger("gateway.access")
    args = ("bob", "POST", '/v1/x "y"', "/v1/x", 200, 54, 1.25)
    assert logs._direct_handler(access) is handler
    log_access(access, *args)
    with tagged("gateway"):
        log_access(access, *args)

    def through_logging() -> None:
        log_access(access, *args)
        with tagged("gateway"):
            log_access(access, *args)

    access.addFilter(lambda record: True)  # a filter: only a LogRecord can pass it
    try:
        assert logs._direct_handler(access) is None
        through_logging()
    finally:
        access.filters.clear()
    lines = buf.getvalue().splitlines()
    assert len(lines) == 4 and lines[:2] == lines[2:]
    assert "proxy" in lines[0] and "gateway" in lines[1]
    # anything else on the way takes the logging path
    other = logging.StreamHandler(io.StringIO())
    for undo in (
        lambda: root.addHandler(other) or (lambda: root.removeHandler(other)),
        lambda: handler.setFormatter(logging.Formatter()) or (lambda: None),
        lambda: handler.setLevel(logging.WARNING) or (lambda: handler.setLevel(0)),
        lambda: (
            logging.getLogger("gateway").addHandler(other)
            or (lambda: logging.getLogger("gateway").removeHandler(other))
        ),
    ):
        restore = undo()
        assert logs._direct_handler(access) is None
        restore()


def test_a_failing_stream_is_reported_once_and_the_line_not_repeated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a red-team pass: a failing flush made the direct path fall back and write twice
    class FlushFails(io.StringIO):
        def flush(self) -> None:
            raise OSError("disk full")

    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    buf = FlushFails()
    handler = configure_logging("gateway", "text", "info", stream=buf)
    reported: list[logging.LogRecord] = []
    monkeypatch.setattr(handler, "handleError", reported.append)
    access = logging.getLogger("gateway.access")
    log_access(access, "bob", "GET", "/health", "/health", 200, 54, 1.25)
    assert len(buf.getvalue().splitlines()) == 1
    assert len(reported) == 1 and "path=/health" in reported[0].getMessage()


def test_text_lines_components_and_levels(stream: io.StringIO) -> None:
    logging.getLogger("gateway").warning("plain")
    logging.getLogger("gateway.server").info("draining")
    logging.getLogger("hypercorn.error").info("Running on http://127.0.0.1:1")
    logging.getLogger("gateway.server").debug("not shown at info")
    lines = [line[24:] for line in stream.getvalue().splitlines()]
    assert lines == [
        "gateway  WARN  plain",
        "gateway  INFO  server: draining",
        "gateway  INFO  hypercorn: Running on http://127.0.0.1:1",
    ]


def test_json_lines_with_a_traceback() -> None:
    buf = io.StringIO()
    handler = configure_logging("proxy", "json", "info", stream=buf)
    try:
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            logging.getLogger("gateway.proxy").exception("failed")
    finally:
        logging.getLogger().removeHandler(handler)
    (line,) = buf.getvalue().splitlines()
    data = json.loads(line)
    assert (data["level"], data["process"], data["msg"]) == ("error", "proxy", "failed")
    assert "RuntimeError: boom" in data["exc"]


def test_configure_logging_replaces_its_own_handler_only(stream: io.StringIO) -> None:
    root = logging.getLogger()
    others = [h for h in root.handlers if h.__class__.__name__ != "_GatewayHandler"]
    second = io.StringIO()
    handler = configure_logging("gateway", "text", "info", stream=second)
    try:
        logging.getLogger("gateway").info("once")
        assert stream.getvalue() == ""
        assert second.getvalue().count("once") == 1
        assert [h for h in root.handlers if h.__class__.__name__ != "_GatewayHandler"] == others
    finally:
        root.removeHandler(handler)


def test_httpx_is_quiet_unless_debug(stream: io.StringIO) -> None:
    logging.getLogger("httpx").info('HTTP Request: GET http://x "HTTP/1.1 200 OK"')
    assert stream.getvalue() == ""
    assert logging.getLogger("httpcore").level == logging.WARNING
    handler = configure_logging("gateway", "text", "debug", stream=stream)
    try:
        assert logging.getLogger("httpx").level == logging.DEBUG
    finally:
        logging.getLogger().removeHandler(handler)


def test_app_tags() -> None:
    class App:
        def __init__(self, name: str) -> None:
            self.name = name

    assert app_tag(App("gateway")) == "gateway"
    assert app_tag(App("gateway-proxy")) == "proxy"
    assert app_tag(App("gateway.cli.demo_upstream")) == "upstream"
    assert app_tag(App("other")) == "other"
    tagged_app = App("gateway")
    tagged_app.log_tag = "canary"  # type: ignore[attr-defined]
    assert app_tag(tagged_app) == "canary"


async def test_tags_follow_the_tasks_of_each_app(stream: io.StringIO) -> None:
    """The demo serves three apps in one process: each task tree logs under its own tag."""
    log = logging.getLogger("gateway.access")

    async def serve(tag: str) -> None:
        with tagged(tag):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(handle, tag)

    async def handle(tag: str) -> None:
        await trio.lowlevel.checkpoint()
        log.info("request for %s", tag)
        await trio.to_thread.run_sync(log.info, f"thread for {tag}")

    async with trio.open_nursery() as nursery:
        for tag in ("upstream", "gateway", "proxy"):
            nursery.start_soon(serve, tag)
    logging.getLogger("gateway").info("outside")
    seen = {
        (line[24:32].strip(), line.rsplit(" ", 1)[-1]) for line in stream.getvalue().splitlines()
    }
    assert seen == {
        ("upstream", "upstream"),
        ("gateway", "gateway"),
        ("proxy", "proxy"),
        ("gateway", "outside"),
    }


def test_a_forked_childs_access_lines_carry_its_own_pid(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pid is kept, not asked for per line: a forked child must not write its
    parent's."""
    import os

    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            buf = io.StringIO()
            configure_logging("gateway", "json", "info", stream=buf)
            log_access(logging.getLogger("gateway.access"), "-", "GET", "/", "/", 200, 1, 1.0)
            os.write(write, f"{os.getpid()} {json.loads(buf.getvalue())['pid']}".encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as r:
        child, logged = r.read().split()
    assert os.waitpid(pid, 0)[1] == 0
    assert child == logged and int(child) != os.getpid()
