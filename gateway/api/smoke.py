"""``gateway smoke``: prove streaming and managed downloads work, without the upstream.

After a restart the operator wants to know that the *gateway* works -- relay,
rewriter, link minting, download -- whether or not the model server is up. The
gateway therefore has a built-in self-test route, ``POST /v1/selftest`` (any valid
key; body ``{"nonce": "<32 hex>", "download_link_mode"?: "private"|"public"}``):

1. it writes ``<first artifact root>/.gateway-selftest/artifact-gateway-selftest-<nonce>.txt``
   whose content is :func:`selftest_content` (so the client knows what to expect);
2. it plays a scripted upstream SSE body (:func:`selftest_script`) that mentions that
   file's absolute path -- cut across deltas and across body chunks, once in prose and
   once in a code span -- and a path outside the roots, as an in-process source
   (no transport, no network, no test harness);
3. that source goes through the real relay, pipeline, resolver (minting a real link
   for the caller) and chat front: the client gets exactly what a chat client gets.

The client half (:func:`run_smoke`) checks ``/health``, ``/health/ready``, then per
link mode: the stream parses (one-line JSON ``data``, terminal chunk with
``finish_reason: "stop"`` and the manifest, ``[DONE]``), no host-local path anywhere in
the body, the file became ``[name](url)`` matching the manifest, the outside path
became its name; then it downloads the link and compares the bytes, and checks that
the link is refused without the owner's key (private) or with a tampered signature
(public).

The route itself is :mod:`gateway.api.routes.selftest`; this module holds the scripted
body and the client half, and imports no app code.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import trio

from gateway.core.paths import Found, Overlong, PathDetector
from gateway.core.sse import DONE, SSEDecoder, encode_json

__all__ = [
    "SELFTEST_DIR",
    "SELFTEST_ROUTE",
    "Check",
    "SmokeReport",
    "check_selftest_stream",
    "find_host_paths",
    "run_smoke",
    "scripted_chunks",
    "selftest_content",
    "selftest_file_name",
    "selftest_script",
    "write_selftest_file",
]

SELFTEST_ROUTE = "/v1/selftest"
SELFTEST_DIR = ".gateway-selftest"
#: self-test files older than this are deleted when a new self-test runs
SELFTEST_KEEP_SECONDS = 3600.0
_NONCE = re.compile(r"[0-9a-f]{16,64}")


# --------------------------------------------------------------------------- server half


def selftest_file_name(nonce: str) -> str:
    return f"artifact-gateway-selftest-{nonce}.txt"


def missing_name(nonce: str) -> str:
    return f"artifact-gateway-selftest-{nonce}-missing.conf"


def selftest_content(nonce: str) -> bytes:
    return f"artifact gateway self-test\nnonce: {nonce}\n".encode()


def valid_nonce(value: object) -> str | None:
    return value if isinstance(value, str) and _NONCE.fullmatch(value) else None


def write_selftest_file(root: Path, nonce: str) -> Path:
    """Write the self-test file under ``root`` (blocking); prune old ones.

    Nothing here follows a symlink: ``root`` must be its own real path, the folder is
    opened with ``O_NOFOLLOW`` and every name in it is created, read and removed
    relative to that open folder (the agent can make links in a principal's folder: a
    link named like the test file, or the test folder itself, would otherwise make the
    gateway write or delete wherever it points). OSError when it cannot be done so."""
    if valid_nonce(nonce) is None:
        raise ValueError("invalid nonce")
    root = Path(root)
    if os.path.realpath(root) != str(root):
        raise OSError(f"the artifact root is reached through a link: {root.name}")
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder = root / SELFTEST_DIR
    with contextlib.suppress(FileExistsError):
        os.mkdir(folder, 0o700)
    dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        opened, there = os.fstat(dfd), os.stat(folder, follow_symlinks=False)
        if (opened.st_dev, opened.st_ino) != (there.st_dev, there.st_ino) or os.path.realpath(
            folder
        ) != str(folder):
            raise OSError("the self-test folder moved while it was opened")
        _prune_selftests(dfd)
        name = selftest_file_name(nonce)
        tmp = f"{name}.{secrets.token_hex(8)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o600, dir_fd=dfd)
        try:
            os.write(fd, selftest_content(nonce))
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)  # replaces a link, never follows
    finally:
        os.close(dfd)
    return folder / name


def _prune_selftests(dfd: int) -> None:
    """Remove the test folder's files older than :data:`SELFTEST_KEEP_SECONDS` (its own
    names only; a link is removed as a link)."""
    cutoff = time.time() - SELFTEST_KEEP_SECONDS
    for entry in os.scandir(dfd):
        if not entry.name.startswith("artifact-gateway-selftest-"):
            continue
        try:
            if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                os.unlink(entry.name, dir_fd=dfd)
        except OSError:
            pass


def selftest_script(path: str, nonce: str) -> list[bytes]:
    """The scripted upstream body, as the chunks it is "received" in.

    Chunk boundaries fall inside the ``data`` field name, inside the file's path,
    inside a multi-byte UTF-8 character and between events.
    """
    cid = f"chatcmpl-selftest-{nonce[:12]}"

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return encode_json(
            {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": "gateway-selftest",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
        )

    cut = max(2, len(path) // 2)
    events = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": f"Gateway self-test {nonce}: streaming works \u2713\n"}),
        chunk({"content": "The test file is at " + path[:cut]}),
        chunk({"content": path[cut:] + ".\n"}),
        chunk({"content": f"The same file in a code span: `{path}`.\n"}),
        chunk(
            {
                "content": f"Outside the artifact roots only a name is left: /etc/{missing_name(nonce)}\n"
            }
        ),
        chunk({}, "stop"),
        DONE,
    ]
    pieces: list[bytes] = []
    for i, ev in enumerate(events):
        if i == 1:  # inside the UTF-8 encoding of the check mark
            at = ev.index("\u2713".encode()) + 1
        elif i == 2:  # inside the field name: "da" | "ta: ..."
            at = 2
        elif i == 3:  # inside the JSON string that continues the path
            at = ev.index(b'"content":"') + len(b'"content":"') + 3
        else:
            pieces.append(ev)
            continue
        pieces += [ev[:at], ev[at:]]
    return pieces


async def scripted_chunks(pieces: Sequence[bytes]) -> AsyncIterator[bytes]:
    """The self-test body as an async byte iterator (one checkpoint per piece)."""
    for piece in pieces:
        await trio.lowlevel.checkpoint()
        yield piece


# --------------------------------------------------------------------------- client half


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str = ""


@dataclass
class SmokeReport:
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    def add(self, name: str, ok: bool, detail: str = "") -> bool:
        self.checks.append(Check(name, ok, detail))
        return ok


def find_host_paths(text: str) -> list[str]:
    """Every host-local path the gateway's own detector sees in ``text``."""
    detector = PathDetector()
    found: list[str] = []
    pos = 0
    while pos < len(text):
        res = detector.scan(text, pos, True)
        if isinstance(res, Found):
            found.append(text[res.start : res.end])
            pos = max(res.end, res.start + 1)
        elif isinstance(res, Overlong):
            found.append(text[res.start : res.start + 80] + "...")
            break
        else:
            break
    return found


def check_selftest_stream(
    raw: bytes, nonce: str, mode: str
) -> tuple[list[Check], dict[str, Any] | None]:
    """Check one self-test stream; return the checks and the manifest's artifact."""
    checks: list[Check] = []

    def add(name: str, ok: bool, detail: str = "") -> bool:
        checks.append(Check(name, ok, detail))
        return ok

    parsed = _parse_stream(raw, add)
    if parsed is None:
        return checks, None
    body, chunks = parsed
    terminal = chunks[-1]
    err = terminal.get("error")
    if err:
        code = err.get("code") if isinstance(err, dict) else err
        add("stream finished without error", False, f"error {code}")
        return checks, None
    choices = terminal.get("choices") or [{}]
    add(
        "terminal chunk has finish_reason stop",
        choices[0].get("finish_reason") == "stop",
        str(choices[0].get("finish_reason")),
    )
    text = "".join(
        str(c.get("choices", [{}])[0].get("delta", {}).get("content") or "")
        for c in chunks
        if c.get("choices")
    )
    add("streamed text arrived", f"Gateway self-test {nonce}: streaming works" in text)
    leaks = find_host_paths(body)
    if SELFTEST_DIR in body:
        leaks.append(f"...{SELFTEST_DIR}/...")
    add("no host-local path in the stream", not leaks, ", ".join(leaks)[:200])
    manifest = terminal.get("gateway")
    if not add("terminal chunk carries the manifest", isinstance(manifest, dict)):
        return checks, None
    assert isinstance(manifest, dict)
    return checks, _check_manifest(manifest, text, nonce, mode, add)


def _parse_stream(raw: bytes, add: Callable[..., bool]) -> tuple[str, list[dict[str, Any]]] | None:
    """The body as text and its JSON chunks (at least one), or None after a failed check."""
    try:
        body = raw.decode("utf-8")
    except UnicodeDecodeError:
        add("stream is UTF-8", False, "the body is not valid UTF-8")
        return None
    events = SSEDecoder().feed(raw)
    if not add("stream ends with [DONE]", bool(events) and events[-1].data == "[DONE]"):
        return None
    chunks: list[dict[str, Any]] = []
    for ev in events[:-1]:
        try:
            obj = json.loads(ev.data)
        except ValueError:
            add("every data line is JSON", False, ev.data[:80])
            return None
        if isinstance(obj, dict):
            chunks.append(obj)
    add("every data line is JSON", True, f"{len(chunks)} chunks")
    if not chunks:
        add("terminal chunk", False, "no chunk before [DONE]")
        return None
    return body, chunks


def _check_manifest(
    manifest: dict[str, Any], text: str, nonce: str, mode: str, add: Callable[..., bool]
) -> dict[str, Any] | None:
    """The manifest and the link in the text; the self-test file's artifact if listed."""
    add(
        f"manifest link mode is {mode}",
        manifest.get("download_link_mode") == mode,
        str(manifest.get("download_link_mode")),
    )
    arts = manifest.get("artifacts") or []
    name = selftest_file_name(nonce)
    mine = [a for a in arts if isinstance(a, dict) and a.get("filename") == name]
    if not add(
        "manifest lists the self-test file once", len(mine) == 1, f"{len(arts)} artifact(s)"
    ):
        return None
    art: dict[str, Any] = mine[0]
    url = str(art.get("url", ""))
    add(
        "manifest size matches",
        art.get("bytes") == len(selftest_content(nonce)),
        str(art.get("bytes")),
    )
    add("path became a markdown link", f"[{name}]({url})" in text, url)
    add("path in a code span became a link with its name", f"[`{name}`]({url})" in text)
    add("outside path became its file name", missing_name(nonce) in text and "/etc/" not in text)
    signed = "sig=" in url and "exp=" in url
    add(
        f"link is {mode}",
        signed if mode == "public" else not signed,
        "signed" if signed else "unsigned",
    )
    return art


def _tamper(url: str) -> str:
    parts = urlsplit(url)
    query = re.sub(r"sig=([^&]*)", lambda m: "sig=" + ("A" * len(m.group(1))), parts.query)
    return urlunsplit(parts._replace(query=query))


#: what ``gateway smoke`` says when pointed at the runs proxy instead of the API server
PROXY_HINT = (
    "this is the Open WebUI runs proxy (its /health has a 'gateway' field), not the API "
    "server: gateway smoke tests the API server, so pass the gateway's URL instead (the "
    "proxy's proxy.gateway_url, by default http://127.0.0.1:8642) and one of its "
    "[[auth.keys]]"
)

_Add = Callable[[str, bool, str], bool]


def run_smoke(
    base_url: str,
    key: str,
    *,
    modes: Sequence[str] = ("private", "public"),
    timeout: float = 10.0,
    transport: httpx.BaseTransport | None = None,
    say: Callable[[Check], None] | None = None,
) -> SmokeReport:
    """Run every check against a live gateway; see the module docstring."""
    report = SmokeReport()
    base = base_url.rstrip("/")

    def add(name: str, ok: bool, detail: str = "") -> bool:
        report.add(name, ok, detail)
        if say is not None:
            say(report.checks[-1])
        return ok

    auth = {"Authorization": f"Bearer {key}"}
    with httpx.Client(timeout=httpx.Timeout(timeout), transport=transport) as client:
        if not _check_health(client, base, add):
            return report
        for mode in modes:
            nonce = secrets.token_hex(16)
            url = _check_selftest(client, base, auth, mode, nonce, add)
            if url is not None:
                _check_download(client, url, auth, mode, nonce, add)
    return report


def _check_health(client: httpx.Client, base: str, add: _Add) -> bool:
    """``/health`` and ``/health/ready``; False when there is no point going on."""
    try:
        r = client.get(f"{base}/health")
    except httpx.HTTPError as exc:
        return add("GET /health", False, f"{type(exc).__name__}: {exc}")
    body = _json_object(r)
    if "gateway" in body:
        return add("GET /health answers as the API server", False, PROXY_HINT)
    add("GET /health", r.status_code == 200, f"HTTP {r.status_code} {r.text.strip()[:80]}")
    try:
        r = client.get(f"{base}/health/ready")
        ready = _json_object(r)
        draining = bool(ready.get("checks", {}).get("draining"))
        add(
            "GET /health/ready (not draining)",
            not draining,
            f"HTTP {r.status_code} checks={ready.get('checks')}"
            + ("" if r.status_code == 200 else " (the self-test does not need the upstream)"),
        )
    except httpx.HTTPError as exc:
        add("GET /health/ready", False, f"{type(exc).__name__}: {exc}")
    return True


def _json_object(resp: httpx.Response) -> dict[str, Any]:
    if not resp.headers.get("content-type", "").startswith("application/json"):
        return {}
    try:
        value = resp.json()
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _check_selftest(
    client: httpx.Client, base: str, auth: dict[str, str], mode: str, nonce: str, add: _Add
) -> str | None:
    """The self-test stream in ``mode``; the minted link's URL when all went well."""
    try:
        with client.stream(
            "POST",
            f"{base}{SELFTEST_ROUTE}",
            json={"nonce": nonce, "download_link_mode": mode},
            headers=auth,
        ) as resp:
            raw = resp.read()
    except httpx.HTTPError as exc:
        add(f"[{mode}] POST {SELFTEST_ROUTE}", False, f"{type(exc).__name__}: {exc}")
        return None
    hint = {
        401: "the key was refused",
        404: "this gateway has no self-test route (an older version?)",
    }.get(resp.status_code, raw.decode(errors="replace")[:120])
    if not add(
        f"[{mode}] POST {SELFTEST_ROUTE} streams",
        resp.status_code == 200
        and resp.headers.get("content-type", "").startswith("text/event-stream"),
        f"HTTP {resp.status_code}" + ("" if resp.status_code == 200 else f": {hint}"),
    ):
        return None
    checks, art = check_selftest_stream(raw, nonce, mode)
    for c in checks:
        add(f"[{mode}] {c.name}", c.ok, c.detail)
    return None if art is None else str(art["url"])


def _check_download(
    client: httpx.Client, url: str, auth: dict[str, str], mode: str, nonce: str, add: _Add
) -> None:
    try:
        got = client.get(url, headers=auth if mode == "private" else {})
        add(
            f"[{mode}] download returns the file's bytes",
            got.status_code == 200 and got.content == selftest_content(nonce),
            f"HTTP {got.status_code}, {len(got.content)} bytes",
        )
        add(
            f"[{mode}] download headers",
            got.headers.get("content-disposition", "").startswith("attachment")
            and got.headers.get("x-content-type-options") == "nosniff",
            got.headers.get("content-disposition", "-"),
        )
        if mode == "private":
            anon = client.get(url)
            add(
                "[private] link refused without the owner's key",
                anon.status_code in (401, 403, 404),
                f"HTTP {anon.status_code}",
            )
        else:
            bad = client.get(_tamper(url))
            add(
                "[public] tampered signature refused",
                bad.status_code in (403, 404),
                f"HTTP {bad.status_code}",
            )
    except httpx.HTTPError as exc:
        add(f"[{mode}] download", False, f"{type(exc).__name__}: {exc}")
