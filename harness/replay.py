"""Replay cassettes through the real API server (and proxy) with adversarial chunking.

For each cassette: a sandbox (artifact root with the expected files, state dir,
mounts from the recording host's prefix into the sandbox), a real gateway on
127.0.0.1 whose upstream client gets a :class:`~harness.transport.ScriptedTransport`
serving the cassette body cut by each strategy, and for proxy cassettes a real
proxy in front of it. The client side records every network read in arrival order
and the checks run over those reads:

* no leak: no read, and no prefix of the assembled bytes, contains a ``never``
  string, the folder part of a ``names_only`` path, or the sandbox's own path;
* protocol: every ``data:`` line is one-line JSON (or ``[DONE]``), exactly one
  terminal event carrying the artifact manifest, ``[DONE]`` last on chat streams;
* chunking invariance: the assembled text is identical for every chunking;
* expectation: the text with links turned into ``<link:FILE>`` placeholders equals
  ``expect.text``; ``names_only`` paths show their name and nothing of the folder;
* consistency: the links anywhere in the stream (text, tool-call arguments, relayed
  named events) are in the terminal manifest (which may also list files the agent
  reported writing, given by ``expect.artifacts``; without it, exactly the stream's),
  and the link mode is the one asked for; ``tool_arguments`` and ``named_events`` match when the expectation
  gives them;
* no delay (per-event strategy): a chunk of ordinary text reaches the client before
  the next upstream chunk is released;
* links (once per cassette): each downloads byte-identical for its owner, is 404 for
  another principal when private, and works without auth when public;
* the ``openai`` SDK parses the stream (chat and Responses fronts, and the proxy).
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import trio

from gateway.core.rewrite import StreamRewriter
from gateway.core.sse import SSEDecoder
from gateway.http.serve import serve_app
from gateway.ops.config import Config, config_from_dict, scope_roots_for_detection
from harness import timeline
from harness.cassette import Cassette
from harness.nothing import NOTHING_FOUND
from harness.strategies import STRATEGIES, Chunking, Options
from harness.transport import Scripted, ScriptedTransport

KEYS = {
    "alice": "harness-alice-key-0123456789",
    "bob": "harness-bob-key-0123456789ab",
    "proxy": "harness-proxy-key-0123456789",
}
CLIENT_KEY = "harness-owui-client-key-0123456"
OWUI_USER = {"alice": "u-alice-0001", "bob": "u-bob-0002"}
PUBLIC_BASE = "http://gateway.test"
LINK_RE = re.compile(
    re.escape(PUBLIC_BASE) + r"/v1/artifacts/([A-Za-z0-9_-]+)(\?exp=\d+&sig=[A-Za-z0-9._-]+)?"
)


class CheckFailed(Exception):
    def __init__(self, message: str, event: str | None = None) -> None:
        super().__init__(message)
        self.event = event


@dataclass
class Outcome:
    cassette: str
    strategy: str
    replays: int = 0
    failure: str | None = None
    event: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.failure is None


class Progress:
    """Counts network reads on the client side; wakes a waiting transport."""

    def __init__(self) -> None:
        self.count = 0
        self.mark = 0
        self.changed = trio.Event()

    def tick(self) -> None:
        self.count += 1
        self.changed.set()
        self.changed = trio.Event()


@dataclass
class Capture:
    status: int
    reads: list[bytes] = field(default_factory=list)
    text: str = ""
    terminal: dict[str, Any] | None = None
    manifest: dict[str, Any] | None = None
    error_code: str | None = None
    body: bytes = b""
    #: assembled arguments per tool call, in the order the calls appeared
    tool_args: dict[str, list[str]] = field(default_factory=dict)
    #: ids of every link emitted outside the manifest (text, arguments, named events)
    link_ids: set[str] = field(default_factory=set)
    #: names of the named (non-``message``) events relayed on a chat stream
    named: list[str] = field(default_factory=list)


# -- sandbox and servers -----------------------------------------------------------


def sandbox_config(cas: Cassette, base: Path) -> Config:
    exp = cas.expect
    (base / "root").mkdir(parents=True, exist_ok=True)
    for rel, content in exp.files.items():
        p = base / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content.encode("utf-8") if isinstance(content, str) else bytes(content))
    mounts = [
        {"agent_prefix": prefix, "host_dir": str(base / rel)} for prefix, rel in exp.mounts.items()
    ]
    return config_from_dict(
        {
            "state_dir": str(base / "state"),
            "server": {
                "bind": "127.0.0.1:0",
                "public_base_url": PUBLIC_BASE,
                "keepalive_seconds": 5,
            },
            "upstream": {"base_url": "http://upstream.test/v1"},
            "artifacts": {  # one folder the cassettes' principals share, on purpose
                "roots": [],
                "shared_roots": [str(base / "root")],
                "default_link_mode": exp.default_link_mode,
                "mounts": mounts,
            },
            "auth": {
                "keys": [
                    {"key": KEYS["alice"], "principal": "alice", "role": "user"},
                    {"key": KEYS["bob"], "principal": "bob", "role": "user"},
                    {"key": KEYS["proxy"], "principal": "harness-proxy", "role": "proxy"},
                ]
            },
            "proxy": {"gateway_key": KEYS["proxy"], "client_keys": [CLIENT_KEY]},
            # one cassette replays hundreds of times a second as one principal: the
            # replays check rewriting and links, the quotas have tests of their own
            "quotas": {"links_per_minute": 1_000_000_000, "max_running_runs": 100_000},
        }
    )


class Replayer:
    """One cassette's servers; ``replay(chunking)`` drives one request through them."""

    def __init__(self, cas: Cassette, base: Path, *, rewrite: bool = True) -> None:
        self.cas = cas
        self.base = base
        self.config = sandbox_config(cas, base)
        self.rewrite = rewrite
        self._next: list[Scripted] = []
        self.transport = ScriptedTransport(self._script_for)
        self.gateway_url = ""
        self.proxy_url = ""
        self.gateway_app: Any = None

    def _script_for(self, request: httpx.Request) -> Scripted:
        if self._next:
            return self._next.pop(0)
        chunks: Chunking = [self.cas.body]
        before: Callable[[int], None] | None = None
        if self.cas.timeline:  # the SDK's request: the files change as in every replay
            chunks, before = self._timeline(chunks)
        return Scripted(
            chunks,
            status=self.cas.status,
            headers=dict(self.cas.headers),
            fail_after=self.cas.expect.upstream_cut,
            before_chunk=before,
        )

    @property
    def extra_roots(self) -> tuple[str, ...]:
        """What the gateway's detector counts as roots besides the defaults."""
        arts = self.config.artifacts
        return (*scope_roots_for_detection(arts), *(m.agent_prefix for m in arts.mounts))

    async def start(self, nursery: trio.Nursery) -> None:
        from gateway.api.app import create_app
        from gateway.proxy import create_proxy_app

        settings = None if self.rewrite else NOTHING_FOUND
        app = create_app(self.config, upstream_transport=self.transport, settings=settings)
        self.gateway_app = app
        urls = await nursery.start(
            partial(serve_app, app, "127.0.0.1:0", shutdown_trigger=trio.sleep_forever)
        )
        self.gateway_url = urls[0]
        nursery.start_soon(_close_when_cancelled, app.gateway.aclose)
        if self.cas.expect.front == "proxy":
            pcfg = config_from_dict(
                {
                    "state_dir": str(self.base / "proxy-state"),
                    "artifacts": {
                        "roots": [],
                        "shared_roots": [str(self.base / "root")],
                        "default_link_mode": self.cas.expect.default_link_mode,
                    },
                    "proxy": {
                        "gateway_url": self.gateway_url,
                        "gateway_key": KEYS["proxy"],
                        "client_keys": [CLIENT_KEY],
                    },
                }
            )
            papp = create_proxy_app(pcfg)
            purls = await nursery.start(
                partial(serve_app, papp, "127.0.0.1:0", shutdown_trigger=trio.sleep_forever)
            )
            self.proxy_url = purls[0]
            nursery.start_soon(_close_when_cancelled, papp.proxy.aclose)

    def _timeline(self, chunking: Chunking) -> tuple[Chunking, Callable[[int], None]]:
        """Reset the sandbox; cut ``chunking`` where the timeline's ops must happen."""
        ops = self.cas.timeline
        timeline.reset(self.base, self.cas.expect.files, ops)
        refined, before = timeline.refine(chunking, ops)

        def run_ops(i: int) -> None:
            for op in before.get(i, ()):
                timeline.apply(op, self.base)

        return refined, run_ops

    # -- driving one request ---------------------------------------------------------

    def _mode_fields(self, body: dict[str, Any], headers: dict[str, str]) -> None:
        exp = self.cas.expect
        if exp.link_mode is None or exp.mode_via == "default":
            return
        if exp.mode_via == "metadata":
            body["metadata"] = {"hermes": {"download_link_mode": exp.link_mode}}
        elif exp.mode_via == "header":
            headers["X-Gateway-Link-Mode"] = exp.link_mode
        else:
            body["download_link_mode"] = exp.link_mode

    async def replay(
        self,
        client: httpx.AsyncClient,
        chunking: Chunking,
        *,
        lockstep: list[bool] | None = None,
    ) -> Capture:
        exp = self.cas.expect
        progress = Progress()
        waits: list[bool] = []
        after: Callable[[int], Awaitable[None]] | None = None
        before: Callable[[int], None] | None = None
        if self.cas.timeline:
            chunking, before = self._timeline(chunking)
        if lockstep is not None:
            ordinary = ordinary_chunks(chunking, self.extra_roots)

            async def after_chunk(i: int) -> None:
                if i < len(ordinary) and ordinary[i]:
                    seen = progress.count > progress.mark
                    if not seen:
                        with trio.move_on_after(2.0):
                            await progress.changed.wait()
                        seen = progress.count > progress.mark
                    waits.append(seen)
                progress.mark = progress.count

            after = after_chunk
        self._next.append(
            Scripted(
                chunking,
                status=self.cas.status,
                headers=dict(self.cas.headers),
                after_chunk=after,
                before_chunk=before,
                fail_after=exp.upstream_cut,
            )
        )
        req = dict(self.cas.request_body)
        model = req.get("model") or "replay"
        headers: dict[str, str] = {}
        user = exp.principal
        if exp.front == "chat":
            body: dict[str, Any] = {**req, "stream": True, "model": model}
            body.setdefault("messages", [{"role": "user", "content": "replay"}])
            headers["Authorization"] = f"Bearer {KEYS[user]}"
            if exp.mode_via == "header":
                # a proxy key acts only inside its namespace (openwebui:<id>)
                headers["Authorization"] = f"Bearer {KEYS['proxy']}"
                headers["X-Gateway-Owner"] = "openwebui:" + OWUI_USER[user]
            self._mode_fields(body, headers)
            cap = await _stream(
                client, "POST", self.gateway_url + "/v1/chat/completions", body, headers, progress
            )
        elif exp.front == "responses":
            msgs = req.get("messages") or [{"role": "user", "content": "replay"}]
            body = {
                "model": model,
                "input": str(msgs[-1].get("content") or "replay"),
                "stream": True,
            }
            headers["Authorization"] = f"Bearer {KEYS[user]}"
            self._mode_fields(body, headers)
            cap = await _stream(
                client, "POST", self.gateway_url + "/v1/responses", body, headers, progress
            )
        elif exp.front == "runs":
            body = {
                "model": model,
                "messages": req.get("messages") or [{"role": "user", "content": "replay"}],
            }
            headers["Authorization"] = f"Bearer {KEYS[user]}"
            self._mode_fields(body, headers)
            r = await client.post(self.gateway_url + "/v1/runs", json=body, headers=headers)
            if r.status_code != 202:
                return Capture(r.status_code, [r.content], body=r.content)
            run_id = r.json()["run_id"]
            cap = await _stream(
                client,
                "GET",
                f"{self.gateway_url}/v1/runs/{run_id}/events",
                None,
                headers,
                progress,
            )
        else:  # proxy
            body = {
                "model": model,
                "messages": req.get("messages") or [{"role": "user", "content": "replay"}],
                "stream": True,
            }
            if exp.link_mode is not None and exp.mode_via != "default":
                if exp.mode_via == "metadata":
                    body["metadata"] = {"hermes": {"download_link_mode": exp.link_mode}}
                else:
                    body["download_link_mode"] = exp.link_mode
            headers = {
                "Authorization": f"Bearer {CLIENT_KEY}",
                "X-OpenWebUI-User-Id": OWUI_USER[user],
                "X-OpenWebUI-User-Name": user,
                "X-OpenWebUI-User-Email": f"{user}@example.test",
                "X-OpenWebUI-User-Role": "user",
                "X-OpenWebUI-Auth-Type": "bearer",
                "X-OpenWebUI-Chat-Id": "chat-harness",
            }
            cap = await _stream(
                client, "POST", self.proxy_url + "/v1/chat/completions", body, headers, progress
            )
        parse_capture(cap, exp.front)
        if lockstep is not None:
            lockstep.extend(waits)
        return cap


async def _close_when_cancelled(close: Callable[[], Awaitable[None]]) -> None:
    try:
        await trio.sleep_forever()
    finally:
        with trio.CancelScope(shield=True):
            await close()


async def _stream(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    body: dict[str, Any] | None,
    headers: dict[str, str],
    progress: Progress,
) -> Capture:
    async with client.stream(method, url, json=body, headers=headers) as r:
        cap = Capture(r.status_code)
        async for chunk in r.aiter_raw():
            if chunk:
                cap.reads.append(chunk)
                progress.tick()
    cap.body = b"".join(cap.reads)
    return cap


def ordinary_chunks(chunking: Chunking, extra_roots: tuple[str, ...] = ()) -> list[bool]:
    """Per chunk: must its text reach the client before the next chunk (invariant 3)?

    ``extra_roots`` must be the gateway's (artifact roots and mount prefixes):
    with fewer roots, text the gateway rightly holds (``/workspace/...``) would
    look ordinary here.
    """
    rw = StreamRewriter(extra_roots=extra_roots)
    out = []
    decoder = SSEDecoder()
    for chunk in chunking:
        content = ""
        for ev in decoder.feed(chunk):
            try:
                obj = json.loads(ev.data)
            except ValueError:
                continue
            for ch in obj.get("choices") or () if isinstance(obj, dict) else ():
                if isinstance(ch, dict) and ch.get("finish_reason") is None:
                    c = (ch.get("delta") or {}).get("content")
                    if isinstance(c, str):
                        content += c
        held_before = rw.held_chars
        emitted = rw.feed(content) if content else ""
        out.append(bool(content) and held_before == 0 and rw.held_chars == 0 and emitted == content)
    return out


def parse_capture(cap: Capture, front: str) -> None:
    """Fill text/terminal/manifest from the raw bytes; raise on protocol errors."""
    if cap.status != 200:
        try:
            cap.error_code = json.loads(cap.body).get("error", {}).get("code")
        except (ValueError, AttributeError):
            raise CheckFailed(f"HTTP {cap.status} with a non-JSON error body") from None
        return
    text_parts: list[str] = []
    for line in cap.body.decode("utf-8").split("\n"):
        if line.startswith("data:"):
            payload = line[5:].strip()
            if payload == "[DONE]":
                continue
            try:
                json.loads(payload)
            except ValueError:
                raise CheckFailed("a data line is not one-line JSON", line[:200]) from None
    events = SSEDecoder().feed(cap.body)
    terminals = 0
    for ev in events:
        if ev.data == "[DONE]":
            continue
        obj = json.loads(ev.data)
        _collect_links(cap, obj)
        if front in ("chat", "proxy"):
            if ev.event not in ("", "message"):
                cap.named.append(ev.event)
                continue
            for ch in obj.get("choices") or ():
                delta = ch.get("delta") or {}
                c = delta.get("content")
                if isinstance(c, str):
                    text_parts.append(c)
                for call in delta.get("tool_calls") or ():
                    fn = call.get("function") or {}
                    if isinstance(fn.get("arguments"), str):
                        key = f"{ch.get('index', 0)}.{call.get('index', 0)}"
                        cap.tool_args.setdefault(key, []).append(fn["arguments"])
                if ch.get("finish_reason") is not None:
                    terminals += 1
                    cap.terminal = obj
            # the manifest rides on the last JSON chunk (named events aside)
            cap.manifest = obj["gateway"] if isinstance(obj.get("gateway"), dict) else None
            if isinstance(obj.get("error"), dict):
                cap.error_code = obj["error"].get("code")
        elif front == "responses":
            kind = obj.get("type")
            if kind == "response.output_text.delta":
                text_parts.append(obj["delta"])
            elif kind == "response.function_call_arguments.delta":
                cap.tool_args.setdefault(str(obj["output_index"]), []).append(obj["delta"])
            elif kind in ("response.completed", "response.failed"):
                terminals += 1
                cap.terminal = obj
                cap.manifest = obj["response"].get("gateway")
                err = obj["response"].get("error")
                if isinstance(err, dict):
                    cap.error_code = err.get("code")
            elif kind == "response.output_text.done" and obj["text"] != "".join(text_parts):
                raise CheckFailed("output_text.done differs from the deltas", ev.data[:200])
        else:  # runs
            kind = obj.get("event")
            if kind == "message.delta":
                text_parts.append(obj["delta"])
            elif kind == "tool.completed":
                cap.tool_args[str(obj.get("tool_call_id"))] = [str(obj.get("arguments") or "")]
            elif kind in ("run.completed", "run.failed", "run.cancelled"):
                terminals += 1
                cap.terminal = obj
                cap.manifest = obj.get("gateway")
                if isinstance(obj.get("error"), dict):
                    cap.error_code = obj["error"].get("code")
    if terminals != 1:
        raise CheckFailed(f"expected exactly one terminal event, saw {terminals}")
    if cap.manifest is None:
        raise CheckFailed("the terminal event carries no artifact manifest (gateway)")
    if front in ("chat", "proxy") and (not events or events[-1].data != "[DONE]"):
        raise CheckFailed("the stream does not end with [DONE]")
    cap.text = "".join(text_parts)
    if (
        front == "responses"
        and cap.terminal is not None
        and cap.terminal["type"] == "response.completed"
    ) and cap.terminal["response"].get("output_text") != cap.text:
        raise CheckFailed("response.completed text differs from the deltas")
    if (
        front == "runs"
        and cap.terminal is not None
        and cap.terminal.get("output") not in (None, cap.text)
    ):
        raise CheckFailed("the run's terminal output differs from its deltas")


def _collect_links(cap: Capture, obj: Any) -> None:
    """Record the ids of the links in one event, leaving out the manifest itself."""
    if not isinstance(obj, dict):
        return
    stripped = {k: v for k, v in obj.items() if k != "gateway"}
    resp = stripped.get("response")
    if isinstance(resp, dict):
        stripped["response"] = {k: v for k, v in resp.items() if k != "gateway"}
    for m in LINK_RE.finditer(json.dumps(stripped, ensure_ascii=False)):
        cap.link_ids.add(m.group(1))


# -- checks ---------------------------------------------------------------------------


def never_strings(cas: Cassette, base: Path) -> list[str]:
    out = {str(base), *cas.expect.never, *cas.expect.mounts}
    for p in cas.expect.names_only:
        folder = re.split(r"[/\\]+(?=[^/\\]*$)", p)[0]
        if folder:
            out.add(folder)
    forms = set()
    for s in out:
        if not s:
            continue
        forms.add(s)
        forms.add(json.dumps(s)[1:-1])
    return sorted(forms, key=len, reverse=True)


def check_no_leak(cap: Capture, never: list[str]) -> None:
    """No ``never`` string in any prefix of the bytes read, nor in the text or tool-call
    arguments a client assembles (a path cut across deltas is whole only there)."""
    acc = b""
    for read in cap.reads:
        acc += read
        text = acc.decode("utf-8", "replace")
        for s in never:
            if s in text:
                i = text.find(s)
                raise CheckFailed(f"leak: {s!r} reached the client", text[max(0, i - 60) : i + 60])
    for text in (cap.text, *("".join(v) for v in cap.tool_args.values())):
        for s in never:
            if s in text:
                i = text.find(s)
                raise CheckFailed(
                    f"leak: {s!r} reached the client (assembled)", text[max(0, i - 60) : i + 60]
                )


def placeholders(text: str, manifest: dict[str, Any] | None, cas: Cassette, base: Path) -> str:
    by_id = {a["id"]: a for a in (manifest or {}).get("artifacts", [])}

    def sub(m: re.Match[str]) -> str:
        art = by_id.get(m.group(1))
        if art is None:
            return "<link:?>"
        return f"<link:{sandbox_file(cas, art['filename']) or art['filename']}>"

    return LINK_RE.sub(sub, text)


def sandbox_files(cas: Cassette) -> list[str]:
    """Every sandbox path the cassette names: its ``files`` and its timeline's paths."""
    return list(dict.fromkeys([*cas.expect.files, *(op.path for op in cas.timeline)]))


def sandbox_file(cas: Cassette, filename: str) -> str | None:
    """The sandbox path (``root/...``) of an artifact's file name, if the cassette has it."""
    return next((rel for rel in sandbox_files(cas) if Path(rel).name == filename), None)


def check_capture(cap: Capture, cas: Cassette, base: Path, baseline: list[str]) -> None:
    exp = cas.expect
    check_no_leak(cap, never_strings(cas, base))
    if cap.status != exp.http_status:
        raise CheckFailed(
            f"HTTP {cap.status}, expected {exp.http_status}",
            cap.body[:200].decode("utf-8", "replace"),
        )
    if cap.status != 200:
        if exp.error_code and cap.error_code != exp.error_code:
            raise CheckFailed(f"error code {cap.error_code!r}, expected {exp.error_code!r}")
        return
    if exp.error_code != cap.error_code:
        raise CheckFailed(f"terminal error {cap.error_code!r}, expected {exp.error_code!r}")
    shown = placeholders(cap.text, cap.manifest, cas, base)
    args = [placeholders("".join(v), cap.manifest, cas, base) for v in cap.tool_args.values()]
    seen = "\x00".join([shown, *args, *cap.named])
    if not baseline:
        baseline.append(seen)
    elif seen != baseline[0]:
        raise CheckFailed("chunking changed the assembled output", _diff(baseline[0], seen))
    if exp.text is not None and shown != exp.text:
        raise CheckFailed("assembled text differs from the expectation", _diff(exp.text, shown))
    if exp.tool_arguments is not None and args != exp.tool_arguments:
        raise CheckFailed(
            "tool-call arguments differ from the expectation",
            _diff("\n".join(exp.tool_arguments), "\n".join(args)),
        )
    if exp.named_events is not None and cap.named != exp.named_events:
        raise CheckFailed(f"named events relayed {cap.named}, expected {exp.named_events}")
    for p in exp.names_only:
        name = re.split(r"[/\\]+", p.rstrip("/\\"))[-1]
        if name not in cap.text:
            raise CheckFailed(f"{name!r} (name of a names_only path) missing from the text")
    if exp.artifacts is not None:
        got = sorted(
            sandbox_file(cas, a["filename"]) or a["filename"]
            for a in (cap.manifest or {}).get("artifacts", [])
        )
        if got != sorted(exp.artifacts):
            raise CheckFailed(f"manifest links {got}, expected {sorted(exp.artifacts)}")
    manifest_ids = {a["id"] for a in (cap.manifest or {}).get("artifacts", [])}
    # every link in the stream is in the manifest; the manifest may hold more: the
    # files the agent reported writing that the text never named (expect.artifacts)
    if exp.error_code is None and not cap.link_ids <= manifest_ids:
        raise CheckFailed(
            f"links in the stream {sorted(cap.link_ids - manifest_ids)} not in the manifest"
        )
    if exp.error_code is None and exp.artifacts is None and cap.link_ids != manifest_ids:
        raise CheckFailed(
            f"the manifest's {sorted(manifest_ids - cap.link_ids)} are no link in the stream"
        )
    want_mode = (
        exp.link_mode
        if exp.link_mode is not None and exp.mode_via != "default"
        else exp.default_link_mode
    )
    for m in LINK_RE.finditer(cap.text):
        public = m.group(2) is not None
        if public != (want_mode == "public"):
            raise CheckFailed(
                f"link mode {'public' if public else 'private'}, asked {want_mode}", m.group(0)
            )
    if cap.manifest is not None and cap.manifest.get("download_link_mode") != want_mode:
        raise CheckFailed(
            f"manifest mode {cap.manifest.get('download_link_mode')}, asked {want_mode}"
        )
    for art in (cap.manifest or {}).get("artifacts", []):
        if art.get("link_mode") != want_mode:
            raise CheckFailed(
                f"{art.get('filename')!r} minted {art.get('link_mode')}, asked {want_mode}"
            )


def _diff(a: str, b: str) -> str:
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
    return f"at {i}: expected {a[max(0, i - 30) : i + 40]!r}, got {b[max(0, i - 30) : i + 40]!r}"


async def check_links(rep: Replayer, client: httpx.AsyncClient, cap: Capture) -> None:
    exp = rep.cas.expect
    owner = exp.principal
    other = "bob" if owner == "alice" else "alice"
    for art in (cap.manifest or {}).get("artifacts", []):
        path = art["url"][len(PUBLIC_BASE) :]
        url = rep.gateway_url + path
        rel = sandbox_file(rep.cas, art["filename"])
        local = rep.base / rel if rel is not None else None
        if exp.front == "proxy" or exp.mode_via == "header":
            own = {
                "Authorization": f"Bearer {KEYS['proxy']}",
                "X-Gateway-Owner": "openwebui:" + OWUI_USER[owner],
            }
            oth = {
                "Authorization": f"Bearer {KEYS['proxy']}",
                "X-Gateway-Owner": "openwebui:" + OWUI_USER[other],
            }
        else:
            own = {"Authorization": f"Bearer {KEYS[owner]}"}
            oth = {"Authorization": f"Bearer {KEYS[other]}"}
        if art["link_mode"] == "private":
            r = await client.get(url, headers=own)
            if r.status_code != 200:
                raise CheckFailed(f"owner download of {art['filename']} gave HTTP {r.status_code}")
            if local is not None and r.content != local.read_bytes():
                raise CheckFailed(f"download of {art['filename']} is not byte-identical")
            r = await client.get(url, headers=oth)
            if r.status_code != 404:
                raise CheckFailed(f"another principal got HTTP {r.status_code} for a private link")
        else:
            r = await client.get(url)
            if r.status_code != 200:
                raise CheckFailed(f"public download of {art['filename']} gave HTTP {r.status_code}")
            if local is not None and r.content != local.read_bytes():
                raise CheckFailed(f"download of {art['filename']} is not byte-identical")
            bad = url[:-1] + ("A" if url[-1] != "A" else "B")
            r = await client.get(bad)
            if r.status_code != 404:
                raise CheckFailed(f"a tampered public link gave HTTP {r.status_code}")


def check_sdk(rep: Replayer) -> None:
    """Parse the stream with the openai SDK (sync client; runs in a worker thread)."""
    import openai

    exp = rep.cas.expect
    req = rep.cas.request_body
    model = req.get("model") or "replay"
    messages = req.get("messages") or [{"role": "user", "content": "replay"}]
    if exp.front == "runs":
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        if exp.front == "proxy":
            client = openai.OpenAI(
                base_url=rep.proxy_url + "/v1",
                api_key=CLIENT_KEY,
                default_headers={"X-OpenWebUI-User-Id": OWUI_USER[exp.principal]},
                max_retries=0,
            )
        else:
            client = openai.OpenAI(
                base_url=rep.gateway_url + "/v1", api_key=KEYS[exp.principal], max_retries=0
            )
        extra: dict[str, Any] = {}
        if exp.link_mode is not None and exp.mode_via in ("body",):
            extra["download_link_mode"] = exp.link_mode
        try:
            with client:
                if exp.front == "responses":
                    stream = client.responses.create(
                        model=model,
                        input=str(messages[-1].get("content") or "x"),
                        stream=True,
                        extra_body=extra,
                    )
                    for _ in stream:
                        pass
                else:
                    stream2 = client.chat.completions.create(
                        model=model, messages=messages, stream=True, extra_body=extra
                    )
                    for _ in stream2:
                        pass
        except openai.APIError as exc:
            if exp.error_code is None and exp.http_status == 200:
                raise CheckFailed(f"the openai SDK raised {type(exc).__name__}: {exc}") from None


# -- the run ---------------------------------------------------------------------------


async def replay_cassette(
    cas: Cassette,
    strategies: list[str],
    *,
    seed: int = 0,
    ci: bool = False,
    rewrite: bool = True,
    sdk: bool = True,
    on_progress: Callable[[str], None] | None = None,
) -> list[Outcome]:
    """Replay one cassette once per chunking of every strategy; one Outcome each.

    ``ci`` selects the CI profile of every-split (see :mod:`harness.strategies`).

    A strategy stops at its first failing replay. Links and the SDK parse are
    checked once, after every strategy passed.
    """
    base = Path(tempfile.mkdtemp(prefix=f"harness-{cas.name}-"))
    outcomes: list[Outcome] = []
    try:
        rep = Replayer(cas, base, rewrite=rewrite)
        opts = (
            Options.ci(seed, rep.extra_roots) if ci else Options(seed, extra_roots=rep.extra_roots)
        )
        async with trio.open_nursery() as nursery:
            await rep.start(nursery)
            async with httpx.AsyncClient(timeout=httpx.Timeout(10, read=30)) as client:
                baseline: list[str] = []
                first: Capture | None = None
                last: Capture | None = None  # with a timeline: the sandbox is as it left it
                for name in strategies:
                    out = Outcome(cas.name, name)
                    t0 = time.perf_counter()
                    try:
                        for chunking in STRATEGIES[name](cas.body, opts):
                            lock: list[bool] | None = [] if name == "per-event" else None
                            cap = await rep.replay(client, chunking, lockstep=lock)
                            out.replays += 1
                            check_capture(cap, cas, base, baseline)
                            if lock is not None and not all(lock):
                                raise CheckFailed(
                                    "ordinary text was held until a later upstream chunk"
                                )
                            if first is None:
                                first = cap
                            last = cap
                    except CheckFailed as exc:
                        out.failure = str(exc)
                        out.event = exc.event
                    except (
                        httpx.HTTPError,
                        ValueError,
                        KeyError,
                        TypeError,
                        AttributeError,
                    ) as exc:
                        # malformed output or a broken connection: a failure, not a crash
                        out.failure = f"{type(exc).__name__}: {exc}"
                    out.seconds = time.perf_counter() - t0
                    outcomes.append(out)
                    if on_progress is not None:
                        on_progress(f"{cas.name} {name}")
                if first is not None and first.status == 200 and all(o.ok for o in outcomes):
                    links = Outcome(cas.name, "links")
                    t0 = time.perf_counter()
                    try:
                        await check_links(
                            rep, client, last if cas.timeline and last is not None else first
                        )
                        links.replays = 1
                        if sdk:
                            await trio.to_thread.run_sync(check_sdk, rep)
                    except CheckFailed as exc:
                        links.failure = str(exc)
                        links.event = exc.event
                    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
                        links.failure = f"{type(exc).__name__}: {exc}"
                    links.seconds = time.perf_counter() - t0
                    outcomes.append(links)
            nursery.cancel_scope.cancel()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return outcomes


def table(outcomes: list[Outcome]) -> str:
    rows = [("cassette", "strategy", "replays", "verdict", "first failing event")]
    for o in outcomes:
        verdict = "ok" if o.ok else f"FAIL: {o.failure}"
        rows.append((o.cassette, o.strategy, str(o.replays), verdict[:90], (o.event or "")[:80]))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = []
    for r in rows:
        lines.append(
            "  ".join(r[i].ljust(widths[i]) for i in range(4)) + ("  " + r[4] if r[4] else "")
        )
    return "\n".join(lines)


def progress_printer(total: int) -> Callable[[str], None]:
    done = [0]

    def tick(label: str) -> None:
        done[0] += 1
        width = 30
        filled = width * done[0] // max(1, total)
        sys.stderr.write(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {done[0]}/{total} {label[:50]:<50}"
        )
        sys.stderr.flush()
        if done[0] == total:
            sys.stderr.write("\n")

    return tick
