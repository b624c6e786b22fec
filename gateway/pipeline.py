"""The one event pipeline: upstream chat-completion events → rewritten events.

Every front (chat, Responses, runs, and through runs the Open WebUI proxy) reads
the upstream through this class, so a fix to rewriting lands everywhere at once.

Strategy
--------
The upstream speaks OpenAI chat-completion chunks. Each text *channel* (one per
choice's ``content``, ``reasoning_content``/``reasoning``, ``refusal``, and one per
tool call's ``arguments``) gets its own :class:`~gateway.rewrite.StreamRewriter`;
a chunk goes out with each channel's text replaced by what the rewriter says is
safe now. When a choice reports ``finish_reason`` its channels are flushed into
that same chunk; at the end of the stream (``[DONE]``, EOF or failure) whatever is
still held is flushed into one more chunk. All other strings in a chunk (and every
string of an unknown named event such as ``hermes.tool.progress``) are scrubbed
whole with a one-shot rewrite. The output is still chat-completion-shaped
("neutral"); the fronts encode it for their wire format.

Resolution of a path into a link is async (file checks and database writes run
in worker threads), so the pipeline awaits the resolver between rewriter calls;
text without a path never awaits.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.paths import DEFAULT_MAX_PATH_CHARS, PathDetector, PathMatch, could_contain_path
from gateway.rewrite import Piece, StreamRewriter, render
from gateway.sse import SSEEvent

TEXT_KEYS = ("content", "reasoning_content", "reasoning", "refusal")
#: structural keys whose string values are never rewritten (``model`` is not one of
#: them: servers such as vLLM name a model by its host path by default)
STRUCTURAL = frozenset(
    {
        "id",
        "object",
        "role",
        "finish_reason",
        "type",
        "system_fingerprint",
        "name",
        "service_tier",
        "call_id",
        "status",
    }
)

#: JSON numbers and booleans: never rewritten
_NUMBER = (int, float, bool)


class LinkResolver(Protocol):
    """Turns a host path into a link for one response (same path → same link)."""

    @property
    def download_link_mode(self) -> str: ...

    async def resolve(self, path: str) -> str | None: ...

    def manifest(self) -> dict[str, Any]: ...


@dataclass
class PipelineStats:
    """Paths rewritten into links and into names (fed to the metrics)."""

    links: int = 0
    names: int = 0


@dataclass
class Named:
    """An unknown named upstream event, scrubbed, to relay as is."""

    event: str
    data: Any


@dataclass
class Failure:
    """The upstream failed; the fronts end their stream with an error terminal."""

    code: str
    message: str


Out = dict[str, Any] | Named


@dataclass
class _Choice:
    channels: dict[str, StreamRewriter] = field(default_factory=dict)
    tools: dict[int, StreamRewriter] = field(default_factory=dict)
    finished: bool = False


class ChatPipeline:
    """Rewrites one upstream chat-completion stream (or one non-streaming body)."""

    def __init__(
        self,
        resolver: LinkResolver,
        *,
        extra_roots: Iterable[str] = (),
        max_path_chars: int = DEFAULT_MAX_PATH_CHARS,
        enabled: bool = True,
    ) -> None:
        self.resolver = resolver
        self._detector = PathDetector.shared(tuple(extra_roots), max_path_chars)
        self._choices: dict[int, _Choice] = {}
        self._last: dict[str, Any] = {}
        self.stats = PipelineStats()
        self.enabled = enabled  # harness-only switch: False proves the harness catches leaks
        self.done = False
        self.text: dict[int, list[str]] = {}  # emitted content per choice (for terminal events)

    # -- rewriting helpers --------------------------------------------------------

    def _rewriter(self) -> StreamRewriter:
        return StreamRewriter(detector=self._detector)

    async def _render(self, pieces: list[Piece], *, name_only: bool = False) -> str:
        if len(pieces) == 1 and isinstance(pieces[0], str):
            return pieces[0]  # the common case: plain text, nothing held back
        if all(isinstance(p, str) for p in pieces):
            return "".join(pieces)  # type: ignore[arg-type]
        out: list[str] = []
        for p in pieces:
            if isinstance(p, str):
                out.append(p)
            else:
                url = None if (name_only or p.overlong) else await self._url(p)
                if url is None:
                    self.stats.names += 1
                else:
                    self.stats.links += 1
                out.append(render(p, url))
        return "".join(out)

    async def _url(self, match: PathMatch) -> str | None:
        return await self.resolver.resolve(match.path)

    async def scrub_text(self, text: str) -> str:
        """One-shot rewrite of a complete string."""
        if not self.enabled or not could_contain_path(text):
            return text
        rw = self._rewriter()
        return await self._render(rw.feed_pieces(text) + rw.flush_pieces())

    async def scrub(self, value: Any, key: str = "", *, keep: frozenset[str] = STRUCTURAL) -> Any:
        """Rewrite every string inside a JSON value except those under ``keep`` keys."""
        if isinstance(value, str):
            return value if key in keep else await self.scrub_text(value)
        if isinstance(value, list):
            return [await self.scrub(v, key, keep=keep) for v in value]
        if isinstance(value, dict):
            return {k: await self.scrub(v, k, keep=keep) for k, v in value.items()}
        return value

    async def _feed(self, rw: StreamRewriter, text: str) -> str:
        if not self.enabled:
            return text
        return await self._render(rw.feed_pieces(text))

    # -- streaming ---------------------------------------------------------------

    async def feed_event(self, ev: SSEEvent) -> list[Out] | Failure | None:
        """One upstream SSE event → chunks to emit; ``None`` at ``[DONE]``."""
        data = ev.data
        if data.strip() == "[DONE]":
            return None
        try:
            obj = json.loads(data)
        except ValueError:
            obj = None
        if ev.event not in ("message", ""):
            # an unknown event has no structure we know: every string is scrubbed
            scrubbed = await self.scrub(obj if obj is not None else data, keep=frozenset())
            return [Named(ev.event, scrubbed)]
        if not isinstance(obj, dict):
            return Failure(
                "upstream_bad_response",
                "The upstream model server sent an event that is not a JSON object.",
            )
        if obj.get("error"):
            err = obj["error"]
            msg = err.get("message") if isinstance(err, dict) else str(err)
            text = await self.scrub_text(str(msg or "upstream error"))
            return Failure("upstream_error", text[:500])
        return [await self.rewrite_chunk(obj)]

    async def rewrite_chunk(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Rewrite one ``chat.completion.chunk`` in place and return it."""
        last: dict[str, Any] = {}
        for k in ("id", "created", "model"):
            if k in obj:
                last[k] = obj[k]
        self._last = last
        choices = obj.get("choices")
        for key, value in list(obj.items()):
            if key != "choices" and key not in STRUCTURAL and not isinstance(value, _NUMBER):
                obj[key] = await self.scrub(value, key)
        if not isinstance(choices, list):
            return obj
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            idx = choice.get("index", 0)
            idx = idx if isinstance(idx, int) else 0
            state = self._choices.get(idx)
            if state is None:
                state = self._choices[idx] = _Choice()
            delta = choice.get("delta")
            if isinstance(delta, dict):
                await self._rewrite_delta(idx, state, delta)
            for key, value in list(choice.items()):
                if key not in ("delta", "index", "finish_reason") and value is not None:
                    choice[key] = await self.scrub(value, key)
            if choice.get("finish_reason") is not None and not state.finished:
                if not isinstance(delta, dict):
                    delta = choice["delta"] = {}
                await self._flush_choice(idx, state, delta, name_only=False)
        return obj

    async def _rewrite_delta(self, idx: int, state: _Choice, delta: dict[str, Any]) -> None:
        for key in list(delta):
            value = delta[key]
            if key in TEXT_KEYS and isinstance(value, str):
                rw = state.channels.get(key)
                if rw is None:
                    rw = state.channels[key] = self._rewriter()
                out = await self._feed(rw, value)
                delta[key] = out
                if key == "content":
                    texts = self.text.get(idx)
                    if texts is None:
                        texts = self.text[idx] = []
                    texts.append(out)
            elif key == "tool_calls" and isinstance(value, list):
                for call in value:
                    if not isinstance(call, dict):
                        continue
                    fn = call.get("function")
                    tidx = call.get("index", 0)
                    tidx = tidx if isinstance(tidx, int) else 0
                    if isinstance(fn, dict) and isinstance(fn.get("arguments"), str):
                        rw = state.tools.get(tidx)
                        if rw is None:
                            rw = state.tools[tidx] = self._rewriter()
                        fn["arguments"] = await self._feed(rw, fn["arguments"])
            elif key == "function_call" and isinstance(value, dict):
                if isinstance(value.get("arguments"), str):
                    rw = state.tools.get(-1)
                    if rw is None:
                        rw = state.tools[-1] = self._rewriter()
                    value["arguments"] = await self._feed(rw, value["arguments"])
            elif key != "role" and value is not None:
                delta[key] = await self.scrub(value, key)

    async def _flush_choice(
        self, idx: int, state: _Choice, delta: dict[str, Any], *, name_only: bool
    ) -> None:
        state.finished = True
        for key, rw in state.channels.items():
            rest = await self._render(rw.flush_pieces(), name_only=name_only)
            if rest:
                prev = delta.get(key)
                delta[key] = (prev if isinstance(prev, str) else "") + rest
                if key == "content":
                    self.text.setdefault(idx, []).append(rest)
        for tidx, rw in state.tools.items():
            rest = await self._render(rw.flush_pieces(), name_only=name_only)
            if not rest:
                continue
            if tidx == -1:
                fc = delta.setdefault("function_call", {})
                fc["arguments"] = (fc.get("arguments") or "") + rest
                continue
            calls = delta.get("tool_calls")
            if not isinstance(calls, list):
                calls = delta["tool_calls"] = []
            for call in calls:
                if isinstance(call, dict) and call.get("index", 0) == tidx:
                    fn = call.setdefault("function", {})
                    fn["arguments"] = (fn.get("arguments") or "") + rest
                    break
            else:
                calls.append({"index": tidx, "function": {"arguments": rest}})

    @property
    def held_chars(self) -> int:
        held = 0
        for st in self._choices.values():
            for rw in st.channels.values():
                held += rw.held_chars
            for rw in st.tools.values():
                held += rw.held_chars
        return held

    def make_chunk(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self._last.get("id", "chatcmpl-gateway"),
            "object": "chat.completion.chunk",
            "created": self._last.get("created", int(time.time())),
            "model": self._last.get("model", ""),
            "choices": choices,
        }

    async def finish(self, *, failed: bool = False) -> list[dict[str, Any]]:
        """End of stream: flush every unfinished choice into one more chunk.

        After a failure held text goes out as file names only (nothing is resolved).
        """
        self.done = True
        choices: list[dict[str, Any]] = []
        for idx, state in sorted(self._choices.items()):
            if state.finished:
                continue
            delta: dict[str, Any] = {}
            await self._flush_choice(idx, state, delta, name_only=failed)
            if delta or not failed:
                choices.append({"index": idx, "delta": delta, "finish_reason": None})
        return [self.make_chunk(choices)] if choices else []

    def content(self, idx: int = 0) -> str:
        """The rewritten content emitted so far for one choice."""
        return "".join(self.text.get(idx, ()))

    # -- non-streaming -------------------------------------------------------------

    async def rewrite_completion(self, body: dict[str, Any]) -> dict[str, Any]:
        """Rewrite a whole ``chat.completion`` object (every string, paths → links)."""
        out: dict[str, Any] = await self.scrub(body)
        choices = out.get("choices")
        if isinstance(choices, list):
            for ch in choices:
                msg = ch.get("message") if isinstance(ch, dict) else None
                if isinstance(msg, dict) and isinstance(msg.get("content"), str):
                    idx = ch.get("index", 0)
                    self.text[idx if isinstance(idx, int) else 0] = [msg["content"]]
        self.done = True
        return out
