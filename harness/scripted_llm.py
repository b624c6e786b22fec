"""A scripted OpenAI-compatible LLM: the model behind a real agent in the tests.

The real Hermes agent runs its own tools (``write_file``, ``terminal``) on what its
model asks for. This server is that model, deterministic and offline: a test gives
it a script of turns, and each agent-loop request (one that offers ``tools``) gets
the next turn, streamed or not, exactly as the request asked:

    llm = ScriptedLLM.start()                 # 127.0.0.1:<ephemeral>, its own thread
    llm.script([
        Turn(tool_calls=[ToolCall("write_file", {"path": p, "content": "hi"})]),
        Turn(text=f"I wrote {p}."),           # the answer, after the tool results
    ])
    ... point the agent at llm.base_url ...
    llm.requests                              # every request body it got, in order
    llm.close()

A request without ``tools`` is one of the agent's side calls (a session title, a
summary): it gets ``Turn.side_text`` of the script's first turn or a fixed short
answer, and never consumes a turn. When the script is used up, an agent-loop
request gets :data:`EXHAUSTED` as its answer, so a test that expected fewer turns
fails on the text instead of hanging. ``/v1/models`` lists :data:`MODEL`.

Streaming follows the OpenAI chat wire format: a role chunk, content deltas cut
into ``chunk_chars`` pieces, tool calls streamed per index (id and name first,
then the arguments in pieces), a finish chunk (``tool_calls`` or ``stop``), a
``usage`` chunk when ``stream_options.include_usage`` asks for one, ``[DONE]``.

Plain stdlib HTTP server in a thread: the fixtures that own it are synchronous
(session scoped, shared by trio tests), and nothing of the gateway is involved.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "scripted-model"
#: what an agent-loop request gets once the script is used up
EXHAUSTED = "(the scripted model has no turn left)"
SIDE_TEXT = "Scripted session"


@dataclass(frozen=True)
class ToolCall:
    """One function call the model asks for; ``arguments`` is JSON-encoded on the wire."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Turn:
    """One model answer: text, tool calls, or both (text first, as models do)."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] | list[ToolCall] = ()
    #: characters per streamed content delta
    chunk_chars: int = 12
    #: seconds to wait before each streamed piece (a slow model, a long run)
    delay: float = 0.0


@dataclass
class _State:
    turns: list[Turn] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    served: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class ScriptedLLM:
    """The server (see the module docstring). Thread-safe: tests script, the agent asks."""

    def __init__(self, server: ThreadingHTTPServer, state: _State) -> None:
        self._server = server
        self._state = state
        self._thread = threading.Thread(
            target=server.serve_forever, name="scripted-llm", daemon=True
        )
        self._ids = itertools.count(1)

    @classmethod
    def start(cls, host: str = "127.0.0.1") -> ScriptedLLM:
        state = _State()
        server = ThreadingHTTPServer((host, 0), _handler_for(state))
        server.daemon_threads = True
        llm = cls(server, state)
        llm._thread.start()
        return llm

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def script(self, turns: list[Turn]) -> None:
        """Replace the script (and forget the requests seen so far)."""
        with self._state.lock:
            self._state.turns = list(turns)
            self._state.requests = []
            self._state.served = 0

    @property
    def requests(self) -> list[dict[str, Any]]:
        with self._state.lock:
            return list(self._state.requests)

    @property
    def turns_left(self) -> int:
        with self._state.lock:
            return len(self._state.turns)

    @property
    def turns_served(self) -> int:
        with self._state.lock:
            return self._state.served

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _handler_for(state: _State) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        pass

    Handler.state = state
    return Handler


class _Handler(BaseHTTPRequestHandler):
    state: _State
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: the tests read ``requests``

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            body = {
                "object": "list",
                "data": [{"id": MODEL, "object": "model", "owned_by": "test"}],
            }
            self._json(200, body)
        else:
            self._json(404, {"error": {"message": "not found", "type": "invalid_request_error"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._json(400, {"error": {"message": "invalid JSON", "type": "invalid_request_error"}})
            return
        if not self.path.rstrip("/").endswith("/chat/completions") or not isinstance(body, dict):
            self._json(404, {"error": {"message": "not found", "type": "invalid_request_error"}})
            return
        turn, number = self._next_turn(body)
        if body.get("stream"):
            self._stream(turn, number, body)
        else:
            self._json(200, completion(turn, body.get("model") or MODEL, number))

    def _next_turn(self, body: dict[str, Any]) -> tuple[Turn, int]:
        """The turn for this request and its number (call ids derive from it)."""
        with self.state.lock:
            self.state.requests.append(body)
            number = len(self.state.requests)
            if not body.get("tools"):
                return Turn(text=SIDE_TEXT), number
            if not self.state.turns:
                return Turn(text=EXHAUSTED), number
            self.state.served += 1
            return self.state.turns.pop(0), number

    def _json(self, status: int, obj: dict[str, Any]) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, turn: Turn, number: int, body: dict[str, Any]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        try:
            for chunk in stream_chunks(turn, body.get("model") or MODEL, number, usage=usage):
                if turn.delay:
                    time.sleep(turn.delay)
                data = f"data: {json.dumps(chunk)}\n\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            done = b"data: [DONE]\n\n"
            self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the agent went away (interrupted)


# -- the wire format (pure functions: the unit tests check them directly) --------------

_USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def _call_id(number: int, call_index: int) -> str:
    return f"call_{number}_{call_index}"


def completion(turn: Turn, model: str, number: int = 1) -> dict[str, Any]:
    """A non-streamed ``chat.completion`` for ``turn``."""
    message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
    if turn.tool_calls:
        message["tool_calls"] = [
            {
                "id": _call_id(number, i),
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
            }
            for i, c in enumerate(turn.tool_calls)
        ]
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if turn.tool_calls else "stop",
            }
        ],
        "usage": dict(_USAGE),
    }


def _pieces(text: str, size: int) -> Iterator[str]:
    size = max(1, size)
    for i in range(0, len(text), size):
        yield text[i : i + size]


def stream_chunks(
    turn: Turn, model: str, number: int = 1, *, usage: bool = False
) -> Iterator[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of ``turn``, in order (no ``[DONE]``).

    ``number``: the request's number; tool-call ids are ``call_<number>_<index>``."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-scripted",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    yield chunk({"role": "assistant", "content": ""})
    for piece in _pieces(turn.text, turn.chunk_chars):
        yield chunk({"content": piece})
    for i, call in enumerate(turn.tool_calls):
        yield chunk(
            {
                "tool_calls": [
                    {
                        "index": i,
                        "id": _call_id(number, i),
                        "type": "function",
                        "function": {"name": call.name, "arguments": ""},
                    }
                ]
            }
        )
        for piece in _pieces(json.dumps(call.arguments), turn.chunk_chars * 2):
            yield chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
    yield chunk({}, "tool_calls" if turn.tool_calls else "stop")
    if usage:
        yield {
            "id": "chatcmpl-scripted",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [],
            "usage": dict(_USAGE),
        }
