"""Issue 6, "Must show": the Open WebUI runs proxy end to end.

Every test runs the whole chain on real hypercorn servers on 127.0.0.1 with ephemeral
ports, inside the test's nursery: demo upstream -> gateway (``gateway.api.app``) -> runs
proxy (``gateway.proxy``). Requests are shaped exactly like Open WebUI 0.12.4's (see
STACK-NOTES.md "What real clients accept"): body keys ``model, messages, stream`` plus
a top-level ``download_link_mode`` when set; headers ``Authorization: Bearer <client
key>``, ``X-OpenWebUI-User-Name/-Id/-Email/-Role``, ``X-OpenWebUI-Auth-Type``,
``X-OpenWebUI-Chat-Id``, or ``X-OpenWebUI-User-Jwt`` (HS256, built by hand here) in
place of the four user headers. Streams are read the way Open WebUI reads them (LF
lines, each alone) and with the ``openai`` SDK.
"""

from __future__ import annotations

import base64
import gc
import hashlib
import hmac
import json
import logging
import re
import socket
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
import openai
import pytest
import trio

from gateway.cli.demo_upstream import MODELS, WINDOWS_PATH, DemoFiles
from gateway.core.sse import DONE, SSEDecoder, encode_json
from gateway.fronts.openwebui import NOTE_PATTERN, NOTE_START
from harness.nothing import NOTHING_FOUND
from harness.transport import Scripted, ScriptedTransport
from tests.conftest import (
    ALICE_KEY,
    OWUI_KEY,
    PROXY_KEY,
    Gateway,
    Proxy,
    Upstream,
    make_config,
    proxy_config,
    start_demo_upstream,
    start_gateway,
    start_proxy,
)
from tests.helpers import SDK_WARNINGS, RunView, journaled_runs

CHAT = "/v1/chat/completions"
JWT_SECRET = "owui-shared-jwt-secret-0123456789"
#: Open WebUI user ids are GUIDs
USER_A = "3f2b9c1e-8d7a-4e5f-9b1c-2a3d4e5f6a7b"
USER_B = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"
MESSAGES = [{"role": "user", "content": "Make me a report."}]
#: the origin every minted link uses (make_config's server.public_base_url)
LINK_ORIGIN = "http://127.0.0.1:8642"
LINK_RE = re.compile(
    re.escape(LINK_ORIGIN) + r"/v1/artifacts/(?P<id>[\w-]+)(?P<query>\?exp=\d+&sig=[\w.-]+)?"
)
# A host path anywhere in what a client receives: the usual roots, drive/UNC paths, file:
HOST_PATH_RE = re.compile(
    r"(/Users/|/home/|/root/|/tmp/|/private/|/var/|/Volumes/|/mnt/|/opt/|/srv/|/etc/"
    r"|/workspace/|[A-Za-z]:\\|[A-Za-z]:/(?!/)|\\\\[\w.-]+\\|file://)"
)


# --------------------------------------------------------------------------- the chain


@dataclass
class Chain:
    upstream: Upstream
    gateway: Gateway
    proxy: Proxy

    @property
    def files(self) -> DemoFiles:
        return self.upstream.app.demo_files

    def runs(self) -> list[RunView]:
        """Every run the gateway journaled, oldest first (read from its store)."""
        return journaled_runs(self.gateway.app.gateway.store)

    def owner_of(self, artifact_id: str) -> str:
        rec = self.gateway.app.gateway.store.get_artifact(artifact_id)
        assert rec is not None, artifact_id
        owner: str = rec.owner
        return owner


@pytest.fixture
async def chain(upstream: Upstream, gateway: Gateway, proxy: Proxy) -> Chain:
    """The conftest fixtures: default_link_mode private, no JWT secret, user headers trusted."""
    return Chain(upstream, gateway, proxy)


async def start_chain(
    nursery: trio.Nursery,
    tmp_path: Path,
    *,
    chunk_delay: float = 0.0,
    proxy: dict[str, Any] | None = None,
    settings: Any = None,
    **overrides: Any,
) -> Chain:
    """A chain with its own settings; ``overrides`` go to both configs (one TOML file in
    production), ``proxy`` to the proxy's ``[proxy]`` section only."""
    up = await start_demo_upstream(nursery, tmp_path, chunk_delay=chunk_delay)
    gw = await start_gateway(
        nursery, make_config(tmp_path, up.url + "/v1", **overrides), settings=settings
    )
    px = await start_proxy(
        nursery, proxy_config(tmp_path, up.url + "/v1", gw.url, proxy=proxy, **overrides)
    )
    return Chain(up, gw, px)


# --------------------------------------------------------------------------- Open WebUI


def owui_headers(
    user_id: str | None = USER_A,
    *,
    name: str = "Ada Lovelace",
    email: str = "ada@example.org",
    role: str = "user",
    key: str = OWUI_KEY,
    chat_id: str | None = "c0ffee00-1111-4222-8333-444455556666",
) -> dict[str, str]:
    """Headers Open WebUI sends with ENABLE_FORWARD_USER_INFO_HEADERS (no JWT secret)."""
    h = {"Authorization": f"Bearer {key}", "X-OpenWebUI-Auth-Type": "jwt"}
    if user_id is not None:
        h |= {
            "X-OpenWebUI-User-Name": urllib.parse.quote(name, safe=" "),
            "X-OpenWebUI-User-Id": user_id,
            "X-OpenWebUI-User-Email": email,
            "X-OpenWebUI-User-Role": role,
        }
    if chat_id is not None:
        h["X-OpenWebUI-Chat-Id"] = chat_id
    return h


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def make_jwt(claims: dict[str, Any], secret: str = JWT_SECRET, *, alg: str = "HS256") -> str:
    header = _b64url(json.dumps({"alg": alg, "typ": "JWT"}, separators=(",", ":")).encode())
    payload = _b64url(json.dumps(claims, separators=(",", ":")).encode())
    signing_input = f"{header}.{payload}"
    if alg == "none":
        return signing_input + "."
    mac = hmac.new(secret.encode(), signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64url(mac)}"


def owui_claims(user_id: str = USER_A, **changes: Any) -> dict[str, Any]:
    """The claims Open WebUI puts in X-OpenWebUI-User-Jwt (exp = iat + 300)."""
    iat = int(time.time())
    claims = {
        "sub": user_id,
        "email": "ada@example.org",
        "name": "Ada Lovelace",
        "role": "user",
        "iss": "open-webui",
        "iat": iat,
        "exp": iat + 300,
    }
    claims.update(changes)
    return claims


def owui_jwt_headers(token: str, *, key: str = OWUI_KEY) -> dict[str, str]:
    """Headers Open WebUI sends when a JWT secret is set: the JWT replaces the user headers."""
    return {
        "Authorization": f"Bearer {key}",
        "X-OpenWebUI-User-Jwt": token,
        "X-OpenWebUI-Auth-Type": "jwt",
        "X-OpenWebUI-Chat-Id": "c0ffee00-1111-4222-8333-444455556666",
    }


def owui_body(
    model: str = "demo", *, stream: bool = True, mode: str | None = None
) -> dict[str, Any]:
    """Exactly the keys Open WebUI sends: model, messages, stream (+ top-level mode)."""
    body: dict[str, Any] = {"model": model, "messages": MESSAGES, "stream": stream}
    if mode is not None:
        body["download_link_mode"] = mode
    return body


def hermes_body(mode: str, *, stream: bool = True, model: str = "demo") -> dict[str, Any]:
    """A direct API client (or a pipe): the mode under metadata.hermes."""
    return {
        "model": model,
        "messages": MESSAGES,
        "stream": stream,
        "metadata": {"hermes": {"download_link_mode": mode}},
    }


@dataclass
class OwuiStream:
    """Open WebUI 0.12.4's reading of a chat stream.

    Split on LF only, each line alone (blank lines are not event boundaries), only
    ``data:`` lines matter and each is JSON-parsed by itself, ``[DONE]`` is ignored,
    the stream ends at EOF. Stricter than Open WebUI in one way: a ``data:`` line
    that does not parse fails the test (Open WebUI would drop it silently)."""

    status: int = 0
    headers: httpx.Headers = field(default_factory=httpx.Headers)
    raw: bytearray = field(default_factory=bytearray)
    chunks: list[dict[str, Any]] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    done_lines: int = 0
    _buf: bytes = b""

    def feed(self, data: bytes) -> None:
        self.raw += data
        *lines, self._buf = (self._buf + data).split(b"\n")
        for line in lines:
            self._line(line.decode("utf-8"))

    def close(self) -> None:
        if self._buf:
            self._line(self._buf.decode("utf-8"))
            self._buf = b""

    def _line(self, line: str) -> None:
        if not line.strip():
            return
        if line.startswith(":"):
            self.comments.append(line)
            return
        assert line.startswith("data:"), line  # the proxy sends no other field
        payload = line[len("data:") :].strip()
        if payload == "[DONE]":
            self.done_lines += 1
            return
        obj = json.loads(payload)  # every data line must parse on its own
        assert isinstance(obj, dict), payload
        self.chunks.append(obj)

    @property
    def text(self) -> str:
        return self.raw.decode("utf-8")

    @property
    def content(self) -> str:
        return "".join(
            (c.get("delta") or {}).get("content") or ""
            for chunk in self.chunks
            for c in chunk.get("choices") or []
        )

    @property
    def final(self) -> dict[str, Any]:
        return self.chunks[-1]

    @property
    def manifest(self) -> dict[str, Any]:
        manifest: dict[str, Any] = self.final["gateway"]
        return manifest

    @property
    def errors(self) -> list[Any]:
        return [c["error"] for c in self.chunks if c.get("error")]


async def owui_stream(
    client: httpx.AsyncClient,
    body: dict[str, Any],
    headers: dict[str, str],
    *,
    stop_when: Callable[[OwuiStream], bool] | None = None,
) -> OwuiStream:
    got = OwuiStream()
    with trio.CancelScope() as scope:
        async with client.stream("POST", CHAT, json=body, headers=headers) as resp:
            got.status = resp.status_code
            got.headers = resp.headers
            async for piece in resp.aiter_raw():
                got.feed(piece)
                if stop_when is not None and stop_when(got):
                    # the user pressed stop: the next read is cancelled inside httpx
                    # (which finishes its generators) and the connection is closed
                    scope.cancel()
    if not scope.cancelled_caught:
        got.close()
    return got


def assert_owui_wire(got: OwuiStream) -> None:
    """What Open WebUI (and every SSE client) needs from the proxy's stream."""
    assert got.status == 200, got.text
    assert got.headers["content-type"].startswith("text/event-stream")
    assert got.headers["cache-control"] == "no-cache"
    assert got.headers["x-accel-buffering"] == "no"
    assert "\r" not in got.text
    assert got.text.endswith(DONE.decode()), got.text[-200:]
    assert got.done_lines == 1
    assert got.chunks, "no chunks"
    assert all(c["object"] == "chat.completion.chunk" for c in got.chunks)
    assert len({c["id"] for c in got.chunks}) == 1
    finishes = [
        ch["finish_reason"]
        for c in got.chunks
        for ch in c["choices"]
        if ch.get("finish_reason") is not None
    ]
    assert finishes == [got.final["choices"][0]["finish_reason"]]
    # a WHATWG decoder sees the same events (one-line data, blank-line framed)
    events = SSEDecoder().feed(bytes(got.raw))
    assert [json.loads(e.data) for e in events if e.data != "[DONE]"] == got.chunks


def assert_no_host_paths(text: str, files: DemoFiles) -> None:
    for part in {str(p.parent) for p in (*files.in_root, files.outside_txt)}:
        assert part not in text, part
    assert files.root.parent.name not in text  # the per-test tmp folder
    assert WINDOWS_PATH.rsplit("\\", 1)[0] not in text
    assert HOST_PATH_RE.search(text) is None, HOST_PATH_RE.search(text)


def links_in(text: str) -> list[re.Match[str]]:
    return list(LINK_RE.finditer(text))


def assert_links(
    chain: Chain, content: str, manifest: dict[str, Any], *, mode: str, owner: str
) -> list[dict[str, Any]]:
    """Every root file became a link of ``mode`` owned by ``owner``; the deltas, the
    manifest and the gateway's store agree; nothing else of the folders leaked."""
    files = chain.files
    assert_no_host_paths(content, files)
    assert manifest["download_link_mode"] == mode
    artifacts: list[dict[str, Any]] = manifest["artifacts"]
    assert sorted(a["filename"] for a in artifacts) == sorted(p.name for p in files.in_root)
    found = links_in(content)
    assert {m["id"] for m in found} == {a["id"] for a in artifacts}
    for m in found:
        if mode == "public":
            assert m["query"], m[0]  # ?exp=&sig=
        else:
            assert m["query"] is None, m[0]
    for a in artifacts:
        assert a["link_mode"] == mode
        assert a["url"] in content
        assert chain.owner_of(a["id"]) == owner
    assert "[report.pdf](" + LINK_ORIGIN + "/v1/artifacts/" in content
    assert files.outside_txt.name in content  # outside the root: the name alone
    assert " plot.png for the slides" in content  # the Windows path: the name alone
    return artifacts


def assert_private_note(content: str, *, expected: bool) -> None:
    """The private-mode note: once, at the end, true (signed in to Open WebUI) and with
    a share link (``/v1/artifacts/<id>/share``) for every linked file."""
    if expected:
        assert content.count(NOTE_START) == 1
        note = NOTE_PATTERN.search(content)
        assert note is not None and note.end() == len(content), content[-300:]
        assert "signed in to Open WebUI" in note.group(0) and "public link" in note.group(0)
        linked = {m["id"] for m in links_in(content[: note.start()])}
        shared = set(re.findall(r"/v1/artifacts/([\w-]+)/share\)", note.group(0)))
        assert linked and shared == linked
    else:
        assert NOTE_START.strip() not in content
        assert "open only for you" not in content


def local_url(gw: Gateway, link: str) -> str:
    """Minted links use public_base_url; fetch them from the test's gateway instead."""
    assert link.startswith(LINK_ORIGIN)
    return gw.url + link[len(LINK_ORIGIN) :]


async def fetch_as(gw: Gateway, link: str, owner: str | None) -> httpx.Response:
    """GET a link with the proxy key asserting ``owner`` (or with no credentials)."""
    headers = {}
    if owner is not None:
        headers = {"Authorization": f"Bearer {PROXY_KEY}", "X-Gateway-Owner": owner}
    async with httpx.AsyncClient(timeout=10) as c:
        return await c.get(local_url(gw, link), headers=headers)


async def wait_until(condition: Callable[[], bool], limit: float = 5.0) -> None:
    with trio.fail_after(limit):
        while not condition():  # noqa: ASYNC110
            await trio.sleep(0.005)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def error_of(resp: httpx.Response) -> dict[str, Any]:
    err: dict[str, Any] = resp.json()["error"]
    assert set(err) == {"message", "type", "code"}
    assert "Traceback" not in resp.text
    return err


# --------------------------------------------------------------------------- streaming


async def test_openwebui_headers_private_by_default(chain: Chain) -> None:
    """The plain Open WebUI case: forwarded user headers, no mode, default private."""
    owner = "openwebui:" + USER_A
    async with chain.proxy.client(key=None) as c:
        got = await owui_stream(c, owui_body(), owui_headers(USER_A))
    assert_owui_wire(got)
    assert not got.errors
    assert got.final["choices"][0]["finish_reason"] == "stop"
    assert got.chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert got.final["usage"]["total_tokens"] > 0
    artifacts = assert_links(chain, got.content, got.manifest, mode="private", owner=owner)
    assert_private_note(got.content, expected=True)
    assert_no_host_paths(got.text, chain.files)  # not in any chunk, comment or manifest

    # the run the proxy started on the gateway: owned by the Open WebUI user, private
    (run,) = chain.runs()
    assert (run.owner, run.link_mode, run.status) == (owner, "private", "completed")
    # the upstream never saw the Open WebUI identity or any key of ours in clear
    (log,) = [e for e in chain.upstream.app.demo_log if e["path"] == "/v1/chat/completions"]
    assert USER_A not in json.dumps(log["body"]) and log["principal"]
    assert OWUI_KEY not in json.dumps(log) and PROXY_KEY not in json.dumps(log)

    # isolation: A downloads byte-identical files, B (same proxy key) gets 404
    by_name = {p.name: p for p in chain.files.in_root}
    for a in artifacts:
        ok = await fetch_as(chain.gateway, a["url"], owner)
        assert ok.status_code == 200, ok.text
        assert ok.content == by_name[a["filename"]].read_bytes()
        assert ok.headers["content-disposition"].startswith("attachment")
        other = await fetch_as(chain.gateway, a["url"], "openwebui:" + USER_B)
        assert other.status_code == 404
        assert (await fetch_as(chain.gateway, a["url"], None)).status_code == 401
    async with chain.gateway.client(ALICE_KEY) as alice:
        assert (await alice.get(local_url(chain.gateway, artifacts[0]["url"]))).status_code == 404
    # the listing agrees: A sees exactly these, B sees none
    async with chain.gateway.client(PROXY_KEY) as gwc:
        mine = await gwc.get("/v1/artifacts", headers={"X-Gateway-Owner": owner})
        theirs = await gwc.get("/v1/artifacts", headers={"X-Gateway-Owner": "openwebui:" + USER_B})
    assert {a["id"] for a in mine.json()["data"]} == {a["id"] for a in artifacts}
    assert theirs.json()["data"] == []


async def test_openwebui_jwt_identity_and_public_mode(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """JWT form (a secret is set, the user headers are replaced by the JWT) with the mode
    as a top-level field (a per-model custom param): public links, no note."""
    ch = await start_chain(nursery, tmp_path, proxy={"openwebui_jwt_secret": JWT_SECRET})
    owner = "openwebui:" + USER_B
    headers = owui_jwt_headers(make_jwt(owui_claims(USER_B)))
    async with ch.proxy.client(key=None) as c:
        got = await owui_stream(c, owui_body(mode="public"), headers)
    assert_owui_wire(got)
    artifacts = assert_links(ch, got.content, got.manifest, mode="public", owner=owner)
    assert_private_note(got.content, expected=False)
    (run,) = ch.runs()
    assert (run.owner, run.link_mode) == (owner, "public")
    # a public link opens for anyone, without credentials, byte-identical
    by_name = {p.name: p for p in ch.files.in_root}
    for a in artifacts:
        resp = await fetch_as(ch.gateway, a["url"], None)
        assert resp.status_code == 200, resp.text
        assert resp.content == by_name[a["filename"]].read_bytes()


async def test_jwt_wins_over_user_headers(nursery: trio.Nursery, tmp_path: Path) -> None:
    ch = await start_chain(nursery, tmp_path, proxy={"openwebui_jwt_secret": JWT_SECRET})
    headers = owui_headers(USER_A) | {"X-OpenWebUI-User-Jwt": make_jwt(owui_claims(USER_B))}
    async with ch.proxy.client(key=None) as c:
        got = await owui_stream(c, owui_body(), headers)
    assert got.status == 200, got.text
    artifacts = got.manifest["artifacts"]
    assert artifacts and {ch.owner_of(a["id"]) for a in artifacts} == {"openwebui:" + USER_B}


@pytest.mark.parametrize("default", ["private", "public"])
async def test_link_mode_precedence(nursery: trio.Nursery, tmp_path: Path, default: str) -> None:
    """No mode -> artifacts.default_link_mode; top-level and metadata.hermes override it."""
    ch = await start_chain(nursery, tmp_path, artifacts={"default_link_mode": default})
    other = "public" if default == "private" else "private"
    owner = "openwebui:" + USER_A
    cases = [
        ("default", owui_body(), default),
        ("top-level", owui_body(mode=other), other),
        ("metadata.hermes", hermes_body(other), other),
        (
            "top-level wins over metadata",
            {**hermes_body(default), "download_link_mode": other},
            other,
        ),
    ]
    async with ch.proxy.client(key=None) as c:
        for label, body, expected in cases:
            got = await owui_stream(c, body, owui_headers(USER_A))
            assert_owui_wire(got)
            assert_links(ch, got.content, got.manifest, mode=expected, owner=owner)
            assert_private_note(got.content, expected=expected == "private")
            assert ch.runs()[-1].link_mode == expected, label


async def test_direct_api_client_metadata_public_without_identity(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """A direct API client: only the client key, the mode under metadata.hermes; with
    proxy.allow_anonymous no Open WebUI identity is needed for public links (owner
    openwebui:anonymous); without it, refused."""
    chain = await start_chain(nursery, tmp_path)
    async with chain.proxy.client() as c:
        refused = await c.post("/v1/chat/completions", json=hermes_body("public"))
        assert (refused.status_code, error_of(refused)["code"]) == (400, "identity_required")
        assert "allow_anonymous" in error_of(refused)["message"]
    chain = await start_chain(nursery, tmp_path / "anon", proxy={"allow_anonymous": True})
    async with chain.proxy.client() as c:
        got = await owui_stream(c, hermes_body("public"), {})
    assert_owui_wire(got)
    assert_links(chain, got.content, got.manifest, mode="public", owner="openwebui:anonymous")
    assert_private_note(got.content, expected=False)


async def test_stream_parses_line_by_line_like_openwebui(chain: Chain) -> None:
    """Every data line is one JSON object on its own; comments only as ':' lines; the
    deltas concatenate to the final text (no event split over lines)."""
    async with chain.proxy.client(key=None) as c:
        got = await owui_stream(c, owui_body(), owui_headers())
    lines = got.text.split("\n")
    data = [ln for ln in lines if ln.startswith("data:")]
    assert len(data) == len(got.chunks) + 1  # + [DONE]
    assert all(ln.startswith(("data: ", ": ")) or ln == "" for ln in lines), lines
    # the run's own record of the answer matches what Open WebUI assembled (minus the note)
    (run,) = chain.runs()
    note = NOTE_PATTERN.search(got.content)
    assert note is not None and got.content == "".join(run.output) + note.group(0)


@SDK_WARNINGS
async def test_openai_sdk_streams_through_proxy(chain: Chain) -> None:
    text: list[str] = []
    finish = None
    manifest = None
    headers = owui_headers(USER_A)
    del headers["Authorization"]
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(10, read=30)) as http:
        client = openai.AsyncOpenAI(
            base_url=chain.proxy.url + "/v1",
            api_key=OWUI_KEY,
            http_client=http,
            max_retries=0,
            default_headers=headers,
        )
        stream = await client.chat.completions.create(
            model="demo",
            messages=MESSAGES,
            stream=True,
            extra_body={"download_link_mode": "public"},
        )
        async with stream:
            async for c in stream:
                for choice in c.choices:
                    text.append(choice.delta.content or "")
                    finish = choice.finish_reason or finish
                manifest = (c.model_extra or {}).get("gateway") or manifest
        del stream
    gc.collect()
    assert finish == "stop"
    assert manifest is not None
    assert_links(chain, "".join(text), manifest, mode="public", owner="openwebui:" + USER_A)


async def test_openai_sync_sdk_non_streaming_direct_client(chain: Chain) -> None:
    """The sync SDK (in a worker thread), ``stream: false``, mode under metadata.hermes:
    a non-streamed request through the proxy is answered with file names only (that is
    how Open WebUI's background tasks come); a direct client that wants links streams,
    or calls the gateway itself."""
    headers = owui_headers(USER_A)
    del headers["Authorization"]

    def call() -> Any:
        with httpx2.Client(timeout=httpx2.Timeout(10, read=30)) as http:
            client = openai.OpenAI(
                base_url=chain.proxy.url + "/v1",
                api_key=OWUI_KEY,
                http_client=http,
                max_retries=0,
                default_headers=headers,
            )
            return client.chat.completions.create(
                model="demo",
                messages=MESSAGES,
                extra_body={"metadata": {"hermes": {"download_link_mode": "private"}}},
            )

    completion = await trio.to_thread.run_sync(call)
    assert completion.object == "chat.completion"
    content = completion.choices[0].message.content
    assert content is not None and links_in(content) == []
    assert all(p.name in content for p in chain.files.in_root)
    assert_no_host_paths(content, chain.files)
    manifest = (completion.model_extra or {})["gateway"]
    assert manifest == {"download_link_mode": "private", "artifacts": []}
    assert_private_note(content, expected=False)


# --------------------------------------------------------------------------- non-streaming


@pytest.mark.parametrize("mode", ["private", "public"])
async def test_non_streaming_background_request(chain: Chain, mode: str) -> None:
    """Open WebUI's title/tags/follow-up requests use ``stream: false`` with the same
    headers: a rewritten ``chat.completion`` with file names only — no link is minted,
    no note, no markdown link for a chat title — and never a raw path."""
    body = {
        "model": "demo",
        "messages": [
            {"role": "user", "content": "### Task:\nGenerate a concise, 3-5 word title..."}
        ],
        "stream": False,
        "download_link_mode": mode,
    }
    async with chain.proxy.client(key=None) as c:
        resp = await c.post(CHAT, json=body, headers=owui_headers(USER_A))
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    out = resp.json()
    assert out["object"] == "chat.completion"
    assert out["choices"][0]["finish_reason"] == "stop"
    message = out["choices"][0]["message"]
    assert message["role"] == "assistant"
    assert links_in(message["content"]) == [] and "](http" not in message["content"]
    for p in chain.files.in_root:
        assert p.name in message["content"]
    assert out["gateway"] == {"download_link_mode": mode, "artifacts": []}
    assert_private_note(message["content"], expected=False)
    assert_no_host_paths(resp.text, chain.files)
    assert out["usage"]["total_tokens"] > 0
    async with chain.gateway.client(PROXY_KEY) as gwc:  # nothing was minted for anyone
        listing = await gwc.get("/v1/artifacts", headers={"X-Gateway-Owner": "openwebui:" + USER_A})
    assert listing.json()["data"] == []


async def test_a_task_prompt_quoting_the_chat_gets_paths_and_no_note(chain: Chain) -> None:
    """Open WebUI's title/tags/follow-up prompts quote the chat history, the private
    note included, inside one user message: the upstream gets the owner's files as
    their paths again and no note; a note's share links are not made into paths with
    "/share" on the end."""
    async with chain.proxy.client(key=None) as c:
        first = await owui_stream(c, owui_body(), owui_headers(USER_A))
        assert_private_note(first.content, expected=True)
        task = (
            "### Task:\nGenerate a concise title.\n<chat_history>\nUSER: make me a report"
            f"\nASSISTANT: {first.content}\n</chat_history>"
        )
        body = {"model": "demo", "messages": [{"role": "user", "content": task}], "stream": False}
        resp = await c.post(CHAT, json=body, headers=owui_headers(USER_A))
    assert resp.status_code == 200, resp.text
    sent = [e for e in chain.upstream.app.demo_log if e["path"] == "/v1/chat/completions"]
    quoted = sent[-1]["body"]["messages"][0]["content"]
    assert NOTE_START.strip() not in quoted and "/share" not in quoted
    assert "/v1/artifacts/" not in quoted
    assert str(chain.files.report_pdf) in quoted  # the agent's own path again


async def test_continue_response_starts_after_the_note(chain: Chain) -> None:
    """Open WebUI's "Continue Response" sends the answer (note included) as the last
    message and appends the new text to it: the new text starts a paragraph of its
    own, so the note keeps its italics; the upstream sees no note."""
    async with chain.proxy.client(key=None) as c:
        first = await owui_stream(c, owui_body(), owui_headers(USER_A))
        assert_private_note(first.content, expected=True)
        body = owui_body("demo-long")
        body["messages"] = [*MESSAGES, {"role": "assistant", "content": first.content}]
        more = await owui_stream(c, body, owui_headers(USER_A))
        plain = await owui_stream(c, owui_body("demo-long"), owui_headers(USER_A))
    assert not more.errors
    assert more.content.startswith("\n\n") and more.content[2:] == plain.content
    assert not plain.content.startswith("\n")  # only a continuation gets the break
    sent = [e for e in chain.upstream.app.demo_log if e["path"] == "/v1/chat/completions"]
    answer = sent[-2]["body"]["messages"][-1]["content"]
    assert NOTE_START.strip() not in answer


# --------------------------------------------------------------------------- disconnect


async def test_client_disconnect_stops_the_run(nursery: trio.Nursery, tmp_path: Path) -> None:
    """Open WebUI's user presses stop (the connection closes): the proxy stops the run on
    the gateway, which closes its upstream stream. Runs otherwise outlive requests, so
    only the proxy's stop can end this one early."""
    ch = await start_chain(nursery, tmp_path, chunk_delay=0.05)  # demo-long: 200 x 50 ms
    async with ch.proxy.client(key=None) as c:
        got = await owui_stream(
            c,
            owui_body("demo-long"),
            owui_headers(USER_A),
            stop_when=lambda g: "jumps-4" in g.content,
        )
    left = trio.current_time()
    assert got.status == 200
    await wait_until(lambda: ch.runs()[0].status == "cancelled", limit=3)
    (run,) = ch.runs()
    await wait_until(lambda: ch.upstream.app.demo_disconnects == 1, limit=3)
    assert trio.current_time() - left < 2.5
    assert run.events[-1]["event"] == "run.cancelled"
    assert len("".join(run.output).split()) < 100  # stopped long before its 200 deltas
    assert ch.upstream.app.demo_streams_completed == 0


# --------------------------------------------------------------------------- bad input


async def test_bad_input_headers_mode(chain: Chain) -> None:
    """No JWT secret configured; user headers trusted. Every refusal happens before a run
    is started on the gateway."""
    async with chain.proxy.client(key=None) as c:

        async def post(body: dict[str, Any], headers: dict[str, str]) -> httpx.Response:
            return await c.post(CHAT, json=body, headers=headers)

        resp = await post(owui_body(), owui_headers(key="not-a-client-key-0123456789"))
        assert (resp.status_code, error_of(resp)["code"]) == (401, "invalid_api_key")
        assert resp.headers["www-authenticate"].startswith("Bearer")
        no_key = owui_headers()
        del no_key["Authorization"]
        resp = await post(owui_body(), no_key)
        assert (resp.status_code, error_of(resp)["code"]) == (401, "missing_api_key")
        # the gateway's proxy key is not a client key of the proxy
        resp = await post(owui_body(), owui_headers(key=PROXY_KEY))
        assert resp.status_code == 401
        # a JWT while no secret is configured: refused, never silently ignored
        jwt = owui_jwt_headers(make_jwt(owui_claims()))
        resp = await post(owui_body(), jwt)
        err = error_of(resp)
        assert (resp.status_code, err["code"]) == (401, "jwt_not_configured")
        assert "openwebui_jwt_secret" in err["message"]
        for body in (owui_body(mode="shared"), hermes_body("everyone"), owui_body(mode="PUBLIC")):
            resp = await post(body, owui_headers())
            assert (resp.status_code, error_of(resp)["code"]) == (400, "invalid_download_link_mode")
        # no identity: refused, private or public (everyone would be one principal:
        # one folder, one quota), unless proxy.allow_anonymous (then public works)
        for body in (owui_body(), owui_body(mode="private"), hermes_body("private")):
            resp = await post(body, owui_headers(user_id=None))
            err = error_of(resp)
            assert (resp.status_code, err["code"]) == (400, "identity_required")
            assert "ENABLE_FORWARD_USER_INFO_HEADERS" in err["message"]
        resp = await post(owui_body(mode="public"), owui_headers(user_id=None))
        assert (resp.status_code, error_of(resp)["code"]) == (400, "identity_required")
        assert "allow_anonymous" in error_of(resp)["message"]
        assert chain.runs() == []


async def test_anonymous_users_only_when_allowed(nursery: trio.Nursery, tmp_path: Path) -> None:
    chain = await start_chain(nursery, tmp_path, proxy={"allow_anonymous": True})
    async with chain.proxy.client(key=None) as c:
        got = await owui_stream(c, owui_body(mode="public"), owui_headers(user_id=None))
        assert got.status == 200, got.text
        artifacts = got.manifest["artifacts"]
        assert artifacts and {chain.owner_of(a["id"]) for a in artifacts} == {"openwebui:anonymous"}


async def test_bad_input_jwt_mode(nursery: trio.Nursery, tmp_path: Path) -> None:
    ch = await start_chain(nursery, tmp_path, proxy={"openwebui_jwt_secret": JWT_SECRET})
    now = int(time.time())
    bad_tokens = {
        "forged (wrong secret)": make_jwt(owui_claims(), "some-other-secret-0123456789"),
        "expired": make_jwt(owui_claims(iat=now - 3600, exp=now - 3300)),
        "wrong iss": make_jwt(owui_claims(iss="evil-webui")),
        "no iss": make_jwt({k: v for k, v in owui_claims().items() if k != "iss"}),
        "alg none": make_jwt(owui_claims(), alg="none"),
        "alg none, HS256 mac": make_jwt(owui_claims(), alg="none").rstrip(".")
        + "."
        + make_jwt(owui_claims()).rsplit(".", 1)[1],
        "no exp": make_jwt({k: v for k, v in owui_claims().items() if k != "exp"}),
        "no sub": make_jwt(owui_claims(sub="")),
        "tampered claims": ".".join(
            [
                make_jwt(owui_claims()).split(".")[0],
                _b64url(json.dumps(owui_claims(USER_B)).encode()),
                make_jwt(owui_claims()).split(".")[2],
            ]
        ),
        "garbage": "not.a.jwt",
        "two parts": "abc.def",
    }
    async with ch.proxy.client(key=None) as c:
        for label, token in bad_tokens.items():
            for stream in (True, False):
                resp = await c.post(
                    CHAT, json=owui_body(stream=stream), headers=owui_jwt_headers(token)
                )
                assert resp.status_code == 401, (label, resp.text)
                err = error_of(resp)
                assert err["code"] == "invalid_user_jwt", label
                assert token not in resp.text and JWT_SECRET not in resp.text
        # a valid token still needs a valid client key
        good = make_jwt(owui_claims())
        resp = await c.post(
            CHAT, json=owui_body(), headers=owui_jwt_headers(good, key="nope-nope-0123456789")
        )
        assert resp.status_code == 401
        assert ch.runs() == []
        # and within exp (iat + 300) it works
        resp = await c.post(CHAT, json=owui_body(stream=False), headers=owui_jwt_headers(good))
        assert resp.status_code == 200, resp.text


async def test_gateway_down(
    nursery: trio.Nursery, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """proxy.gateway_url points at a closed port: a clear 502 naming the URL and the
    setting, one warning in the proxy's log (it had only the access line), and /health
    says so."""
    down = f"http://127.0.0.1:{closed_port()}"
    cfg = proxy_config(tmp_path, "http://127.0.0.1:9/v1", down)
    px = await start_proxy(nursery, cfg)
    async with px.client(key=None) as c:
        for stream in (True, False):
            resp = await c.post(CHAT, json=owui_body(stream=stream), headers=owui_headers())
            assert resp.status_code == 502, resp.text
            assert resp.headers["content-type"].startswith("application/json")
            err = error_of(resp)
            assert err["code"] == "gateway_unreachable"
            assert "gateway" in err["message"] and "gateway run" in err["message"]
            assert down in err["message"] and "proxy.gateway_url" in err["message"]
        resp = await c.get("/v1/models", headers=owui_headers())
        assert (resp.status_code, error_of(resp)["code"]) == (502, "gateway_unreachable")
        health = await c.get("/health")
    assert health.status_code == 200
    assert health.json()["gateway"] == "unreachable"
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [m for m in warned if "gateway_unreachable" in m and down in m], warned
    assert health.json()["status"] == "ok"


async def test_gateway_refuses_proxy_key(nursery: trio.Nursery, tmp_path: Path) -> None:
    """A wrong ``proxy.gateway_key`` is the operator's problem, not Open WebUI's: the
    client must not be told that *its* key is invalid (Open WebUI would say so)."""
    ch = await start_chain(nursery, tmp_path, proxy={"gateway_key": "wrong-proxy-key-0123456789"})
    async with ch.proxy.client(key=None) as c:
        resp = await c.post(CHAT, json=owui_body(), headers=owui_headers())
        models = await c.get("/v1/models", headers=owui_headers())
    for r in (resp, models):
        assert r.status_code == 502, r.text
        err = error_of(r)
        assert err["code"] == "gateway_auth_failed"
        assert "proxy.gateway_key" in err["message"]


async def test_health_and_models_through_proxy(chain: Chain) -> None:
    async with chain.proxy.client() as c:
        health = await c.get("/health")
        models = await c.get("/v1/models")
    async with chain.proxy.client(key=None) as anon:
        refused = await anon.get("/v1/models")
    assert health.status_code == 200
    assert health.json()["gateway"] == "ok"
    assert health.json()["status"] == "ok"
    assert models.status_code == 200, models.text
    listing = models.json()
    assert listing["object"] == "list"
    assert [m["id"] for m in listing["data"]] == list(MODELS)
    assert (refused.status_code, error_of(refused)["code"]) == (401, "missing_api_key")


# --------------------------------------------------------------------------- defence in depth


async def test_defence_in_depth_gateway_rewriting_disabled(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """With the gateway's rewriting switched off (a harness-only switch), its run events
    carry the raw paths; the proxy's own name-only rewriter still lets only file names
    through to Open WebUI."""

    ch = await start_chain(nursery, tmp_path, settings=NOTHING_FOUND)
    owner = "openwebui:" + USER_A
    async with ch.proxy.client(key=None) as c:
        got = await owui_stream(c, owui_body(), owui_headers(USER_A))
        plain = await c.post(CHAT, json=owui_body(stream=False), headers=owui_headers(USER_A))
    assert_owui_wire(got)
    files = ch.files
    for text in (got.text, got.content, plain.text):
        assert_no_host_paths(text, files)
    for p in (*files.in_root, files.outside_txt):
        assert p.name in got.content
    assert " plot.png for the slides" in got.content
    assert links_in(got.content) == []  # nothing was minted
    assert (
        plain.status_code == 200
        and links_in(plain.json()["choices"][0]["message"]["content"]) == []
    )

    # the gateway's own stream of the same run would have leaked them
    run = ch.runs()[0]
    async with ch.gateway.client(PROXY_KEY) as gwc:
        events = await gwc.get(
            f"/v1/runs/{run.id}/events", headers={"X-Gateway-Owner": owner, "Last-Event-ID": "0"}
        )
    assert events.status_code == 200
    assert str(files.report_pdf) in events.text
    assert str(files.outside_txt.parent) in events.text
    assert HOST_PATH_RE.search(events.text) is not None


def _scripted_chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    return encode_json(
        {
            "id": "chatcmpl-scripted",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "scripted",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    )


async def test_defence_in_depth_knows_configured_mounts(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """The agent writes under a mount (``/workspace``), which is not one of the usual host
    roots: the proxy's own rewriter must know the configured mounts and roots too."""
    pieces = [
        "Saved the report to /works",
        "pace/team-secret/rep",
        "ort.pdf and the data to /srv/agent/data/x.csv",
        " (see /workspace/team-secret/report.pdf).",
    ]
    body = b"".join(
        [
            _scripted_chunk({"role": "assistant", "content": ""}),
            *(_scripted_chunk({"content": p}) for p in pieces),
            _scripted_chunk({}, "stop"),
            DONE,
        ]
    )
    transport = ScriptedTransport(lambda request: Scripted([body[:57], body[57:]]))
    artifacts = {
        "mounts": [{"agent_prefix": "/workspace", "host_dir": str(tmp_path / "artifacts")}]
    }
    cfg = make_config(tmp_path, "http://127.0.0.1:9/v1", artifacts=artifacts)
    (tmp_path / "artifacts" / "team-secret").mkdir(parents=True)
    (tmp_path / "artifacts" / "team-secret" / "report.pdf").write_bytes(b"%PDF-1.4 tiny")

    gw = await start_gateway(nursery, cfg, transport=transport, settings=NOTHING_FOUND)
    px = await start_proxy(
        nursery,
        proxy_config(tmp_path, "http://127.0.0.1:9/v1", gw.url, artifacts=artifacts),
    )
    async with px.client(key=None) as c:
        got = await owui_stream(c, owui_body("scripted"), owui_headers(USER_A))
    assert_owui_wire(got)
    assert "/workspace" not in got.text and "team-secret" not in got.text, got.content
    assert HOST_PATH_RE.search(got.text) is None
    assert got.content.startswith("Saved the report to report.pdf and the data to x.csv")


async def test_sampling_parameters_reach_the_upstream(chain: Chain) -> None:
    """Open WebUI's per-model params (temperature, max_tokens...) go through the run."""
    body = {**owui_body(stream=False), "temperature": 0.25, "max_tokens": 77, "top_k": 3}
    async with chain.proxy.client(key=None) as c:
        resp = await c.post(CHAT, json=body, headers=owui_headers(USER_A))
    assert resp.status_code == 200, resp.text
    sent = [
        e["body"] for e in chain.upstream.app.demo_log if e["path"].endswith("/chat/completions")
    ]
    assert sent[-1]["temperature"] == 0.25 and sent[-1]["max_tokens"] == 77
    assert "top_k" not in sent[-1]  # only the known sampling keys pass


@pytest.mark.parametrize("user_id", ["%C3%BC", "x%C2%B2", "%D9%A1", "h-" + "0" * 32])
async def test_a_user_id_outside_the_ascii_alphabet_is_hashed(chain: Chain, user_id: str) -> None:
    """Open WebUI ids are ours to carry, not to trust: a non-ASCII letter or digit (the
    owner travels in an ASCII header) or an id spelled like a hashed one is hashed, and
    the stream works (a red-team pass got a 500 for ``%C3%BC``)."""
    async with chain.proxy.client(key=None) as c:
        got = await owui_stream(c, owui_body(), owui_headers(user_id))
    assert not got.errors, got.errors
    assert got.final["choices"][0]["finish_reason"] == "stop"
    (run,) = chain.runs()
    assert run.owner.startswith("openwebui:h-") and run.owner != "openwebui:" + user_id
