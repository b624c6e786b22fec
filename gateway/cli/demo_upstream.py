"""Demo upstream: a scripted OpenAI-compatible streaming server, no LLM needed.

It plays the part of the agent backend ("upstream") so that a newcomer sees the
gateway working end to end, and so that end-to-end tests have a real HTTP upstream
with scripted misbehaviour. On creation the app writes real files under the artifact
root (``report.pdf``, ``plot.png``, ``data/results.csv``, ``résumé 2026.txt``) and one
file outside it (``draft-notes.txt``); its answers mention their absolute paths, which
the gateway must turn into links (root) or bare file names (outside).

Routes: ``GET /v1/models``, ``GET /v1/models/<id>``, ``POST /v1/chat/completions``
(``stream`` true or false; ``stream_options.include_usage`` adds a usage chunk).

Scenarios, chosen by the request's ``model``:

``demo``
    A friendly answer naming the root files in prose, in a code span, as a markdown
    link target, plus the outside file and ``C:\\Users\\demo\\Desktop\\plot.png``.
    Several paths are cut between deltas (``/tm`` | ``p/…``, ``C:`` | ``\\Users…``)
    and one delta's bytes are split across two body writes inside the UTF-8 encoding
    of ``é``. Also one ``event: hermes.tool.progress`` event (JSON with a ``message``
    naming a root path) and one ``write_file`` tool call whose ``arguments`` JSON is
    streamed in pieces (cut inside a path and inside JSON escapes), then a chunk with
    ``tool_calls: null`` (the None sentinel). Ends with ``finish_reason: "stop"``.
``demo-fail``
    A few deltas, the last one ending in the middle of a path, then the connection is
    cut: no final chunk, no ``[DONE]``, no terminating HTTP chunk (the client sees a
    truncated body, e.g. ``httpx.RemoteProtocolError``). Body field
    ``demo_fail_partial: true`` also writes half of one more SSE event before the cut.
``demo-quiet``
    One delta, then silence for ``demo_quiet_seconds`` (default 2.0), then a normal
    end. ``demo_keepalive`` (seconds, default 0 = never) makes the upstream itself
    send ``: keepalive`` comments during the silence.
``demo-long``
    ``demo_events`` (default 200) deltas of ordinary text without any path (see
    :func:`demo_long_delta`), ``demo_batch`` (default 1) events per body write.
``demo-image``
    A short answer that shows ``plot.png`` as a markdown image (``![the chart](path)``),
    so a front end has an ``<img>`` to load from the gateway.
``demo-error`` / ``demo-429``
    HTTP 500 with an OpenAI-style error body / HTTP 429 with ``Retry-After``
    (``demo_retry_after`` seconds, default 1).

A non-streamed request whose last message begins with ``### Task:`` (Open WebUI's
titles, tags and follow-ups) is answered, for ``demo`` and ``demo-image``, like a model
would: one JSON object with ``title``, ``tags`` and ``follow_ups`` (each parser takes its
key), naming every root file by its path, so a test sees what such a task would show.

Unknown models get 404 ``model_not_found``. Every scenario waits ``chunk_delay``
seconds between body writes; body field ``demo_delay`` overrides it (0 allowed).
Body fields may also be given as query parameters (the body wins).

For tests, the app records what it received and how its bodies ended:
``demo_log`` (one dict per ``/v1`` request: ``method``, ``path``, ``body``,
``headers`` (lower-cased names), ``authorization``, ``principal``, ``time``),
``demo_streams_open``, ``demo_streams_completed``, ``demo_aborts`` (bodies cut on
purpose), ``demo_disconnects`` and ``demo_disconnect_times`` (bodies that stopped
because the client went away; :func:`time.monotonic` stamps).

Run it alone with ``python -m gateway.cli.demo_upstream --port 9000 --root DIR``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import struct
import sys
import tempfile
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Final

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve
from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, Scope
from quart import Response, request
from quart_trio import QuartTrio

from gateway.core.sse import DONE, encode_comment, encode_json

__all__ = [
    "MODELS",
    "WINDOWS_PATH",
    "DemoFiles",
    "DemoUpstreamApp",
    "create_demo_upstream_app",
    "demo_long_delta",
    "is_task_request",
    "main",
    "run_demo_upstream",
    "serve_demo_upstream",
    "write_demo_files",
]

MODELS: Final[tuple[str, ...]] = (
    "demo",
    "demo-fail",
    "demo-quiet",
    "demo-long",
    "demo-image",
    "demo-error",
    "demo-429",
)
"""Every scenario, as listed by ``GET /v1/models``."""

WINDOWS_PATH: Final = r"C:\Users\demo\Desktop\plot.png"
"""The Windows path the ``demo`` answer mentions (it never exists on this host)."""

_WINDOWS_CSV: Final = r"C:\Users\demo\Desktop\results.csv"
_TOOL_CALL_ID: Final = "call_demo_write_file"
_LONG_WORDS: Final = ("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog")
_MAX_EVENTS: Final = 10_000_000
_MAX_SECONDS: Final = 3600.0
_SSE_HEADERS: Final = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


# --------------------------------------------------------------------------- files


@dataclass(frozen=True, slots=True)
class DemoFiles:
    """The files the demo answers mention (absolute paths)."""

    root: Path
    report_pdf: Path
    plot_png: Path
    results_csv: Path
    resume_txt: Path
    outside_txt: Path

    @property
    def in_root(self) -> tuple[Path, ...]:
        """The files under the artifact root, the ones that should become links."""
        return (self.report_pdf, self.plot_png, self.results_csv, self.resume_txt)


def _tiny_pdf() -> bytes:
    """A one-page PDF with a correct cross-reference table."""
    content = b"BT /F1 18 Tf 20 45 Td (Demo report) Tj ET"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 100] /Contents 4 0 R"
        b" /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def _tiny_png() -> bytes:
    """A real 4x4 RGB PNG (a small gradient)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    width = height = 4
    rows = b"".join(
        b"\x00" + b"".join(bytes((x * 60, y * 60, 200)) for x in range(width))
        for y in range(height)
    )
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def write_demo_files(artifact_root: Path, outside_dir: Path) -> DemoFiles:
    """Write (or rewrite) the demo files and return their absolute paths."""
    root = artifact_root.expanduser().absolute()
    outside = outside_dir.expanduser().absolute()
    files = DemoFiles(
        root=root,
        report_pdf=root / "report.pdf",
        plot_png=root / "plot.png",
        results_csv=root / "data" / "results.csv",
        resume_txt=root / "r\u00e9sum\u00e9 2026.txt",
        outside_txt=outside / "draft-notes.txt",
    )
    files.results_csv.parent.mkdir(parents=True, exist_ok=True)
    outside.mkdir(parents=True, exist_ok=True)
    files.report_pdf.write_bytes(_tiny_pdf())
    files.plot_png.write_bytes(_tiny_png())
    files.results_csv.write_text("run,score\n1,0.91\n2,0.87\n3,0.95\n", encoding="utf-8")
    files.resume_txt.write_text("Résumé (demo)\nSkills: streaming, trio\n", encoding="utf-8")
    files.outside_txt.write_text("An older draft, outside the artifact root.\n", encoding="utf-8")
    return files


# --------------------------------------------------------------------------- scripts


def demo_long_delta(index: int) -> str:
    """The content of delta ``index`` of ``demo-long``: plain words, never a path start."""
    return f"{_LONG_WORDS[index % len(_LONG_WORDS)]}-{index} "


@dataclass(frozen=True, slots=True)
class _Step:
    """One body write: wait ``pause`` seconds, then write ``data`` (or cut the line)."""

    data: bytes = b""
    pause: float = 0.0
    abort: bool = False


class _UpstreamAbort(Exception):
    """Raised by a body on purpose; :meth:`DemoUpstreamApp.asgi_app` swallows it so the
    connection closes without the terminating chunk and without a logged traceback."""


class _BadParameter(Exception):
    pass


@dataclass(frozen=True, slots=True)
class _Params:
    delay: float
    quiet_seconds: float
    keepalive: float
    events: int
    batch: int
    fail_partial: bool
    retry_after: int
    include_usage: bool

    @classmethod
    def parse(
        cls, body: Mapping[str, Any], args: Mapping[str, str], default_delay: float
    ) -> _Params:
        def raw(name: str) -> Any:
            return body[name] if name in body else args.get(name)

        def number(name: str, default: float) -> float:
            value = raw(name)
            if value is None:
                return default
            try:
                result = float(value)
            except (TypeError, ValueError):
                raise _BadParameter(f"{name} must be a number of seconds.") from None
            if not 0.0 <= result <= _MAX_SECONDS:
                raise _BadParameter(f"{name} must be between 0 and {_MAX_SECONDS:g}.")
            return result

        def integer(name: str, default: int, minimum: int) -> int:
            value = raw(name)
            if value is None:
                return default
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise _BadParameter(f"{name} must be an integer.")
            try:
                result = int(value)
            except (TypeError, ValueError):
                raise _BadParameter(f"{name} must be an integer.") from None
            if not minimum <= result <= _MAX_EVENTS:
                raise _BadParameter(f"{name} must be between {minimum} and {_MAX_EVENTS}.")
            return result

        def flag(name: str) -> bool:
            value = raw(name)
            if isinstance(value, str):
                return value.lower() in {"1", "true", "yes", "on"}
            return bool(value)

        options = body.get("stream_options")
        return cls(
            delay=number("demo_delay", default_delay),
            quiet_seconds=number("demo_quiet_seconds", 2.0),
            keepalive=number("demo_keepalive", 0.0),
            events=integer("demo_events", 200, 0),
            batch=integer("demo_batch", 1, 1),
            fail_partial=flag("demo_fail_partial"),
            retry_after=integer("demo_retry_after", 1, 0),
            include_usage=isinstance(options, dict) and options.get("include_usage") is True,
        )


class _Chunks:
    """Builds the ``chat.completion.chunk`` objects of one response."""

    def __init__(self, model: str, completion_id: str) -> None:
        self.model = model
        self.id = completion_id
        self.created = int(time.time())

    def chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }

    def content(self, text: str) -> bytes:
        return encode_json(self.chunk({"content": text}))

    def usage(self, usage: dict[str, int]) -> bytes:
        return encode_json(
            {
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": usage,
            }
        )


def _usage(body: Mapping[str, Any], completion_text: str) -> dict[str, int]:
    prompt = json.dumps(body.get("messages", []), ensure_ascii=False)
    prompt_tokens = max(1, len(prompt) // 4)
    completion_tokens = max(1, len(completion_text) // 4)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


@dataclass(frozen=True, slots=True)
class _DemoAnswer:
    """The ``demo`` scenario's script, shared by the streaming and plain responses."""

    intro: str
    deltas: tuple[str, ...]
    byte_split_index: int  # which delta is written as two body writes, cut inside "é"
    progress: dict[str, Any]
    arguments: str
    argument_pieces: tuple[str, ...]

    @property
    def text(self) -> str:
        return self.intro + "".join(self.deltas)

    @classmethod
    def build(cls, files: DemoFiles) -> _DemoAnswer:
        pdf, png, csv = str(files.report_pdf), str(files.plot_png), str(files.results_csv)
        txt, outside = str(files.resume_txt), str(files.outside_txt)
        resume_cut = txt.rindex("r\u00e9sum\u00e9") + 1  # "…/r" | "ésumé 2026.txt"
        deltas = (
            "- The full report is at " + pdf[:3],
            pdf[3:] + ".\n",
            "- Raw numbers live in " + csv[: len(csv) // 2],
            csv[len(csv) // 2 :] + ", one row per run.\n",
            "- Here is [the chart](" + png[:-4],
            png[-4:] + ") for a quick look.\n",
            "- Your CV is saved as `" + txt[:resume_cut],
            txt[resume_cut:] + "` (mind the space in its name).\n",
            "- An older draft is still at " + outside + " but that folder is not shared.\n",
            "- On the Windows laptop the chart was also copied to C:",
            WINDOWS_PATH[2:] + " for the slides.\n\n",
            "Anything else you would like me to change?",
        )
        arguments = json.dumps(
            {"path": csv, "content": "run,score\n1,0.91\n", "mirror": _WINDOWS_CSV},
            ensure_ascii=False,
        )
        cuts = sorted(
            {
                arguments.index(csv) + 5,  # inside the path
                arguments.index("\\n") + 1,  # between "\" and "n"
                arguments.index("\\\\") + 1,  # between the two backslashes of "\\"
            }
        )
        pieces = tuple(
            arguments[start:end]
            for start, end in zip([0, *cuts], [*cuts, len(arguments)], strict=True)
        )
        return cls(
            intro="Sure! I ran the analysis and saved everything on my side.\n\n",
            deltas=deltas,
            byte_split_index=7,
            progress={
                "tool": "write_file",
                "status": "running",
                "message": f"Writing {pdf}",
                "args": {"path": pdf},
            },
            arguments=arguments,
            argument_pieces=pieces,
        )

    def tool_call(self) -> dict[str, Any]:
        return {
            "id": _TOOL_CALL_ID,
            "type": "function",
            "function": {"name": "write_file", "arguments": self.arguments},
        }


def _split_inside_multibyte(data: bytes) -> tuple[bytes, bytes]:
    """Cut ``data`` inside the first multi-byte UTF-8 character."""
    for index, byte in enumerate(data):
        if byte >= 0xC0:  # a lead byte: cut right after it
            return data[: index + 1], data[index + 1 :]
    return data, b""


def _demo_steps(
    answer: _DemoAnswer, chunks: _Chunks, params: _Params, usage: dict[str, int]
) -> Iterator[_Step]:
    delay = params.delay
    yield _Step(encode_json(chunks.chunk({"role": "assistant", "content": ""})))
    yield _Step(chunks.content(answer.intro), delay)
    yield _Step(encode_json(answer.progress, event="hermes.tool.progress"), delay)
    head = {
        "index": 0,
        "id": _TOOL_CALL_ID,
        "type": "function",
        "function": {"name": "write_file", "arguments": ""},
    }
    yield _Step(encode_json(chunks.chunk({"tool_calls": [head]})), delay)
    for piece in answer.argument_pieces:
        call = {"index": 0, "function": {"arguments": piece}}
        yield _Step(encode_json(chunks.chunk({"tool_calls": [call]})), delay)
    yield _Step(encode_json(chunks.chunk({"content": None, "tool_calls": None})), delay)
    for index, text in enumerate(answer.deltas):
        data = chunks.content(text)
        if index == answer.byte_split_index:
            first, second = _split_inside_multibyte(data)
            yield _Step(first, delay)
            yield _Step(second, delay)
        else:
            yield _Step(data, delay)
    yield _Step(encode_json(chunks.chunk({}, "stop")), delay)
    if params.include_usage:
        yield _Step(chunks.usage(usage))
    yield _Step(DONE)


def _fail_deltas(files: DemoFiles) -> list[str]:
    pdf = str(files.report_pdf)
    return [
        "I am writing the summary now.\n",
        "It will be saved next to the report at ",
        pdf[: len(pdf) - 6],  # ends in the middle of the path
    ]


def _fail_steps(files: DemoFiles, chunks: _Chunks, params: _Params) -> Iterator[_Step]:
    yield _Step(encode_json(chunks.chunk({"role": "assistant", "content": ""})))
    for text in _fail_deltas(files):
        yield _Step(chunks.content(text), params.delay)
    if params.fail_partial:
        partial_event = chunks.content(" and a copy goes to " + str(files.plot_png))
        yield _Step(partial_event[: len(partial_event) // 2], params.delay)
    yield _Step(pause=params.delay, abort=True)


def _quiet_steps(chunks: _Chunks, params: _Params, usage: dict[str, int]) -> Iterator[_Step]:
    yield _Step(encode_json(chunks.chunk({"role": "assistant", "content": ""})))
    yield _Step(chunks.content("Let me think about that for a moment..."), params.delay)
    remaining = params.quiet_seconds
    if params.keepalive > 0:
        while remaining > params.keepalive:
            remaining -= params.keepalive
            yield _Step(encode_comment(), params.keepalive)
    yield _Step(chunks.content(" Done: all good."), remaining)
    yield _Step(encode_json(chunks.chunk({}, "stop")), params.delay)
    if params.include_usage:
        yield _Step(chunks.usage(usage))
    yield _Step(DONE)


def _long_steps(chunks: _Chunks, params: _Params, usage: dict[str, int]) -> Iterator[_Step]:
    yield _Step(encode_json(chunks.chunk({"role": "assistant", "content": ""})))
    for start in range(0, params.events, params.batch):
        stop = min(start + params.batch, params.events)
        data = b"".join(chunks.content(demo_long_delta(i)) for i in range(start, stop))
        yield _Step(data, params.delay)
    yield _Step(encode_json(chunks.chunk({}, "stop")), params.delay)
    if params.include_usage:
        yield _Step(chunks.usage(usage))
    yield _Step(DONE)


def _image_text(files: DemoFiles) -> str:
    return f"Here is the chart:\n\n![the chart]({files.plot_png})\n\nIt shows the scores per run."


def _text_steps(
    text: str, chunks: _Chunks, params: _Params, usage: dict[str, int]
) -> Iterator[_Step]:
    yield _Step(encode_json(chunks.chunk({"role": "assistant", "content": ""})))
    for piece in text.splitlines(keepends=True):
        yield _Step(chunks.content(piece), params.delay)
    yield _Step(encode_json(chunks.chunk({}, "stop")), params.delay)
    if params.include_usage:
        yield _Step(chunks.usage(usage))
    yield _Step(DONE)


def is_task_request(body: Mapping[str, Any]) -> bool:
    """Open WebUI's background task (title, tags, follow-ups): one ``### Task:`` prompt."""
    messages = body.get("messages")
    last = messages[-1] if isinstance(messages, list) and messages else None
    content = last.get("content") if isinstance(last, dict) else None
    return isinstance(content, str) and content.lstrip().startswith("### Task:")


def _task_text(files: DemoFiles) -> str:
    """What a model answers to a task prompt: JSON that names the files by their paths."""
    answer = {
        "title": f"Report in {files.report_pdf}",
        "tags": ["reports", f"{files.results_csv}", f"chart {files.plot_png}"],
        "follow_ups": [
            f"Can you rename `{files.resume_txt}`?",
            f"What does {files.plot_png} show?",
        ],
    }
    return json.dumps(answer, ensure_ascii=False)


def _error_body(message: str, type_: str, code: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


# --------------------------------------------------------------------------- app


class DemoUpstreamApp(QuartTrio):
    """The demo upstream's Quart app; the ``demo_*`` attributes are for tests."""

    demo_files: DemoFiles
    chunk_delay: float
    demo_log: list[dict[str, Any]]
    demo_streams_open: int
    demo_streams_completed: int
    demo_aborts: int
    demo_disconnects: int
    demo_disconnect_times: list[float]
    #: the temporary directory of the outside file this app made (removed when it stops)
    made_outside_dir: Path | None

    async def asgi_app(
        self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        try:
            await super().asgi_app(scope, receive, send)
        except* _UpstreamAbort:
            # Returning without the final body message makes hypercorn close the
            # connection mid-body: the client sees a truncated chunked response.
            pass

    async def play(self, steps: Iterable[_Step]) -> AsyncIterator[bytes]:
        """Write ``steps`` as a response body, keeping the stream counters."""
        self.demo_streams_open += 1
        outcome = "disconnected"
        try:
            for step in steps:
                if step.pause > 0:
                    await trio.sleep(step.pause)
                if step.abort:
                    outcome = "aborted"
                    raise _UpstreamAbort("demo-fail cuts the connection here")
                yield step.data
            outcome = "completed"
        finally:
            # No await here: after a client disconnect this may run under GeneratorExit.
            self.demo_streams_open -= 1
            if outcome == "completed":
                self.demo_streams_completed += 1
            elif outcome == "aborted":
                self.demo_aborts += 1
            else:
                self.demo_disconnects += 1
                self.demo_disconnect_times.append(time.monotonic())

    def record(self, body: Any) -> None:
        headers = {name.lower(): value for name, value in request.headers.items()}
        self.demo_log.append(
            {
                "method": request.method,
                "path": request.path,
                "body": body,
                "headers": headers,
                "authorization": headers.get("authorization"),
                "principal": headers.get("x-gateway-principal"),
                "time": time.monotonic(),
            }
        )


def _json_response(
    obj: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(
        json.dumps(obj, ensure_ascii=False),
        status=status,
        headers=dict(headers or {}),
        content_type="application/json",
    )


def create_demo_upstream_app(
    artifact_root: Path,
    *,
    outside_dir: Path | None = None,
    chunk_delay: float = 0.02,
) -> DemoUpstreamApp:
    """Create the demo upstream app and write its files.

    ``outside_dir`` holds the one file outside the artifact root; when ``None`` a new
    temporary directory is made, and removed when the app stops serving.
    ``chunk_delay`` is the pause in seconds between body writes.
    """
    app = DemoUpstreamApp(__name__)
    app.made_outside_dir = None
    if outside_dir is None:
        made = app.made_outside_dir = Path(tempfile.mkdtemp(prefix="demo-upstream-outside-"))
        outside_dir = made

        @app.after_serving
        async def _remove_outside_dir() -> None:
            shutil.rmtree(made, ignore_errors=True)

    app.config["RESPONSE_TIMEOUT"] = None
    app.demo_files = write_demo_files(artifact_root, outside_dir)
    app.chunk_delay = chunk_delay
    app.demo_log = []
    app.demo_streams_open = 0
    app.demo_streams_completed = 0
    app.demo_aborts = 0
    app.demo_disconnects = 0
    app.demo_disconnect_times = []
    created = int(time.time())
    counter = 0

    def model_object(model: str) -> dict[str, Any]:
        return {"id": model, "object": "model", "created": created, "owned_by": "demo-upstream"}

    @app.get("/v1/models")
    async def list_models() -> Response:
        app.record(None)
        return _json_response({"object": "list", "data": [model_object(m) for m in MODELS]})

    @app.get("/v1/models/<model>")
    async def get_model(model: str) -> Response:
        app.record(None)
        if model not in MODELS:
            return _model_not_found(model)
        return _json_response(model_object(model))

    @app.post("/v1/chat/completions")
    async def chat_completions() -> Response:
        nonlocal counter
        body = await request.get_json(force=True, silent=True)
        app.record(body)
        checked = _chat_request(body, request.args, app.chunk_delay)
        if isinstance(checked, Response):
            return checked
        model, params = checked
        counter += 1
        chunks = _Chunks(model, f"chatcmpl-demo-{counter}")
        if body.get("stream") is True:
            steps = _stream_steps(model, app.demo_files, chunks, params, body)
            response = Response(
                app.play(steps),
                headers=_SSE_HEADERS,
                content_type="text/event-stream; charset=utf-8",
            )
            response.timeout = None
            return response
        return await _plain_response(app, model, chunks, params, body)

    return app


def _chat_request(
    body: Any, args: Mapping[str, str], chunk_delay: float
) -> tuple[str, _Params] | Response:
    """The model and the demo parameters of a chat request, or the error answer."""
    if not isinstance(body, dict):
        return _json_response(
            _error_body(
                "The request body must be a JSON object.",
                "invalid_request_error",
                "invalid_json",
            ),
            400,
        )
    model = body.get("model", "demo")
    if not isinstance(model, str) or model not in MODELS:
        return _model_not_found(str(model))
    try:
        params = _Params.parse(body, args, chunk_delay)
    except _BadParameter as exc:
        return _json_response(
            _error_body(str(exc), "invalid_request_error", "invalid_demo_parameter"), 400
        )
    if model == "demo-error":
        return _json_response(
            _error_body(
                "The demo upstream failed on purpose (model demo-error).",
                "server_error",
                "demo_internal_error",
            ),
            500,
        )
    if model == "demo-429":
        return _json_response(
            _error_body(
                "Rate limit reached (model demo-429); retry after the given delay.",
                "rate_limit_error",
                "rate_limit_exceeded",
            ),
            429,
            {"Retry-After": str(params.retry_after)},
        )
    return model, params


def _model_not_found(model: str) -> Response:
    return _json_response(
        _error_body(
            f"The model '{model}' does not exist; use one of: {', '.join(MODELS)}.",
            "invalid_request_error",
            "model_not_found",
        ),
        404,
    )


def _stream_steps(
    model: str, files: DemoFiles, chunks: _Chunks, params: _Params, body: Mapping[str, Any]
) -> Iterator[_Step]:
    if model == "demo":
        answer = _DemoAnswer.build(files)
        return _demo_steps(answer, chunks, params, _usage(body, answer.text))
    if model == "demo-fail":
        return _fail_steps(files, chunks, params)
    if model == "demo-quiet":
        return _quiet_steps(chunks, params, _usage(body, "x" * 40))
    if model == "demo-image":
        text = _image_text(files)
        return _text_steps(text, chunks, params, _usage(body, text))
    return _long_steps(chunks, params, _usage(body, "x" * 8 * params.events))


async def _plain_response(
    app: DemoUpstreamApp, model: str, chunks: _Chunks, params: _Params, body: Mapping[str, Any]
) -> Response:
    files = app.demo_files
    tool_calls: list[dict[str, Any]] | None = None
    if model in ("demo", "demo-image") and is_task_request(body):
        text = _task_text(files)
    elif model == "demo":
        answer = _DemoAnswer.build(files)
        text = answer.text
        tool_calls = [answer.tool_call()]
    elif model == "demo-image":
        text = _image_text(files)
    elif model == "demo-quiet":
        await trio.sleep(params.quiet_seconds)
        text = "Let me think about that for a moment... Done: all good."
    elif model == "demo-long":
        text = "".join(demo_long_delta(i) for i in range(params.events))
    else:  # demo-fail: half of the JSON body, then the connection is cut
        text = "".join(_fail_deltas(files))
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    completion = {
        "id": chunks.id,
        "object": "chat.completion",
        "created": chunks.created,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": _usage(body, text),
    }
    if model != "demo-fail":
        return _json_response(completion)
    data = json.dumps(completion, ensure_ascii=False).encode()
    steps = [_Step(data[: len(data) // 2]), _Step(pause=params.delay, abort=True)]
    response = Response(app.play(steps), content_type="application/json")
    response.timeout = None
    return response


# --------------------------------------------------------------------------- serving


def _bind(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


async def serve_demo_upstream(
    app: DemoUpstreamApp,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` with hypercorn's trio worker until cancelled or ``shutdown_trigger``
    returns; ``task_status.started`` receives the origin, e.g. ``http://127.0.0.1:54321``
    (the OpenAI base URL is that plus ``/v1``). Port 0 picks a free port."""
    config = HypercornConfig()
    config.bind = [_bind(host, port)]
    config.accesslog = None
    config.keep_alive_timeout = 75.0  # outlive httpx's pool expiry: no reuse races
    config.graceful_timeout = 1.0
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(
            partial(serve, app, config, shutdown_trigger=shutdown_trigger)
        )
        task_status.started(binds[0])


async def run_demo_upstream(
    host: str,
    port: int,
    artifact_root: Path,
    *,
    outside_dir: Path | None = None,
    chunk_delay: float = 0.02,
    shutdown_trigger: Callable[[], Awaitable[None]] | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Create the demo app and serve it (see :func:`serve_demo_upstream`)."""
    app = create_demo_upstream_app(artifact_root, outside_dir=outside_dir, chunk_delay=chunk_delay)
    try:
        await serve_demo_upstream(
            app, host, port, shutdown_trigger=shutdown_trigger, task_status=task_status
        )
    finally:  # also when serving never began (a port in use): after_serving never ran
        if app.made_outside_dir is not None:
            shutil.rmtree(app.made_outside_dir, ignore_errors=True)


async def _wait_for_signal() -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            return


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python -m gateway.cli.demo_upstream --port 9000 --root DIR``."""
    parser = argparse.ArgumentParser(
        prog="python -m gateway.cli.demo_upstream",
        description="Scripted OpenAI-compatible streaming upstream for demos and tests.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--root", type=Path, required=True, help="artifact root to write into")
    parser.add_argument("--outside", type=Path, default=None, help="dir for the outside file")
    parser.add_argument("--chunk-delay", type=float, default=0.02, help="seconds between writes")
    args = parser.parse_args(argv)

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            url = await nursery.start(
                partial(
                    run_demo_upstream,
                    args.host,
                    args.port,
                    args.root,
                    outside_dir=args.outside,
                    chunk_delay=args.chunk_delay,
                    shutdown_trigger=_wait_for_signal,
                )
            )
            print(f"demo upstream: base URL {url}/v1, files under {args.root}", flush=True)
            print(f"models: {', '.join(MODELS)} (Ctrl+C to stop)", flush=True)

    trio.run(run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
