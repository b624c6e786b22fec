"""An upstream that says unusual things: the gateway trusts no string and no header of it.

Real hypercorn for the gateway on 127.0.0.1; the upstream is a
:class:`harness.transport.ScriptedTransport` (exact bytes, status and headers), or a
real socket that accepts and never answers. Each test is one class of hostile answer:

* cookies: one principal's upstream cookie never reaches another's request;
* silence: an upstream that accepts and never answers gives a 504 (chat) and a failed
  run (``upstream_timeout``), never a stream or a run waiting forever;
* a 200 that is not an event stream (HTML, a JSON completion, a redirect) is a clear
  502, not an empty success;
* ``Retry-After`` goes out only as validated seconds;
* an upstream 401/403 (the gateway's upstream key refused) is a 502, not the client's 401;
* ``/v1/models``: model ids named by their host path are shown by name, on the
  gateway and through the proxy, and mapped back on the way in;
* an upstream's error message is scrubbed with the configured roots;
* a chunk key ``event`` (Open WebUI runs ``execute`` events as JavaScript) and every
  other unknown key never reach a client; the operator's ``extra_chunk_keys`` do,
  scrubbed; ``logprobs`` are dropped unless enabled, and then describe the rewritten
  text, never upstream's tokens;
* metric labels stay bounded whatever codes an upstream invents.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import trio

from gateway.core.sse import DONE, encode_json
from harness.transport import Scripted, ScriptedTransport
from tests.conftest import (
    ALICE_KEY,
    BOB_KEY,
    OWUI_KEY,
    make_config,
    proxy_config,
    start_gateway,
    start_proxy,
)

CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "hi"}]
SCRIPTED_URL = "http://127.0.0.1:9/v1"


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    obj = {
        "id": "chatcmpl-h",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }
    return encode_json(obj)


def sse(*events: bytes) -> Scripted:
    return Scripted([b"".join(events)])


async def stream(client: httpx.AsyncClient, body: dict[str, Any] | None = None) -> httpx.Response:
    payload = {"model": "m", "messages": MESSAGES, "stream": True, **(body or {})}
    return await client.post(CHAT, json=payload)


def chunks_of(resp: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in resp.text.splitlines() if line.startswith("data: {")]


async def test_no_cookie_is_shared_between_principals(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    answer = sse(chunk({"content": "ok"}, "stop"), DONE)
    answer.headers = {
        "content-type": "text/event-stream",
        "set-cookie": "upstream_session=alice-secret; Path=/",
    }
    transport = ScriptedTransport(lambda req: answer)
    gw = await start_gateway(nursery, make_config(tmp_path, SCRIPTED_URL), transport=transport)
    async with gw.client(ALICE_KEY) as alice, gw.client(BOB_KEY) as bob:
        assert (await stream(alice)).status_code == 200
        assert (await stream(bob)).status_code == 200
        assert (await alice.get("/v1/models")).status_code in (200, 502)
    assert transport.requests
    for req in transport.requests:
        assert "cookie" not in req.headers, req.headers


async def _silent_upstream(nursery: trio.Nursery) -> tuple[str, list[int]]:
    """A TCP server that accepts and reads, and never answers."""
    accepted: list[int] = []

    async def handler(stream: trio.SocketStream) -> None:
        accepted.append(1)
        with trio.CancelScope():
            while await stream.receive_some(65536):
                pass

    listeners = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
    port = listeners[0].socket.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1", accepted


async def test_an_upstream_that_never_answers(nursery: trio.Nursery, tmp_path: Path) -> None:
    url, accepted = await _silent_upstream(nursery)
    cfg = make_config(tmp_path, url, upstream={"first_byte_timeout_seconds": 0.5})
    gw = await start_gateway(nursery, cfg)
    async with gw.client() as c:
        with trio.fail_after(10):
            resp = await stream(c)
        assert resp.status_code == 504, resp.text
        err = resp.json()["error"]
        assert err["code"] == "upstream_timeout" and "first_byte_timeout_seconds" in err["message"]
        run = (await c.post("/v1/runs", json={"model": "m", "input": "hi"})).json()
        with trio.fail_after(10):
            while True:
                summary = (await c.get(f"/v1/runs/{run['run_id']}")).json()
                if summary["status"] not in ("queued", "running"):
                    break
                await trio.sleep(0.1)
    assert summary["status"] == "failed" and summary["error"]["code"] == "upstream_timeout"
    assert len(accepted) >= 2


async def test_a_200_that_is_not_an_event_stream(nursery: trio.Nursery, tmp_path: Path) -> None:
    answers = [
        Scripted(
            [b"<html><body>/Users/alice/secret</body></html>"],
            headers={"content-type": "text/html"},
        ),
        Scripted(
            [json.dumps({"object": "chat.completion", "choices": []}).encode()],
            headers={"content-type": "application/json"},
        ),
        Scripted([b""], status=302, headers={"location": "http://elsewhere/"}),
    ]
    transport = ScriptedTransport(lambda req: answers.pop(0))
    gw = await start_gateway(nursery, make_config(tmp_path, SCRIPTED_URL), transport=transport)
    async with gw.client() as c:
        for what, code in (
            ("text/html", "upstream_wrong_path"),  # a web page: base_url is not the API
            ("application/json", "upstream_bad_response"),
            ("redirect", "upstream_bad_response"),
        ):
            resp = await stream(c)
            assert resp.status_code == 502, (what, resp.text)
            err = resp.json()["error"]
            assert err["code"] == code, what
            assert "upstream.base_url" in err["message"]
            assert "/Users/" not in resp.text and "elsewhere" not in resp.text


async def test_retry_after_only_as_validated_seconds(nursery: trio.Nursery, tmp_path: Path) -> None:
    values = ["120", "abc\r\nX-Evil: 1", "99999999", "Wed, 21 Oct 2015 07:28:00 GMT", "-5", ""]
    expected = ["120", None, "86400", "0", None, None]
    body = json.dumps({"error": {"message": "slow down", "code": "rate_limit"}}).encode()

    def answer(req: httpx.Request) -> Scripted:
        value = values[len(transport.requests) - 1]
        headers = {"content-type": "application/json"}
        if value:
            headers["retry-after"] = value
        return Scripted([body], status=429, headers=headers)

    transport = ScriptedTransport(answer)
    gw = await start_gateway(nursery, make_config(tmp_path, SCRIPTED_URL), transport=transport)
    async with gw.client() as c:
        for want in expected:
            resp = await stream(c)
            assert resp.status_code == 429
            assert resp.json()["error"]["code"] == "upstream_rate_limited"
            assert resp.headers.get("retry-after") == want
            assert "x-evil" not in resp.headers


async def test_a_refused_upstream_key_is_not_the_clients_401(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """An upstream 401/403 means the gateway's ``upstream.api_key`` is wrong: a client
    told 401 would think its own key was refused."""
    body = json.dumps({"error": {"message": "Incorrect API key", "code": "invalid_api_key"}})

    def answer(req: httpx.Request) -> Scripted:
        status = 401 if len(transport.requests) % 2 else 403
        return Scripted(
            [body.encode()], status=status, headers={"content-type": "application/json"}
        )

    transport = ScriptedTransport(answer)
    gw = await start_gateway(nursery, make_config(tmp_path, SCRIPTED_URL), transport=transport)
    async with gw.client() as c:
        for _ in range(2):
            resp = await stream(c)
            assert resp.status_code == 502, resp.text
            err = resp.json()["error"]
            assert err["code"] == "upstream_auth_failed" and "upstream.api_key" in err["message"]
        sync = await c.post(CHAT, json={"model": "m", "messages": MESSAGES})
        assert sync.status_code == 502 and sync.json()["error"]["code"] == "upstream_auth_failed"
        # not ready: every request would fail, and the check says why
        ready = await c.get("/health/ready")
        assert ready.status_code == 503, ready.text
        assert ready.json()["checks"]["upstream"] == "upstream_auth_failed"
        assert "upstream.api_key" in ready.json()["checks"]["upstream_detail"]


async def test_a_base_url_without_the_api_says_so(nursery: trio.Nursery, tmp_path: Path) -> None:
    """A web server that is not the model server's API (``base_url`` without ``/v1``, a
    static file server): its HTML 404/405/501 is ``upstream_wrong_path`` naming
    ``base_url``, not an ``upstream_http_404`` a client reads as "no such model"; a JSON
    404 with a message (vLLM's unknown model) is still passed on."""
    html = b"<html><body><h1>Error response</h1><p>Error code: 501</p></body></html>"
    vllm = json.dumps({"error": {"message": "The model `m` does not exist.", "code": 404}})

    def answer(req: httpx.Request) -> Scripted:
        if b"vllm" in req.content:
            return Scripted(
                [vllm.encode()], status=404, headers={"content-type": "application/json"}
            )
        status = (501, 404, 405)[len(transport.requests) % 3]
        return Scripted([html], status=status, headers={"content-type": "text/html"})

    transport = ScriptedTransport(answer)
    gw = await start_gateway(nursery, make_config(tmp_path, SCRIPTED_URL), transport=transport)
    async with gw.client() as c:
        for _ in range(3):
            resp = await stream(c)
            assert resp.status_code == 502, resp.text
            err = resp.json()["error"]
            assert err["code"] == "upstream_wrong_path" and "base_url" in err["message"]
            assert "/v1" in err["message"]
        listing = await c.get("/v1/models")
        assert listing.status_code == 502 and "base_url" in listing.json()["error"]["message"]
        assert listing.json()["error"]["code"] == "upstream_wrong_path"
        known = await c.post(CHAT, json={"model": "vllm", "messages": MESSAGES})
        assert known.status_code == 404 and "does not exist" in known.json()["error"]["message"]


async def test_models_named_by_their_path(nursery: trio.Nursery, tmp_path: Path) -> None:
    listing = {
        "object": "list",
        "data": [
            {
                "id": "/Users/alice/models/llama-3-8b",
                "object": "model",
                "root": "/Users/alice/models/llama-3-8b",
                "owned_by": "vllm",
                "max_model_len": 8192,
                "permission": [{"secret": "/Users/alice/x"}],
            },
            # glued after a word: an id is no prose, the path is still a path
            {"id": "local/Users/alice/models/qwen.gguf", "parent": "m\\Users\\alice\\q"},
        ],
    }

    def answer(req: httpx.Request) -> Scripted:
        if req.url.path.endswith("/models"):
            return Scripted(
                [json.dumps(listing).encode()], headers={"content-type": "application/json"}
            )
        return sse(chunk({"content": "ok"}, "stop"), DONE)

    transport = ScriptedTransport(answer)
    gw = await start_gateway(nursery, make_config(tmp_path, SCRIPTED_URL), transport=transport)
    px = await start_proxy(nursery, proxy_config(tmp_path, SCRIPTED_URL, gw.url))
    async with gw.client() as c, px.client(OWUI_KEY) as p:
        mine = (await c.get("/v1/models")).json()
        via_proxy = (await p.get("/v1/models")).json()
        for shown in (mine, via_proxy):
            assert "/Users" not in json.dumps(shown) and "alice" not in json.dumps(shown)
            assert shown["data"][0]["id"] == "llama-3-8b"
            assert shown["data"][1]["id"] == "local/qwen.gguf"
        assert "permission" not in mine["data"][0] and mine["data"][0]["max_model_len"] == 8192
        resp = await stream(c, {"model": "llama-3-8b"})
        assert resp.status_code == 200
        sent = json.loads(transport.requests[-1].content)
        assert sent["model"] == "/Users/alice/models/llama-3-8b"  # mapped back on the way in
        assert mine["data"][1]["parent"] == "m/q"
        resp = await stream(c, {"model": "local/qwen.gguf"})
        assert resp.status_code == 200
    sent = json.loads(transport.requests[-1].content)
    assert sent["model"] == "local/Users/alice/models/qwen.gguf"


async def test_upstream_error_message_scrubbed_with_the_roots(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    root = tmp_path / "artifacts"
    secret = f"{root}/client-acme/contract.pdf"
    body = json.dumps({"error": {"message": f"cannot read {secret}", "code": "bad_file"}})
    transport = ScriptedTransport(
        lambda req: Scripted(
            [body.encode()], status=400, headers={"content-type": "application/json"}
        )
    )
    gw = await start_gateway(nursery, make_config(tmp_path, SCRIPTED_URL), transport=transport)
    async with gw.client() as c:
        resp = await stream(c)
    assert resp.status_code == 400 and resp.json()["error"]["code"] == "bad_file"
    assert "client-acme" not in resp.text and str(root) not in resp.text
    assert "contract.pdf" in resp.text


async def test_event_keys_and_unknown_keys_never_reach_a_client(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    execute = {"type": "execute", "data": {"code": "alert(document.cookie)"}}
    events = [
        chunk({"role": "assistant", "content": "Hello"}, event=execute, sources=[1], done=True),
        chunk({"content": " world", "images": [{"url": "x"}]}, selected_model_id="evil"),
        encode_json(
            {"event": execute, "message": "progress", "choices": [1]}, event="hermes.tool.progress"
        ),
        encode_json({"note": "x"}, event="bad name\u2028"),
        chunk({}, "stop", x_trace="/Users/alice/trace.log", usage={"total_tokens": 3, "evil": "x"}),
        DONE,
    ]
    transport = ScriptedTransport(lambda req: sse(*events))
    cfg = make_config(tmp_path, SCRIPTED_URL, output={"extra_chunk_keys": ["x_trace"]})
    gw = await start_gateway(nursery, cfg, transport=transport)
    px = await start_proxy(nursery, proxy_config(tmp_path, SCRIPTED_URL, gw.url))
    async with gw.client() as c, px.client(OWUI_KEY) as p:
        direct = await stream(c)
        proxied = await p.post(
            CHAT,
            json={
                "model": "m",
                "messages": MESSAGES,
                "stream": True,
                "download_link_mode": "public",
            },
            headers={"X-OpenWebUI-User-Id": "u-1"},
        )
    for resp in (direct, proxied):
        assert resp.status_code == 200
        text = resp.text
        assert "execute" not in text and "alert(" not in text, text
        for key in ('"sources"', '"done"', '"selected_model_id"', '"images"', '"evil"'):
            assert key not in text, (key, text)
        assert "bad name" not in text and "/Users" not in text
        content = "".join(
            ch["choices"][0]["delta"].get("content", "") for ch in chunks_of(resp) if ch["choices"]
        )
        assert content == "Hello world"
    # the operator's pass-through key reaches direct clients, scrubbed; named events too
    assert '"x_trace":"trace.log"' in direct.text
    assert "event: hermes.tool.progress" in direct.text and '"message":"progress"' in direct.text
    assert "x_trace" not in proxied.text and "hermes.tool.progress" not in proxied.text


async def test_logprobs(nursery: trio.Nursery, tmp_path: Path) -> None:
    """Dropped by default; when enabled, one entry per delta for the rewritten text (a
    path split across upstream tokens never appears in them)."""
    lp = [{"token": "/Users/", "logprob": -0.5, "bytes": list(b"/Users/"), "top_logprobs": []}]
    lp2 = [
        {
            "token": "alice/x.txt",
            "logprob": -0.25,
            "bytes": [1],
            "top_logprobs": [{"token": "/Users/bob"}],
        }
    ]
    events = [
        encode_json(
            {
                "choices": [
                    {"index": 0, "delta": {"content": "See /Users/"}, "logprobs": {"content": lp}}
                ]
            }
        ),
        encode_json(
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {"content": "alice/x.txt now"},
                        "logprobs": {"content": lp2},
                    }
                ]
            }
        ),
        chunk({}, "stop"),
        DONE,
    ]
    for enabled in (False, True):
        transport = ScriptedTransport(lambda req: sse(*events))
        cfg = make_config(tmp_path / str(enabled), SCRIPTED_URL, output={"logprobs": enabled})
        gw = await start_gateway(nursery, cfg, transport=transport)
        async with gw.client() as c:
            resp = await stream(c)
        assert "/Users" not in resp.text and "alice" not in resp.text and "bob" not in resp.text
        entries = [
            e
            for ch in chunks_of(resp)
            for choice in ch["choices"]
            for e in (choice.get("logprobs") or {}).get("content", [])
        ]
        content = "".join(
            ch["choices"][0]["delta"].get("content", "") for ch in chunks_of(resp) if ch["choices"]
        )
        if not enabled:
            assert entries == [] and '"logprobs"' not in resp.text
            continue
        assert "".join(e["token"] for e in entries) == content == "See x.txt now"
        assert sum(e["logprob"] for e in entries) == -0.75
        assert all(
            e["top_logprobs"] == [] and bytes(e["bytes"]) == e["token"].encode() for e in entries
        )


async def test_metric_labels_stay_bounded(nursery: trio.Nursery, tmp_path: Path) -> None:
    codes = [f"made_up_code_{i}" for i in range(30)]

    def answer(req: httpx.Request) -> Scripted:
        code = codes[len(transport.requests) - 1]
        body = json.dumps({"error": {"message": "no", "code": code}}).encode()
        return Scripted([body], status=400, headers={"content-type": "application/json"})

    transport = ScriptedTransport(answer)
    gw = await start_gateway(nursery, make_config(tmp_path, SCRIPTED_URL), transport=transport)
    async with gw.client() as c:
        for code in codes:
            resp = await stream(c)
            assert resp.json()["error"]["code"] == code  # the client sees the upstream's code
        metrics = (await c.get("/metrics")).text
    assert "made_up_code" not in metrics
    assert 'gateway_upstream_errors_total{code="upstream_http_4xx"} 30.0' in metrics


async def test_a_plain_answer_that_is_only_an_error(nursery: trio.Nursery, tmp_path: Path) -> None:
    """A 200 whose body is only ``{"error": ...}`` is a failure (502), not an empty
    success; an answer nested too deeply says so (the sixth red-team pass)."""
    json_headers = {"content-type": "application/json"}
    answers = [
        Scripted(
            [
                json.dumps(
                    {"error": {"message": "failed /Users/zqsecret/x", "code": "oops"}}
                ).encode()
            ],
            headers=json_headers,
        ),
        Scripted([json.dumps({"error": "no capacity"}).encode()], headers=json_headers),
        *[
            Scripted([json.dumps(body).encode()], headers=json_headers)
            for body in (
                {"error": {"message": "m"}, "choices": None},
                {"error": {"message": "m"}, "choices": []},
                {"error": {}},
                {"error": False},
                {"object": "error", "message": "bad /Users/zqsecret/x", "code": 400},  # vLLM
            )
        ],
        Scripted([b'{"a":' * 5000 + b"1" + b"}" * 5000], headers=json_headers),
    ]
    transport = ScriptedTransport(lambda req: answers.pop(0))
    gw = await start_gateway(nursery, make_config(tmp_path, SCRIPTED_URL), transport=transport)
    async with gw.client() as c:
        for want in ("upstream_error",) * 7 + ("upstream_bad_response",):
            resp = await c.post(CHAT, json={"model": "m", "messages": MESSAGES, "stream": False})
            assert resp.status_code == 502, resp.text
            err = resp.json()["error"]
            assert err["code"] == want, resp.text
            assert "zqsecret" not in resp.text
        assert "nested too deeply" in err["message"]


async def test_no_logprobs_are_invented(nursery: trio.Nursery, tmp_path: Path) -> None:
    """With logprobs enabled, an upstream that sends none gets none relayed, also for
    text the rewriter held back (a path, a lone letter; the sixth red-team pass)."""
    with_lp = {"content": [{"token": "see ", "logprob": -0.5, "bytes": [], "top_logprobs": []}]}
    events = [
        chunk({"content": "see /Users/zqsecret/out/report.pdf"}),
        chunk({"content": " and a"}),
        # logprobs for one delta, none for the path after it: the held path gets none
        encode_json({"choices": [{"index": 0, "delta": {"content": "see "}, "logprobs": with_lp}]}),
        chunk({"content": "/tmp/zqz/report.txt"}),
        chunk({}, "stop"),
        DONE,
    ]
    transport = ScriptedTransport(lambda req: sse(*events))
    cfg = make_config(tmp_path, SCRIPTED_URL, output={"logprobs": True})
    gw = await start_gateway(nursery, cfg, transport=transport)
    async with gw.client() as c:
        resp = await stream(c)
    assert resp.status_code == 200 and "zqsecret" not in resp.text
    tokens = [
        e["token"]
        for ch in chunks_of(resp)
        for choice in ch["choices"]
        for e in (choice.get("logprobs") or {}).get("content", [])
    ]
    assert tokens == ["asee "], resp.text  # the held "a" goes out with the next delta
    assert "report.pdf" in resp.text
