"""The routes served without quart (gateway.http.direct) answer exactly as quart's way does.

Two API servers on real hypercorn, one with its direct routes and one without
(``app.direct_routes = {}``: every request takes quart's way), the same scripted
upstream behind both; every request below goes to both over a raw socket and the
answers must be the same bytes (the ``date`` header aside): statuses, headers, error
bodies, streamed and whole answers, body limits, chunked and split bodies, keep-alive.
Then what only a live connection shows: a client that leaves mid-stream closes the
upstream stream, a body that stalls gets its 408, a handler bug is a 500 without
details.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from gateway.core.errors import RequestError
from gateway.core.sse import DONE
from harness.transport import Scripted, ScriptedTransport
from tests.conftest import ALICE_KEY, PROXY_KEY, make_config, start_gateway
from tests.e2e.test_chat_relay import wait_until
from tests.e2e.test_hostile_upstream import CHAT, SCRIPTED_URL, chunk

pytestmark = pytest.mark.trio

EVENTS = chunk({"role": "assistant"}) + chunk({"content": "hello there"}) + chunk({}, "stop")
WHOLE = {
    "id": "chatcmpl-w",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "whole"}, "finish_reason": "stop"}
    ],
}


def script_for(request: httpx.Request) -> Scripted:
    body = json.loads(request.content)
    if body.get("stream"):
        return Scripted([EVENTS, DONE])
    return Scripted([json.dumps(WHOLE).encode()], headers={"content-type": "application/json"})


def post(
    body: bytes | dict[str, Any], headers: str = "", path: str = CHAT, close: bool = True
) -> bytes:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    last = "Connection: close\r\n" if close else ""
    return (
        f"POST {path} HTTP/1.1\r\nHost: t\r\n{headers}{last}Content-Length: {len(data)}\r\n\r\n"
    ).encode() + data


def get(path: str, method: str = "GET") -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n".encode()


AUTH = f"Authorization: Bearer {ALICE_KEY}\r\n"
CHAT_BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def chunked(data: bytes, size: int) -> bytes:
    parts = [data[i : i + size] for i in range(0, len(data), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


CHUNKED_HEAD = f"POST {CHAT} HTTP/1.1\r\nHost: t\r\n{AUTH}Transfer-Encoding: chunked\r\n\r\n"
CHUNKED = CHUNKED_HEAD.replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n").encode() + chunked(
    json.dumps(CHAT_BODY).encode(), 7
)
CASES: dict[str, bytes] = {
    "health": get("/health"),
    "health with a query": get("/health?x=1"),
    "HEAD health": get("/health", "HEAD"),
    "POST health": post(b"", path="/health"),
    "GET chat": get(CHAT),
    "chat with a slash": post(CHAT_BODY, AUTH, CHAT + "/"),
    "no key": post(CHAT_BODY),
    "wrong key": post(CHAT_BODY, "Authorization: Bearer nope\r\n"),
    "two keys": post(CHAT_BODY, AUTH + AUTH),
    "basic auth": post(CHAT_BODY, "Authorization: Basic eDp5\r\n"),
    "user asserting an owner": post(CHAT_BODY, AUTH + "X-Gateway-Owner: bob\r\n"),
    "proxy asserting an owner": post(
        CHAT_BODY, f"Authorization: Bearer {PROXY_KEY}\r\nX-Gateway-Owner: carol\r\n"
    ),
    "not JSON": post(b"{nope", AUTH),
    "not UTF-8": post(b'{"model": "\xff"}', AUTH),
    "empty body": post(b"", AUTH),
    "a list": post(b"[1]", AUTH),
    "too deep": post(b"[" * 500 + b"]" * 500, AUTH),
    "NaN": post(b'{"model": NaN}', AUTH),
    "lone surrogate": post(b'{"model": "\\ud800", "messages": []}', AUTH),
    "no messages": post({"model": "m"}, AUTH),
    "bad link mode": post({**CHAT_BODY, "download_link_mode": "nope"}, AUTH),
    "declared too large": (
        f"POST {CHAT} HTTP/1.1\r\nHost: t\r\n{AUTH}Content-Length: 99999999\r\n\r\n"
    ).encode(),
    "chunked too large": CHUNKED_HEAD.encode() + chunked(b" " * 5_000_000, 65536),
    "stream": post(CHAT_BODY, AUTH),
    "stream, body in 7-byte chunks": CHUNKED,
    "stream with a session": post(CHAT_BODY, AUTH + "X-Session-Id: s-1\r\n"),
    "whole answer": post({**CHAT_BODY, "stream": False}, AUTH),
    "whole answer, public links": post(
        {**CHAT_BODY, "stream": False, "download_link_mode": "public"}, AUTH
    ),
    "two on one connection": post(CHAT_BODY, AUTH, close=False) + get("/health"),
    "a 401, then a stream on one connection": post(CHAT_BODY, close=False) + post(CHAT_BODY, AUTH),
}


async def exchange(url: str, data: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    async with stream:
        await stream.send_all(data)
        out = b""
        with trio.fail_after(10):  # every case ends with Connection: close
            while part := await stream.receive_some(65536):
                out += part
        return out


def normalized(raw: bytes, head_only: bool = False) -> list[tuple[bytes, bytes]]:
    """Each response's head (without ``date``) and body (de-chunked: how the events
    fall into HTTP chunks depends on timing, on either way)."""
    out: list[tuple[bytes, bytes]] = []
    while raw:
        head, sep, raw = raw.partition(b"\r\n\r\n")
        if not sep:
            return [*out, (head, b"<cut>")]
        lines = [line for line in head.split(b"\r\n") if not line.lower().startswith(b"date:")]
        fields = {
            k.strip().lower(): v.strip() for k, _, v in (ln.partition(b":") for ln in lines[1:])
        }
        body = b""
        if head_only:
            pass
        elif fields.get(b"transfer-encoding") == b"chunked":
            while True:
                size_line, _, raw = raw.partition(b"\r\n")
                size = int(size_line, 16)
                body, raw = body + raw[:size], raw[size + 2 :]
                if size == 0:
                    break
        else:
            n = int(fields.get(b"content-length", b"0"))
            body, raw = raw[:n], raw[n:]
        out.append((b"\r\n".join(lines), body))
    return out


async def two_gateways(nursery: trio.Nursery, tmp_path: Path) -> tuple[Any, Any]:
    def direct_off(app: Any) -> None:
        app.direct_routes = {}

    lean = await start_gateway(
        nursery,
        make_config(tmp_path / "lean", SCRIPTED_URL),
        transport=ScriptedTransport(script_for),
    )
    quart = await start_gateway(
        nursery,
        make_config(tmp_path / "quart", SCRIPTED_URL),
        transport=ScriptedTransport(script_for),
        customize=direct_off,
    )
    assert lean.app.direct_routes and not quart.app.direct_routes
    return lean, quart


async def test_direct_and_quart_answer_the_same_bytes(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    lean, quart = await two_gateways(nursery, tmp_path)
    for name, data in CASES.items():
        got = await exchange(lean.url, data)
        want = await exchange(quart.url, data)
        assert got.startswith(b"HTTP/1.1 "), name
        head_only = name.startswith("HEAD")
        assert normalized(got, head_only) == normalized(want, head_only), (name, got, want)
    # the direct routes did serve: their requests are in the metrics under the route
    text = lean.app.gateway.metrics.render().decode()
    assert 'gateway_requests_total{route="/v1/chat/completions",status="200"}' in text
    assert 'gateway_requests_total{route="/health",status="200"}' in text


async def test_every_split_of_a_request_gets_the_same_answer(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    lean, _ = await two_gateways(nursery, tmp_path)
    data = post(CHAT_BODY, AUTH)
    whole = normalized(await exchange(lean.url, data))
    assert b"hello there" in whole[0][1]
    host, port = lean.url.removeprefix("http://").split(":")
    for cut in range(len(data) - 60, len(data)):  # every split inside the body
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            await stream.send_all(data[:cut])
            await trio.sleep(0.002)
            await stream.send_all(data[cut:])
            out = b""
            while part := await stream.receive_some(65536):
                out += part
        assert normalized(out) == whole, cut


async def test_a_client_that_leaves_mid_stream_closes_the_upstream(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    gate = trio.Event()
    transport = ScriptedTransport(lambda req: Scripted([EVENTS, DONE], gate=gate))
    gw = await start_gateway(nursery, make_config(tmp_path, SCRIPTED_URL), transport=transport)
    host, port = gw.url.removeprefix("http://").split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    await stream.send_all(post(CHAT_BODY, AUTH))
    got = b""
    while b"hello there" not in got:
        got += await stream.receive_some(65536)
    await stream.aclose()
    await wait_until(lambda: bool(transport.closed) and gw.app.inflight_requests == 0)
    assert not gate.is_set()  # the upstream never got to its last chunk


async def test_a_stalled_body_gets_the_same_408_both_ways(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    answers = []
    for way in ("lean", "quart"):

        def customize(app: Any, way: str = way) -> None:
            app.config.update(BODY_TIMEOUT=0.3)
            if way == "quart":
                app.direct_routes = {}

        gw = await start_gateway(
            nursery,
            make_config(tmp_path / way, SCRIPTED_URL, server={"header_timeout_seconds": 30}),
            transport=ScriptedTransport(script_for),
            customize=customize,
        )
        host, port = gw.url.removeprefix("http://").split(":")
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            await stream.send_all(post(CHAT_BODY, AUTH)[:-5])  # the last bytes never come
            out = b""
            with trio.fail_after(5):
                while part := await stream.receive_some(65536):
                    out += part
        answers.append(normalized(out))
    assert answers[0] == answers[1]
    (head, body), *_ = answers[0]
    assert head.startswith(b"HTTP/1.1 408")
    assert json.loads(body)["error"] == {
        "message": "The request body did not arrive within 0.3 s.",
        "type": "request_timeout",
        "code": "request_timeout",
    }


def raise_key_error() -> BaseException:
    return KeyError("/Users/alice/secret")


def raise_grouped() -> BaseException:
    inner = RequestError("a grouped refusal", code="invalid_request", status=400)
    return ExceptionGroup("from a nursery", [inner])


@pytest.mark.parametrize(
    ("make", "status", "code"),
    [(raise_key_error, 500, "internal_error"), (raise_grouped, 400, "invalid_request")],
)
async def test_a_handler_exception_is_answered_alike_both_ways(
    nursery: trio.Nursery,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    make: Any,
    status: int,
    code: str,
) -> None:
    import gateway.api.routes.chat as chat

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise make()

    monkeypatch.setattr(chat, "upstream_chat_body", broken)
    lean, quart = await two_gateways(nursery, tmp_path)
    answers = [normalized(await exchange(gw.url, post(CHAT_BODY, AUTH))) for gw in (lean, quart)]
    assert answers[0] == answers[1]
    (head, body), *_ = answers[0]
    assert head.startswith(b"HTTP/1.1 %d" % status)
    assert json.loads(body)["error"]["code"] == code
    assert b"alice" not in body and b"Traceback" not in body
    async with lean.client() as c:
        assert (await c.get("/health")).status_code == 200
