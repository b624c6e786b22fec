"""Whole-pipeline generation and checks: upstream SSE bodies of any shape, a driver
that runs them the way :class:`gateway.stream.relay.Relay` does, and the output allowlists.

Reusable by any test::

    from tests import pipegen

    pipegen.build_corpus(2000)  # once, outside any test (a module fixture)

    @given(pipegen.bodies())
    def test_x(body):
        trace = pipegen.run_pipeline(body, body.splits)
        out = b"".join(pipegen.replay(trace, ChatEncoder()))
        pipegen.check_chat(out, trace, body)

Generation (:func:`bodies`)
---------------------------
A body is a list of upstream SSE events: ``chat.completion.chunk`` JSON of arbitrary
shape (known and unknown keys at every level, wrong types, huge numbers, ``NaN``,
nulls, strings where objects belong), named events with arbitrary names and data,
comments, ``id``/``retry`` fields, CR/CRLF/LF line ends, multi-line ``data``, then
one ending (``[DONE]``, end of stream, an error chunk, an event that is not a JSON
object, an oversized event, a transport failure, a drain, a stop). Host paths of
every class from :mod:`tests.pathgen` sit in arbitrary string positions: values and
keys, ``id``, ``model``, ``system_fingerprint``, tool-call ``id``/``name``/``type``,
``finish_reason``, ``role``, event names, error messages.

The text channels (a choice's ``content``/``reasoning_content``/``reasoning``/
``refusal``, a tool call's ``arguments``) are generated as streams: planted text split
into deltas anywhere, also inside a path. The generator keeps a model of what the
pipeline consumes (which deltas are live), so that the stream is only ever cut --
by a ``finish_reason``, the end of the stream or a failure -- outside a path: a path
cut short legitimately keeps its last visible segment (a secret folder) as its name,
which would make the oracle inexact. Everything dropped (dead choices, junk) holds
secrets too.

The driver (:func:`run_pipeline`, :func:`replay`)
-------------------------------------------------
Runs the real :class:`~gateway.clients.sources.SSESource` and
:class:`~gateway.stream.pipeline.ChatPipeline` synchronously (the stub resolver never
waits, so each coroutine completes on its first ``send``) in the order of
``Relay._produce``: ``start``, per read ``feed`` → ``encode``, an error in a step or
from the source → ``fail``, ``[DONE]`` or the source's end → ``end``, a stop after the
last read → ``fail`` (drain) or ``cancel``; the terminal always after
``pipeline.finish(failed=...)`` and ``manifest()``. The trace is replayed into every
front. A test in ``test_pipeline_generated.py`` checks that the real relay gives the
same bytes.

Checks
------
:func:`parse_sse` is a strict reader of the gateway's own output (LF only, one
``data`` line per event, comment lines only between events); the ``*_SCHEMA`` objects
are the allowlists, written from the encoders and ``docs/api.md``.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import itertools
import json
import math
import random
import re
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

import httpx
import trio
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from gateway.clients.sources import SSESource
from gateway.core.checks import FINISH_REASONS, ROLES
from gateway.core.errors import Draining, GatewayError, UpstreamError
from gateway.core.events import TEXT_CHANNELS, Event, Meta, Text, ToolCall
from gateway.core.paths import file_name
from gateway.core.sse import UNPAIRED
from gateway.stream.pipeline import CLIENT_KEYS, ChatPipeline, PipelineSettings
from gateway.stream.relay import CANCELLED, Relay, RelayOptions
from tests import pathgen

T = TypeVar("T")

LINK_BASE = "https://gw.test"
LINK_PREFIX = LINK_BASE + "/v1/artifacts/"
EXTRA_KEY = "x_operator_extra"
#: the configured roots, as the resolver's normal form spells them, with a separator
_ROOT_PREFIXES = tuple(r.rstrip("/\\") + ("\\" if "\\" in r else "/") for r in pathgen.CONFIG_ROOTS)


# --- driving coroutines that never wait ---------------------------------------------


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """The result of a coroutine that completes without waiting (in-memory stages)."""
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    coro.close()
    raise AssertionError("the coroutine waited: an in-memory stage must not")


# --- the resolver -----------------------------------------------------------------


def under_root(path: str) -> bool:
    return path.startswith(_ROOT_PREFIXES)


class StubLinks:
    """Mints a fake link for every path under a configured root (same path, same link);
    anything else gets its name. Ids are derived from the path's hash (a test need not
    be random), 22 characters of base64url like the real ones."""

    def __init__(self, mode: str = "private") -> None:
        self._mode = mode
        self.minted: dict[str, str] = {}
        self.batches = 0
        self._entries: list[dict[str, Any]] = []

    @property
    def download_link_mode(self) -> str:
        return self._mode

    async def resolve(self, path: str) -> str | None:
        if path in self.minted:
            return self.minted[path]
        if not under_root(path):
            return None
        digest = hashlib.sha256(path.encode("utf-8", "surrogatepass")).digest()
        aid = base64.urlsafe_b64encode(digest).decode()[:22]
        url = LINK_PREFIX + aid
        self.minted[path] = url
        self._entries.append(
            {
                "id": aid,
                "filename": file_name(path),
                "url": url,
                "link_mode": self._mode,
                "bytes": len(path),
            }
        )
        return url

    async def resolve_many(self, paths: list[str]) -> dict[str, str | None]:
        """The batch the pipeline asks for (resolved in order, as ResponseLinks does);
        ``batches`` counts the calls, so a test sees the batched path ran."""
        self.batches += 1
        return {path: await self.resolve(path) for path in paths}

    def report(self, paths: Any) -> None:
        self.reported = [*getattr(self, "reported", []), *paths]

    async def seal(self) -> None:
        self.sealed = True

    def manifest(self) -> dict[str, Any]:
        return {"download_link_mode": self._mode, "artifacts": [dict(e) for e in self._entries]}


# --- small draws --------------------------------------------------------------------


#: host paths drawn from :func:`tests.pathgen.host_paths` once per session
#: (:func:`build_corpus`): drawing one costs ~1.3 ms, a body's index into them ~0.02
CORPUS: list[pathgen.HostPath] = []


def build_corpus(n: int) -> None:
    """Draw ``n`` host paths (outside any test: Hypothesis does not nest)."""
    if len(CORPUS) >= n:
        return

    @settings(
        max_examples=n - len(CORPUS),
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(pathgen.host_paths())
    def collect(hp: pathgen.HostPath) -> None:
        CORPUS.append(hp)

    collect()


class _Draw:
    """The generator's choices: which host paths of the corpus a body uses (Hypothesis
    draws the indexes: they shrink), and the many small structural choices from a PRNG
    seeded by Hypothesis (a failing example is reproducible; drawing each of them
    through Hypothesis would cost ~30 µs apiece, and a body takes hundreds)."""

    def __init__(self, draw: st.DrawFn) -> None:
        assert CORPUS, "call pipegen.build_corpus() first (a module fixture)"
        self.draw = draw
        picks = draw(st.lists(st.integers(0, len(CORPUS) - 1), min_size=1, max_size=3))
        self.paths = [CORPUS[i] for i in picks]
        self.secrets: list[str] = [s for hp in self.paths for s in hp.secrets]
        self.rnd = random.Random(draw(_SEEDS))
        self.prose = self._planted()
        self.plain = "".join(
            self.pick(pathgen.NON_PATHS) + self.pick(("", " ", "\n", ". ")) for _ in range(3)
        )

    def _planted(self) -> str:
        """Prose with one or two of the paths planted (as :func:`pathgen.planted_texts`)."""
        parts = []
        for _ in range(1 + self.i(1)):
            before, after = self.pick(pathgen.CONTEXTS)
            gap = self.pick((" ", "\n", "  "))
            parts += [self.pick(FILLERS), gap, before, self.path().text, after, gap]
        return "".join([*parts, self.pick(FILLERS)])

    def i(self, hi: int) -> int:
        """An integer in ``0..hi``."""
        return self.rnd.randint(0, hi) if hi > 0 else 0

    def pick(self, options: Sequence[T]) -> T:
        return options[self.rnd.randrange(len(options))]

    def chance(self, n: int) -> bool:
        """True one time in ``n``."""
        return self.rnd.randrange(n) == 0

    def path(self) -> pathgen.HostPath:
        return self.pick(self.paths)


_SEEDS = st.integers(0, 2**64 - 1)


WORDS: tuple[str, ...] = (
    "",
    "stop",
    "length",
    "tool_calls",
    "function",
    "assistant",
    "user",
    "tool",
    "chatcmpl-abc",
    "call_1",
    "fp_1a2b",
    "gpt-4o",
    "message",
    "error",
    "[DONE]",
    "null",
    "NaN",
    "Infinity",
    "-Infinity",
    "0",
    "é",
    "\u2028",
    "\x00",
    "\ud800",
    "x" * 70,
    "hermes.tool.progress",
    "a b",
    "data: x",
    "event: y",
    "\n",
    "in_progress",
    "completed",
    "Bearer sk-not-a-path",
)

IDENT_KEYS: tuple[str, ...] = (
    *sorted(CLIENT_KEYS - {"error"}),
    "x",
    "data",
    "message",
    "type",
    "status",
    "call_id",
    "id",
    "name",
    "content",
    "hermes",
    "output_text",
    "gateway",
    "delta",
    "object",
    "_private",
)

FILLERS: tuple[str, ...] = (
    "",
    "see",
    "the file is at",
    "saved to",
    "中文",
    "très bien",
    "ok 42 and/or 1/2",
    "https://example.com/home/x",
    "/v1/models",
    "C: drive",
    "50% of $5",
    "10:30 ~5",
    "src/gateway/app.py",
    "```",
    "**bold**",
)
GAPS = (" ", "\n", "  ", "\t")
LIVE_INDEXES = (0, 0, 0, 1, None)  # None: no "index" key (means 0)
DEAD_INDEXES: tuple[Any, ...] = ("0", -1, 128, True, 1.0, None, 2**70, [0])
LIVE_TOOL_INDEXES = (0, 0, 1, 2, None)
DEAD_TOOL_INDEXES: tuple[Any, ...] = ("1", -1, 1024, False, None, 0.0)
INTS: tuple[int, ...] = (0, 1, -1, 7, 2**31, 2**53, 2**53 + 1, 2**63, 10**40, -(10**40))
FLOATS: tuple[float, ...] = (0.5, -0.0, 1e308, -1e308, math.nan, math.inf, -math.inf, 5e-324)


def whole_string(d: _Draw, *, bare_path: int = 4) -> str:
    """A string for a whole-string position: a bare host path, prose with paths, text
    without paths, or a word (ids, roles, reasons, sentinels)."""
    k = d.i(9)
    if k < bare_path:
        return d.path().text
    if k < 6:
        return d.prose
    if k == 6:
        return d.plain
    return d.pick(WORDS)


def key(d: _Draw) -> str:
    return d.pick(IDENT_KEYS) if d.chance(2) else whole_string(d)


def junk(d: _Draw, depth: int = 0, *, falsy_error: bool = True) -> Any:
    """Any JSON value (NaN and infinities included; no top-level truthy ``error``)."""
    k = d.i(10 if depth < 2 else 6)
    if k == 0:
        return None
    if k == 1:
        return d.chance(2)
    if k == 2:
        return d.pick(INTS)
    if k == 3:
        return d.pick(FLOATS)
    if k <= 6:
        return whole_string(d)
    if k == 7:
        return [junk(d, depth + 1) for _ in range(d.i(3))]
    obj: dict[str, Any] = {}
    for _ in range(d.i(3)):
        obj[key(d)] = junk(d, depth + 1)
    if falsy_error and obj.get("error"):
        obj["error"] = None
    return obj


def dead(d: _Draw) -> Any:
    """A value that is no container the pipeline would read: a scalar or a list of them."""
    k = d.i(5)
    if k == 0:
        return [d.pick((None, 1, "x", True)) for _ in range(d.i(2))]
    if k == 1:
        return d.pick((None, True, False, 0, 2**63, -1.5, math.nan))
    return whole_string(d)


_CHUNK_KEYS = frozenset(
    {"id", "object", "created", "model", "system_fingerprint", "choices", "usage", "error"}
) | {EXTRA_KEY}
_CHOICE_KEYS = frozenset({"index", "delta", "finish_reason", "logprobs"})
_DELTA_KEYS = frozenset({"role", "tool_calls", "function_call", *TEXT_CHANNELS})
_CALL_KEYS = frozenset({"index", "id", "type", "function"})
_FUNCTION_KEYS = frozenset({"name", "arguments"})


def unknown_key(d: _Draw, known: frozenset[str]) -> str:
    """A key that is not one of ``known`` (unknown at this level)."""
    k = key(d)
    return k if k not in known else "x_" + k


def maybe(d: _Draw, good: Callable[[], Any], odds: int = 5) -> Any:
    """Mostly ``good()``, one time in ``odds`` any JSON value."""
    return junk(d) if d.chance(odds) else good()


# --- text channels ----------------------------------------------------------------


def json_level(text: str) -> int:
    """How many times ``text`` reads as the inside of a JSON string with escapes in it
    (a plain Windows path fails at once: ``\\U`` is no JSON escape)."""
    level = 0
    while level < 4:
        try:
            inner = json.loads('"' + text + '"')
        except ValueError:
            break
        if inner == text:
            break
        text, level = inner, level + 1
    return level


class _Channel:
    """One text channel as the pipeline will consume it: planted segments cut anywhere;
    ``pending`` while the cut is inside a path."""

    def __init__(self, json_text: bool) -> None:
        self.json_text = json_text
        self.cur = ""
        self.pos = 0
        self.span = (0, 0)
        self.consumed: list[str] = []

    @property
    def pending(self) -> bool:
        return self.span[0] < self.pos < self.span[1]

    def _segment(self, d: _Draw) -> None:
        filler = d.pick(FILLERS)
        self.pos = 0
        if d.chance(5):
            self.cur, self.span = filler + d.pick(GAPS), (0, 0)
            return
        hp = d.path()
        if self.json_text and d.chance(2) and json_level(hp.text) < 2:
            # inside a JSON string of the arguments: one level more (the detector reads
            # paths JSON-escaped up to twice; three levels are a known limit)
            inner = json.dumps(hp.text, ensure_ascii=d.chance(2))[1:-1]
            head = '{"path": "'
            tail = '", "note": ' + json.dumps(filler) + "} "
            self.cur, self.span = head + inner + tail, (len(head), len(head) + len(inner))
            return
        before, after = d.pick(pathgen.CONTEXTS)
        gap = d.pick(GAPS)
        head = filler + gap + before
        self.cur = head + hp.text + after + gap
        self.span = (len(head), len(head) + len(hp.text))

    def piece(self, d: _Draw, *, complete: bool = False) -> str:
        """The next delta (never empty); ``complete`` runs to the end of the segment."""
        if self.pos >= len(self.cur):
            self._segment(d)
        rest = len(self.cur) - self.pos
        n = rest if complete or d.chance(4) else 1 + d.i(min(rest, 12) - 1)
        text = self.cur[self.pos : self.pos + n]
        self.pos += n
        self.consumed.append(text)
        return text

    def text(self) -> str:
        return "".join(self.consumed)


@dataclass
class _ChoiceGen:
    channels: dict[str, _Channel] = field(default_factory=dict)
    tools: dict[int, _Channel] = field(default_factory=dict)  # -1: legacy function_call
    finished: bool = False

    def channel(self, name: str) -> _Channel:
        if name not in self.channels:
            self.channels[name] = _Channel(json_text=False)
        return self.channels[name]

    def tool(self, tidx: int) -> _Channel:
        if tidx not in self.tools:
            self.tools[tidx] = _Channel(json_text=True)
        return self.tools[tidx]

    def pending(self) -> bool:
        return any(c.pending for c in (*self.channels.values(), *self.tools.values()))


CHANNELS = ("content", "content", "content", "reasoning_content", "reasoning", "refusal")
ENDINGS = (
    "done",
    "done",
    "eof",
    "error_chunk",
    "bad_event",
    "oversize",
    "source_error",
    "drain",
    "cancel",
)


class _BodyGen(_Draw):
    def __init__(self, draw: st.DrawFn, extra: bool) -> None:
        super().__init__(draw)
        self.extra = extra
        self.choices: dict[int, _ChoiceGen] = {}

    def state(self, idx: int) -> _ChoiceGen:
        if idx not in self.choices:
            self.choices[idx] = _ChoiceGen()
        return self.choices[idx]

    # -- a tool call ---------------------------------------------------------------

    def tool_call(self, st_: _ChoiceGen | None, finishing: bool, *, legacy: bool = False) -> Any:
        if self.chance(10):
            return dead(self)
        call: dict[str, Any] = {}
        tidx: int | None = -1
        if not legacy:
            if self.chance(6):
                call["index"], tidx = self.pick(DEAD_TOOL_INDEXES), None
            else:
                raw = self.pick(LIVE_TOOL_INDEXES)
                tidx = 0 if raw is None else raw
                if raw is not None:
                    call["index"] = raw
            if self.chance(2):
                call["id"] = (
                    whole_string(self)
                    if self.chance(3)
                    else maybe(self, lambda: self.pick(("call_1", "call_abc-2")))
                )
            if self.chance(2):
                call["type"] = (
                    whole_string(self) if self.chance(2) else maybe(self, lambda: "function")
                )
            if self.chance(12):  # a function that is not an object: no arguments
                call["function"] = self.pick(("x", 1, None, ["a"]))
                return call
        fn: dict[str, Any] = {}
        if self.chance(2):
            fn["name"] = (
                self.pick(("get_file", "x.y:z-1")) if self.chance(2) else whole_string(self)
            )
        if self.chance(5):
            fn["arguments"] = self.pick(("", None, 1, {"a": "b"}, ["x"]))
        elif st_ is not None and tidx is not None:
            fn["arguments"] = st_.tool(tidx).piece(self, complete=finishing)
        else:
            fn["arguments"] = whole_string(self)
        if self.chance(5):
            fn[unknown_key(self, _FUNCTION_KEYS)] = junk(self)
        if legacy:
            call.update(fn)
        else:
            call["function"] = fn
        if self.chance(5):
            call[unknown_key(self, _CALL_KEYS)] = junk(self)
        return call

    # -- a choice --------------------------------------------------------------------

    def delta(self, st_: _ChoiceGen | None, finishing: bool) -> dict[str, Any]:
        """A delta; on a live choice its text is consumed (whole segments when
        ``finishing``: the choice ends outside a path)."""
        delta: dict[str, Any] = {}
        if self.chance(3):
            delta["role"] = self.pick(sorted(ROLES)) if self.chance(2) else whole_string(self)
        for name in {self.pick(CHANNELS) for _ in range(self.i(2))}:
            if self.chance(8):
                delta[name] = self.pick(("", None, 5, ["x"], {"a": "b"}))
            elif st_ is not None:
                delta[name] = st_.channel(name).piece(self, complete=finishing)
            else:
                delta[name] = whole_string(self)
        if self.chance(4):
            if self.chance(6):
                delta["tool_calls"] = dead(self)
            else:
                delta["tool_calls"] = [self.tool_call(st_, finishing) for _ in range(1 + self.i(1))]
        if self.chance(10):
            delta["function_call"] = self.tool_call(st_, finishing, legacy=True)
        if self.chance(4):
            delta[unknown_key(self, _DELTA_KEYS)] = junk(self)
        if finishing and st_ is not None:
            self._complete(st_, delta)
        return delta

    def _complete(self, st_: _ChoiceGen, delta: dict[str, Any]) -> None:
        """End every channel of the choice still inside a path, in this delta (whatever
        of it was consumed in this delta already ended its segment)."""
        for name, ch in st_.channels.items():
            if ch.pending:  # the delta has no consumed piece of it: overwrite
                delta[name] = ch.piece(self, complete=True)
        calls = delta.get("tool_calls")
        if not isinstance(calls, list):
            calls = []
        for tidx, ch in st_.tools.items():
            if not ch.pending:
                continue
            rest = ch.piece(self, complete=True)
            if tidx != -1:
                calls.append({"index": tidx, "function": {"arguments": rest}})
                continue
            fc = delta.get("function_call")
            if isinstance(fc, dict):
                fc["arguments"] = rest
            else:
                delta["function_call"] = {"arguments": rest}
        if calls:
            delta["tool_calls"] = calls

    def choice(self) -> Any:
        if self.chance(12):
            return dead(self)
        obj: dict[str, Any] = {}
        st_: _ChoiceGen | None = None
        if self.chance(7):
            obj["index"] = self.pick(DEAD_INDEXES)
        else:
            raw = self.pick(LIVE_INDEXES)
            if raw is not None:
                obj["index"] = raw
            s = self.state(0 if raw is None else raw)
            st_ = None if s.finished else s
        finishing = self.chance(8)
        if self.chance(8) and not (finishing and st_ is not None and st_.pending()):
            obj["delta"] = self.pick(("", "text", 3, None, ["x"])) if self.chance(2) else dead(self)
        else:
            obj["delta"] = self.delta(st_, finishing)
        if finishing:
            obj["finish_reason"] = (
                self.pick(sorted(FINISH_REASONS))
                if self.chance(2)
                else maybe(self, lambda: whole_string(self), 3)
            )
            if obj["finish_reason"] is None:
                obj["finish_reason"] = "stop"
            if st_ is not None:
                st_.finished = True
        elif self.chance(2):
            obj["finish_reason"] = None
        if self.chance(6):
            obj["logprobs"] = maybe(
                self,
                lambda: {
                    "content": [
                        {
                            "token": whole_string(self),
                            "logprob": self.pick((-0.5, 0.0, -1e308, -math.inf, math.nan, 3)),
                            "bytes": [1, 2],
                            "top_logprobs": [],
                        }
                        for _ in range(1 + self.i(2))
                    ]
                },
            )
        if self.chance(5):
            obj[unknown_key(self, _CHOICE_KEYS)] = junk(self)
        return obj

    # -- a chunk ---------------------------------------------------------------------

    def chunk(self) -> dict[str, Any]:
        obj: dict[str, Any] = {}
        if self.chance(2):
            obj["id"] = (
                self.pick(("chatcmpl-123", "chatcmpl-abc.def:1"))
                if self.chance(2)
                else maybe(self, lambda: whole_string(self), 3)
            )
        if self.chance(2):
            obj["object"] = maybe(self, lambda: "chat.completion.chunk")
        if self.chance(2):
            obj["created"] = maybe(self, lambda: 1_700_000_000 + self.i(100))
        if self.chance(2):
            obj["model"] = maybe(self, lambda: whole_string(self) if self.chance(2) else "gpt-x")
        if self.chance(4):
            obj["system_fingerprint"] = maybe(
                self, lambda: "fp_1" if self.chance(2) else whole_string(self)
            )
        if self.chance(10):
            obj["choices"] = dead(self)
        else:
            obj["choices"] = [self.choice() for _ in range(self.i(2) if self.chance(3) else 1)]
        if self.chance(5):
            obj["usage"] = maybe(
                self,
                lambda: {
                    "prompt_tokens": self.pick((3, -1, "3", 2**60)),
                    "completion_tokens": 5,
                    "total_tokens": 8,
                    "prompt_tokens_details": {"cached_tokens": 1, key(self): junk(self)},
                    key(self): junk(self),
                },
                3,
            )
        if self.chance(4):
            obj[unknown_key(self, _CHUNK_KEYS)] = junk(self)
        if self.chance(8):
            obj["error"] = self.pick((None, "", 0, False, [], {}))
        if self.extra and self.chance(3):
            obj[EXTRA_KEY] = junk(self)
        return obj

    def flush_chunk(self) -> dict[str, Any] | None:
        """A chunk that ends every pending channel (before an ending)."""
        choices = []
        for idx, st_ in sorted(self.choices.items()):
            if not st_.finished and st_.pending():
                delta: dict[str, Any] = {}
                self._complete(st_, delta)
                choices.append({"index": idx, "delta": delta})
        return {"choices": choices} if choices else None


# --- SSE spelling ------------------------------------------------------------------


def _one_line(s: str) -> str:
    return s.replace("\r", " ").replace("\n", " ")


def _json_text(d: _Draw, value: Any) -> str:
    return json.dumps(value, ensure_ascii=d.chance(2), indent=1 if d.chance(8) else None)


class _Writer:
    def __init__(self, d: _Draw) -> None:
        self.d = d
        self.eol = d.pick(("\n", "\n", "\r\n", "\r"))
        self.parts: list[str] = []
        self.ends: list[int] = []  # byte offsets where events end (safe read cuts)
        self._size = 0
        self.largest = 0

    def event(self, data: str, name: str | None = None, *, fields: bool = True) -> None:
        d, eol = self.d, self.eol
        lines: list[str] = []
        if fields and d.chance(8):
            lines.append(":" + _one_line(whole_string(d)))
        if name is not None:
            lines.append("event: " + _one_line(name))
        if fields and d.chance(10):
            lines.append(d.pick(("id: ", "id:")) + _one_line(whole_string(d)).replace("\0", ""))
        if fields and d.chance(12):
            lines.append("retry: " + d.pick(("10", "x", "99999999999999999999999")))
        sep = d.pick(("data: ", "data: ", "data:"))
        lines += [sep + line for line in data.replace("\r", " ").split("\n")]
        self.add(eol.join(lines) + eol + eol)

    def add(self, text: str) -> None:
        raw = text.encode("utf-8", "surrogatepass")
        self.parts.append(text)
        self._size += len(raw)
        self.largest = max(self.largest, len(raw))
        self.ends.append(self._size)

    def bytes(self) -> bytes:
        body = "".join(self.parts).encode("utf-8", "surrogatepass")
        return body


class Body(NamedTuple):
    sse: bytes
    splits: tuple[int, ...]  #: read boundaries
    ending: str  #: one of ENDINGS
    outcome: str  #: "completed", "failed" or "cancelled"
    error_code: str | None  #: the terminal error's code when failed
    limit: int  #: the decoder's max_event_bytes
    secrets: tuple[str, ...]
    #: choice 0's content as the pipeline consumes it (for the one-shot rewrite)
    content0: str
    settings: PipelineSettings

    def reads(self, splits: Iterable[int] | None = None) -> list[bytes]:
        cuts = sorted({0, *(self.splits if splits is None else splits), len(self.sse)})
        return [self.sse[a:b] for a, b in itertools.pairwise(cuts)]


SETTINGS = {
    (logprobs, extra): PipelineSettings.build(
        pathgen.CONFIG_ROOTS,
        logprobs=logprobs,
        extra_chunk_keys=frozenset({EXTRA_KEY}) if extra else frozenset(),
    )
    for logprobs in (False, True)
    for extra in (False, True)
}


def _named(g: _BodyGen, w: _Writer) -> None:
    name = (
        g.pick(("hermes.tool.progress", "ping", "x:y-1", "_bad", "9z"))
        if g.chance(2)
        else whole_string(g)
    )
    name = _one_line(name)
    if name in ("error", "message", ""):
        name = "hermes.status"
    if g.chance(4):
        data = whole_string(g)
        if data.strip() in ("[DONE]", "") or data.strip().startswith(("[", "{")):
            data = "x " + data
        data = _one_line(data)
    else:
        value = junk(g, falsy_error=True)
        if isinstance(value, dict) and value.get("error"):
            value["error"] = None
        data = _json_text(g, value)
    w.event(data, name)


def _ending(g: _BodyGen, w: _Writer, ending: str) -> tuple[str, str | None]:
    """Write the ending; (outcome, error code)."""
    if ending == "done":
        w.event(
            g.pick(("[DONE]", "[DONE]", " [DONE] ")), None if g.chance(2) else "done", fields=False
        )
        for _ in range(g.i(2)):  # after [DONE]: never read on
            w.event(_json_text(g, g.chunk()))
        return "completed", None
    if ending == "eof":
        if g.chance(2):  # an unterminated event: the stream was cut in the middle
            w.parts.append(
                "data: "
                + _one_line(json.dumps({"choices": [{"delta": {"content": whole_string(g)}}]}))
            )
            return "failed", "upstream_disconnected"
        return "completed", None
    if ending == "error_chunk":
        msg = maybe(g, lambda: whole_string(g), 4)
        if g.chance(3):
            data = _json_text(g, msg) if g.chance(2) else _one_line(str(msg))
            w.event("boom" if data.strip() == "[DONE]" else data, "error")
        else:
            err: Any = {"message": msg, "code": whole_string(g)} if g.chance(2) else msg
            if not err:
                err = "boom"
            w.event(_json_text(g, {"error": err, "choices": junk(g)}))
        return "failed", "upstream_error"
    if ending == "bad_event":
        data = g.pick(
            (
                "[1, 2]",
                '"just a string"',
                "not json " + _one_line(whole_string(g)),
                "[" * 70 + "]" * 70,
                '{"choices": [], "created": ' + "9" * 5000 + "}",
                "null",
            )
        )
        w.event(data, None if g.chance(2) else "message")
        return "failed", "upstream_bad_response"
    if ending == "oversize":
        return "failed", "sse_event_too_large"  # written by bodies() once the limit is known
    if ending == "source_error":
        return "failed", "upstream_disconnected"
    if ending == "drain":
        return "failed", "gateway_draining"
    return "cancelled", None


@st.composite
def bodies(draw: st.DrawFn, max_events: int = 12) -> Body:
    logprobs, extra = draw(st.booleans()), draw(st.booleans())
    n_events = draw(st.integers(0, max_events))
    ending = draw(st.sampled_from(ENDINGS))
    g = _BodyGen(draw, extra)
    w = _Writer(g)
    if g.chance(10):
        w.parts.append("\ufeff")
    for _ in range(n_events):
        k = g.i(9)
        if k == 0:
            _named(g, w)
        elif k == 1:
            w.add(":" + _one_line(whole_string(g)) + w.eol)  # a comment line
        else:
            w.event(_json_text(g, g.chunk()))
    flush = g.flush_chunk()
    if flush is not None:
        w.event(_json_text(g, flush), fields=False)
    safe = len(w.bytes())
    content0 = g.choices[0].channel("content").text() if 0 in g.choices else ""
    outcome, code = _ending(g, w, ending)
    limit = 1 << 20
    if ending == "oversize":
        limit = w.largest + 16 + g.i(64)
        giant = "x" * (limit + 1 + g.i(40))
        w.add(g.pick(("data: ", ":", "event: ")) + giant + w.eol + w.eol)
    sse = w.bytes()
    n = len(sse)
    if n and g.chance(8) and n < 600:
        splits: tuple[int, ...] = tuple(range(1, n))
    else:
        splits = tuple(sorted({g.i(n) for _ in range(g.i(16))}))
    if ending in ("drain", "cancel", "source_error"):
        assert safe == n
    return Body(
        sse,
        splits,
        ending,
        outcome,
        code,
        limit,
        tuple(dict.fromkeys(g.secrets)),
        content0,
        SETTINGS[(logprobs, extra)],
    )


# --- the driver --------------------------------------------------------------------


class _Chunks:
    """The upstream's byte reads; after them the end, or a transport failure."""

    def __init__(self, reads: list[bytes], fail: str) -> None:
        self._reads = list(reads)
        self._fail = fail

    def __aiter__(self) -> _Chunks:
        return self

    async def __anext__(self) -> bytes:
        if self._reads:
            return self._reads.pop(0)
        if self._fail == "source_error":
            raise httpx.ReadError("connection reset")
        if self._fail == "upstream_error":
            raise UpstreamError("The upstream failed.", code="upstream_error")
        raise StopAsyncIteration


@dataclass
class Trace:
    """What the relay hands to a front: ``start``, the batches, the terminal call."""

    batches: list[list[Event]]
    terminal: str  #: "end", "fail" or "cancel"
    final: list[Event]
    error: GatewayError | None
    manifest: dict[str, Any]
    links: dict[str, str]  #: path -> url minted

    def events(self) -> list[Event]:
        return [e for b in self.batches for e in b] + self.final


def as_sent(obj: Any) -> Any:
    """``obj`` as a client reads it back: a lone surrogate goes out as U+FFFD."""
    return json.loads(json.dumps(obj, ensure_ascii=False).encode("utf-8", UNPAIRED))


def run_pipeline(body: Body, splits: Iterable[int] | None = None) -> Trace:
    """The relay's producer loop over ``body`` read in ``splits`` (sync, in memory)."""
    links = StubLinks()
    pipeline = ChatPipeline(links, body.settings)
    pipeline.meta = Meta(id="chatcmpl-test", created=1_700_000_000)
    source = SSESource(_Chunks(body.reads(splits), body.ending), max_event_bytes=body.limit)
    stop: GatewayError | str | None = "none"
    if body.ending == "drain":
        stop = Draining()
    elif body.ending == "cancel":
        stop = CANCELLED
    batches: list[list[Event]] = []
    outcome: GatewayError | str | None
    try:
        while True:
            item = run_sync(source.read())
            if item is None:
                # a stop() after the last read cancels the next one; else the end
                outcome = stop if stop != "none" else "completed"
                break
            step = run_sync(pipeline.feed(item))
            if step.events:
                batches.append(step.events)
            if step.error is not None:
                outcome = step.error
                break
            if step.done:
                outcome = "completed"
                break
    except GatewayError as exc:
        outcome = exc
    final = run_sync(pipeline.finish(failed=outcome != "completed"))
    manifest = pipeline.manifest()
    if outcome == "completed":
        return Trace(batches, "end", final, None, manifest, dict(links.minted))
    if isinstance(outcome, GatewayError):
        return Trace(batches, "fail", final, outcome, manifest, dict(links.minted))
    return Trace(batches, "cancel", final, None, manifest, dict(links.minted))


def replay(trace: Trace, front: Any) -> list[Any]:
    """The outputs a front writes for ``trace`` (in order, empty ones left out)."""
    outs = [front.start()]
    outs += [front.encode(b) for b in trace.batches]
    if trace.terminal == "end":
        outs.append(front.end(trace.final, trace.manifest))
    elif trace.terminal == "fail":
        assert trace.error is not None
        outs.append(front.fail(trace.final, trace.error, trace.manifest))
    else:
        cancel = getattr(front, "cancel", None)
        if cancel is not None:
            outs.append(cancel(trace.final, trace.manifest))
        else:
            outs.append(front.end(trace.final, trace.manifest))
    return [o for o in outs if o]


def texts(events: list[Event]) -> dict[tuple[int, str], str]:
    """The text of every channel the events carry (what a client assembles)."""
    out: dict[tuple[int, str], list[str]] = {}
    for e in events:
        if type(e) is Text:
            out.setdefault((e.choice, e.channel), []).append(e.text)
        elif type(e) is ToolCall:
            out.setdefault((e.choice, f"tool{e.index}"), []).append(e.arguments)
    return {k: "".join(v) for k, v in out.items()}


# --- the real relay (trio) ---------------------------------------------------------


class TrioChunks:
    """The upstream's reads for the real relay; after them the end, a transport failure,
    or silence until the relay is stopped (``blocked`` is set then)."""

    def __init__(self, reads: list[bytes], ending: str) -> None:
        self._reads = list(reads)
        self._ending = ending
        self.blocked = trio.Event()

    def __aiter__(self) -> TrioChunks:
        return self

    async def __anext__(self) -> bytes:
        await trio.lowlevel.checkpoint()
        if self._reads:
            return self._reads.pop(0)
        if self._ending == "source_error":
            raise httpx.ReadError("connection reset")
        if self._ending == "upstream_error":
            raise UpstreamError("The upstream failed.", code="upstream_error")
        if self._ending in ("drain", "cancel"):
            self.blocked.set()
            await trio.sleep_forever()
        raise StopAsyncIteration


async def relay_reads(
    reads: list[bytes],
    ending: str,
    front: Any,
    *,
    settings: PipelineSettings,
    limit: int = 1 << 20,
    join: Any = b"".join,
    links: StubLinks | None = None,
) -> list[Any]:
    """``front``'s outputs for upstream ``reads`` through the real :class:`Relay`, in
    memory: after the reads the end (``"done"``, ``"eof"``...), a transport failure
    (``"source_error"``, or an :class:`UpstreamError` raised by the source with
    ``"upstream_error"``), or silence until the relay is stopped (``"drain"``:
    ``relay.stop(Draining())``, ``"cancel"``: ``relay.stop(CANCELLED)``)."""
    pipeline = ChatPipeline(links or StubLinks(), settings)
    pipeline.meta = Meta(id="chatcmpl-test", created=1_700_000_000)
    chunks = TrioChunks(reads, ending)
    source = SSESource(chunks, max_event_bytes=limit)
    opts = RelayOptions(keepalive_seconds=1e9, idle_timeout_seconds=math.inf, join=join)
    relay: Relay[Any, Any, Any] = Relay(source, pipeline, front, opts)
    outs: list[Any] = []
    async with trio.open_nursery() as nursery:

        async def stop_when_silent() -> None:
            await chunks.blocked.wait()
            relay.stop(Draining() if ending == "drain" else CANCELLED)

        nursery.start_soon(stop_when_silent)
        async with relay as outputs:
            async for out in outputs:
                outs.append(out)
        nursery.cancel_scope.cancel()
    return outs


async def relay_outputs(body: Body, front: Any, join: Any = b"".join) -> list[Any]:
    """``front``'s outputs for ``body`` through the real :class:`Relay` (in memory)."""
    return await relay_reads(
        body.reads(), body.ending, front, settings=body.settings, limit=body.limit, join=join
    )


# --- reading the output ---------------------------------------------------------------


class Out(NamedTuple):
    event: str | None
    id: str | None
    data: str


def parse_sse(raw: bytes) -> list[Out]:
    """The gateway's own SSE, read strictly: UTF-8, LF only, one ``data`` line per
    event, optional ``event``/``id`` before it, comment lines only between events."""
    text = raw.decode("utf-8")  # strict: the output is valid UTF-8
    assert "\r" not in text, "CR in the output"
    assert text == "" or text.endswith("\n"), "the output ends inside a line"
    events: list[Out] = []
    cur: dict[str, str] = {}
    for line in text.split("\n")[:-1]:
        if line == "":
            assert "data" in cur, f"an event without data: {cur}"
            events.append(Out(cur.get("event"), cur.get("id"), cur["data"]))
            cur = {}
        elif line.startswith(":"):
            assert not cur, "a comment inside an event"
        else:
            name, sep, value = line.partition(": ")
            assert sep and name in ("event", "id", "data"), f"bad line {line[:80]!r}"
            assert name not in cur, f"two {name} lines in one event"
            assert "data" not in cur, f"{name} after data"
            cur[name] = value
    assert not cur, "the output ends inside an event"
    return events


def _no_constant(name: str) -> Any:
    raise AssertionError(f"not JSON: {name}")


def strict_json(data: str) -> Any:
    return json.loads(data, parse_constant=_no_constant)


def strings(value: Any) -> list[str]:
    """Every string in a JSON value, keys included."""
    out: list[str] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, dict):
            out.extend(v)
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return out


# --- allowlists ----------------------------------------------------------------------

Check = Callable[[Any, str], None]
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
_EVENT_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.:-]{0,63}")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
_CODE = re.compile(r"[a-z][a-z0-9_]{0,63}")
_ARTIFACT_ID = re.compile(r"[A-Za-z0-9_-]{16,64}")
_URL = re.compile(re.escape(LINK_PREFIX) + r"[A-Za-z0-9_-]{16,64}")
_TOKENS = re.compile(r"[a-z_]*tokens")
_TOKEN_DETAILS = re.compile(r"[a-z_]*tokens_details")


def _where(where: Any) -> str:
    parts: list[str] = []
    while isinstance(where, tuple):
        where, key = where
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
    return str(where) + "".join(reversed(parts))


def _fail(where: Any, what: str, value: Any) -> None:
    raise AssertionError(f"{_where(where)}: {what}: {value!r}"[:300])


def text(v: Any, where: Any) -> None:
    if not isinstance(v, str):
        _fail(where, "not a string", v)


def id_str(v: Any, where: Any) -> None:
    if not (isinstance(v, str) and _ID.fullmatch(v)):
        _fail(where, "not an id", v)


def name_str(v: Any, where: Any) -> None:
    if not (isinstance(v, str) and _NAME.fullmatch(v)):
        _fail(where, "not a function name", v)


def code_str(v: Any, where: Any) -> None:
    if not (isinstance(v, str) and _CODE.fullmatch(v)):
        _fail(where, "not an error code", v)


def integer(v: Any, where: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**53:
        _fail(where, "not a count", v)


def small_int(v: Any, where: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 1024:
        _fail(where, "not a small index", v)


def boolean(v: Any, where: Any) -> None:
    if not isinstance(v, bool):
        _fail(where, "not a boolean", v)


def logprob(v: Any, where: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, int | float) or not (math.isfinite(v) and v <= 0):
        _fail(where, "not a log-probability", v)


def one_of(*words: Any) -> Check:
    allowed = frozenset(words)

    def check(v: Any, where: Any) -> None:
        if isinstance(v, list | dict) or v not in allowed:
            _fail(where, f"not one of {sorted(map(str, allowed))}", v)

    return check


def nullable(inner: Any) -> Check:
    def check(v: Any, where: Any) -> None:
        if v is not None:
            conform(v, inner, where)

    return check


def empty_list(v: Any, where: Any) -> None:
    if v != []:
        _fail(where, "not []", v)


def identifier_json(v: Any, where: Any, depth: int = 0) -> None:
    """Any JSON value whose object keys are all plain identifiers (finite numbers)."""
    if isinstance(v, dict):
        for k, x in v.items():
            if not _IDENT.fullmatch(k):
                _fail(where, "key not an identifier", k)
            identifier_json(x, (where, k), depth + 1)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            identifier_json(x, (where, i), depth + 1)
    elif isinstance(v, float) and not math.isfinite(v):
        _fail(where, "not a finite number", v)
    elif v is not None and not isinstance(v, str | int | float | bool):
        _fail(where, "not JSON", v)


def token_counts(v: Any, where: Any) -> None:
    """``usage``: ``*_tokens`` counts and ``*_tokens_details`` objects of them."""
    if not isinstance(v, dict):
        _fail(where, "not an object", v)
    for k, x in v.items():
        if _TOKENS.fullmatch(k):
            integer(x, (where, k))
        elif _TOKEN_DETAILS.fullmatch(k) and isinstance(x, dict):
            for k2, n in x.items():
                if not _TOKENS.fullmatch(k2):
                    _fail(where, "not a token count", k2)
                integer(n, ((where, k), k2))
        else:
            _fail(where, "not a token count", k)


class Obj(NamedTuple):
    """An object with these keys (``required`` ones must be there, no others allowed)."""

    fields: dict[str, Any]
    required: frozenset[str] = frozenset()


def obj(required: Iterable[str] = (), /, **fields: Any) -> Obj:
    return Obj(fields, frozenset(required))


def conform(value: Any, schema: Any, where: Any = "$") -> None:
    """Check ``value`` against ``schema`` (a check, an :class:`Obj` or ``[item]``);
    ``where`` is built lazily (a nested tuple, spelled out only on failure)."""
    if schema is text:
        if type(value) is not str:
            _fail(where, "not a string", value)
    elif isinstance(schema, Obj):
        if type(value) is not dict:
            _fail(where, "not an object", value)
        fields = schema.fields
        for k, v in value.items():
            sub = fields.get(k)
            if sub is None:
                _fail(where, "unknown key", k)
            conform(v, sub, (where, k))
        if not schema.required <= value.keys():
            _fail(where, "missing keys", sorted(schema.required - value.keys()))
    elif isinstance(schema, list):
        if type(value) is not list:
            _fail(where, "not a list", value)
        for i, v in enumerate(value):
            conform(v, schema[0], (where, i))
    else:
        schema(value, where)


def link_url(v: Any, where: Any) -> None:
    """A link of the (stub) resolver; that it was minted is checked with every string
    of the output (:func:`check_links`)."""
    if not (isinstance(v, str) and _URL.fullmatch(v)):
        _fail(where, "not a managed-download link", v)


def _artifact_id(v: Any, where: Any) -> None:
    if not (isinstance(v, str) and _ARTIFACT_ID.fullmatch(v)):
        _fail(where, "not an artifact id", v)


MANIFEST_SCHEMA = obj(
    ("download_link_mode", "artifacts"),
    download_link_mode=one_of("private", "public"),
    artifacts=[
        obj(
            ("id", "filename", "url", "link_mode", "bytes"),
            id=_artifact_id,
            filename=text,
            url=link_url,
            link_mode=one_of("private", "public"),
            bytes=integer,
        )
    ],
)


ERROR_SCHEMA = obj(("message", "type", "code"), message=text, type=code_str, code=code_str)
SHORT_ERROR_SCHEMA = obj(("code", "message"), code=code_str, message=text)


@functools.cache
def chat_chunk_schema(extra_keys: tuple[str, ...] = (), finish_words: tuple[str, ...] = ()) -> Obj:
    """``chat.completion.chunk`` as the chat front writes it (docs/api.md, "Streams")."""
    function = obj(name=name_str, arguments=text)
    tool_call = obj(
        ("index",), index=small_int, id=id_str, type=one_of("function"), function=function
    )
    delta = obj(
        role=one_of(*ROLES),
        content=text,
        reasoning_content=text,
        reasoning=text,
        refusal=text,
        tool_calls=[tool_call],
        function_call=function,
    )
    entry = obj(
        ("token", "logprob", "bytes", "top_logprobs"),
        token=text,
        logprob=logprob,
        bytes=[lambda v, w: None if isinstance(v, int) and 0 <= v < 256 else _fail(w, "byte", v)],
        top_logprobs=empty_list,
    )
    choice = obj(
        ("index", "delta", "finish_reason"),
        index=lambda v, w: None if isinstance(v, int) and 0 <= v < 128 else _fail(w, "index", v),
        delta=delta,
        finish_reason=nullable(one_of(*FINISH_REASONS, *finish_words)),
        logprobs=obj(("content",), content=[entry]),
    )
    return obj(
        ("id", "object", "created", "model", "choices"),
        id=id_str,
        object=one_of("chat.completion.chunk"),
        created=integer,
        model=text,
        system_fingerprint=id_str,
        choices=[choice],
        usage=token_counts,
        gateway=MANIFEST_SCHEMA,
        error=ERROR_SCHEMA,
        **{k: identifier_json for k in extra_keys},
    )


def named_data(v: Any, where: Any) -> None:
    """A relayed unknown event: identifier keys, no key a client acts on, ``choices: []``."""
    if not isinstance(v, dict):
        _fail(where, "not an object", v)
    if v.get("choices") != []:
        _fail(where, "choices is not []", v.get("choices"))
    for k in v:
        if k in CLIENT_KEYS and k != "choices":
            _fail(where, "a key clients act on", k)
    identifier_json(v, where)


# -- Responses

_RESP_ID = re.compile(r"resp_[0-9a-f]{32}")
_MSG_ID = re.compile(r"msg_[0-9a-f]{24}")
_FC_ID = re.compile(r"fc_[0-9a-f]{24}")


def matches(pattern: re.Pattern[str]) -> Check:
    def check(v: Any, where: Any) -> None:
        if not (isinstance(v, str) and pattern.fullmatch(v)):
            _fail(where, f"does not match {pattern.pattern}", v)

    return check


@functools.cache
def responses_schemas() -> dict[str, Obj]:
    """Every Responses stream event the front writes, by ``type`` (docs/api.md)."""
    part = obj(
        ("type", "text", "annotations"),
        type=one_of("output_text"),
        text=text,
        annotations=empty_list,
    )
    status = one_of("in_progress", "completed", "incomplete")
    message = obj(
        ("id", "type", "status", "role", "content"),
        id=matches(_MSG_ID),
        type=one_of("message"),
        status=status,
        role=one_of("assistant"),
        content=[part],
    )
    call = obj(
        ("id", "type", "status", "call_id", "name", "arguments"),
        id=matches(_FC_ID),
        type=one_of("function_call"),
        status=status,
        call_id=id_str,
        name=lambda v, w: None if v == "" else name_str(v, w),
        arguments=text,
    )

    def item(v: Any, where: Any) -> None:
        conform(
            v, call if isinstance(v, dict) and v.get("type") == "function_call" else message, where
        )

    usage = obj(
        (
            "input_tokens",
            "input_tokens_details",
            "output_tokens",
            "output_tokens_details",
            "total_tokens",
        ),
        input_tokens=integer,
        input_tokens_details=obj(("cached_tokens",), cached_tokens=integer),
        output_tokens=integer,
        output_tokens_details=obj(("reasoning_tokens",), reasoning_tokens=integer),
        total_tokens=integer,
    )
    envelope = obj(
        (
            "id",
            "object",
            "created_at",
            "status",
            "background",
            "model",
            "output",
            "parallel_tool_calls",
            "tool_choice",
            "tools",
            "error",
            "incomplete_details",
            "usage",
        ),
        id=matches(_RESP_ID),
        object=one_of("response"),
        created_at=integer,
        status=one_of("queued", "in_progress", "completed", "incomplete", "failed", "cancelled"),
        background=boolean,
        model=text,
        output=[item],
        parallel_tool_calls=boolean,
        tool_choice=one_of("auto"),
        tools=empty_list,
        error=nullable(SHORT_ERROR_SCHEMA),
        incomplete_details=nullable(
            obj(("reason",), reason=one_of("max_output_tokens", "content_filter"))
        ),
        usage=nullable(usage),
        output_text=text,
        gateway=MANIFEST_SCHEMA,
    )
    base = {"type": text, "sequence_number": integer}
    req = ("type", "sequence_number")
    lifecycle = obj((*req, "response"), **base, response=envelope)
    ids = {"item_id": matches(_MSG_ID), "output_index": one_of(0), "content_index": one_of(0)}
    idr = (*req, "item_id", "output_index", "content_index")
    fc_ids = {"item_id": matches(_FC_ID), "output_index": small_int}
    return {
        **{
            f"response.{s}": lifecycle
            for s in ("created", "in_progress", "completed", "incomplete", "failed", "cancelled")
        },
        "response.output_item.added": obj(
            (*req, "output_index", "item"), **base, output_index=small_int, item=item
        ),
        "response.output_item.done": obj(
            (*req, "output_index", "item"), **base, output_index=small_int, item=item
        ),
        "response.content_part.added": obj((*idr, "part"), **base, **ids, part=part),
        "response.content_part.done": obj((*idr, "part"), **base, **ids, part=part),
        "response.output_text.delta": obj((*idr, "delta"), **base, **ids, delta=text),
        "response.output_text.done": obj((*idr, "text"), **base, **ids, text=text),
        "response.function_call_arguments.delta": obj(
            (*req, "item_id", "output_index", "delta"), **base, **fc_ids, delta=text
        ),
        "response.function_call_arguments.done": obj(
            (*req, "item_id", "output_index", "arguments"), **base, **fc_ids, arguments=text
        ),
    }


# -- runs


@functools.cache
def runs_schemas(run_id: str) -> dict[str, Obj]:
    """Every run event the runs front writes, by ``event`` (docs/api.md, DESIGN.md)."""
    base = {"event": text, "run_id": one_of(run_id), "seq": integer}
    req = ("event", "run_id", "seq")
    manifest = MANIFEST_SCHEMA
    return {
        "run.started": obj((*req, "model"), **base, model=text),
        "message.delta": obj((*req, "delta"), **base, delta=text),
        "tool.started": obj((*req, "tool_call_id", "name"), **base, tool_call_id=id_str, name=text),
        "tool.completed": obj(
            (*req, "tool_call_id", "name", "arguments"),
            **base,
            tool_call_id=id_str,
            name=text,
            arguments=text,
        ),
        "run.completed": obj(
            (*req, "output", "usage", "gateway"),
            **base,
            output=text,
            usage=nullable(token_counts),
            gateway=manifest,
        ),
        "run.failed": obj(
            (*req, "error", "output", "gateway"),
            **base,
            error=SHORT_ERROR_SCHEMA,
            output=text,
            gateway=manifest,
        ),
        "run.cancelled": obj((*req, "output", "gateway"), **base, output=text, gateway=manifest),
    }


# --- checking a front's output -------------------------------------------------------

_NOTE_URL = "gw.test"


def check_links(strings_: Iterable[str], links: dict[str, str]) -> set[str]:
    """Every mention of the link host is a whole minted link; the links seen."""
    joined = "\x00".join(strings_)
    found = _URL.findall(joined)
    assert joined.count(_NOTE_URL) == len(found), "the link host outside a minted link"
    seen = set(found)
    assert seen <= set(links.values()), f"not a minted link: {seen - set(links.values())}"
    return seen


def check_no_leak(raw: str, strings_: Iterable[str], secrets: tuple[str, ...]) -> None:
    """No secret in the raw output, in any decoded string, in any assembled text.

    The output is append-only and every view of it (raw, percent-decoded,
    JSON-unescaped) is a local transform, so a secret in a prefix of the output is in
    the whole output: checking the whole covers every prefix."""
    found = pathgen.leaked(raw, secrets)
    assert not found, f"leaked {found} in the output"
    joined = "\x00".join(strings_)
    found = pathgen.leaked(joined, secrets)
    assert not found, f"leaked {found} in a client-visible string"


class ChatView(NamedTuple):
    chunks: list[dict[str, Any]]
    named: list[tuple[str, Any]]
    texts: dict[tuple[int, str], str]  #: (choice, channel or "tool<i>"/"fc") -> text
    strings: list[str]


def read_chat(raw: bytes, extra_keys: Iterable[str] = (), *, named: bool = True) -> ChatView:
    """A chat stream, read strictly against the allowlist."""
    events = parse_sse(raw)
    assert events and events[-1] == Out(None, None, "[DONE]"), "no [DONE] at the end"
    schema = chat_chunk_schema(tuple(extra_keys), ("error",))
    chunks: list[dict[str, Any]] = []
    named_events: list[tuple[str, Any]] = []
    strings_: list[str] = []
    texts_: dict[tuple[int, str], list[str]] = {}
    for ev in events[:-1]:
        assert ev.id is None and ev.data != "[DONE]"
        value = strict_json(ev.data)
        strings_.extend(strings(value))
        if ev.event is not None:
            assert named, f"a named event on a stream without them: {ev.event}"
            assert _EVENT_NAME.fullmatch(ev.event) and ev.event not in ("error", "message")
            named_data(value, f"event {ev.event}")
            named_events.append((ev.event, value))
            continue
        conform(value, schema)
        chunks.append(value)
        for c in value["choices"]:
            delta = c["delta"]
            for name in ("content", "reasoning_content", "reasoning", "refusal"):
                if name in delta:
                    texts_.setdefault((c["index"], name), []).append(delta[name])
            for call in delta.get("tool_calls", ()):
                texts_.setdefault((c["index"], f"tool{call['index']}"), []).append(
                    call["function"].get("arguments", "")
                )
            if "function_call" in delta:
                texts_.setdefault((c["index"], "fc"), []).append(
                    delta["function_call"].get("arguments", "")
                )
    assert chunks, "no chunk"
    assert "gateway" in chunks[-1], "the terminal chunk has no manifest"
    for c in chunks[:-1]:
        assert "gateway" not in c and "error" not in c, "manifest or error before the end"
    return ChatView(chunks, named_events, {k: "".join(v) for k, v in texts_.items()}, strings_)


def check_chat(
    raw: bytes,
    trace: Trace,
    body: Body,
    *,
    extra_keys: Iterable[str] = (),
    named: bool = True,
    all_links: bool = True,
) -> ChatView:
    view = read_chat(raw, extra_keys, named=named)
    texts_ = list(view.texts.values())
    check_no_leak(raw.decode(), [*view.strings, *texts_], body.secrets)
    seen = check_links([*view.strings, *texts_], trace.links)
    last = view.chunks[-1]
    manifest_urls = {a["url"] for a in last["gateway"]["artifacts"]}
    assert last["gateway"] == as_sent(trace.manifest)
    assert seen <= manifest_urls, "a link missing from the manifest"
    if all_links:
        assert seen == manifest_urls, "a manifest entry that no event carries"
    finish = last
    if not last["choices"]:  # usage in a chunk of its own after the finish chunk
        assert "usage" in last and len(view.chunks) >= 2
        finish = view.chunks[-2]
    reasons = [c["finish_reason"] for c in finish["choices"]]
    assert reasons and all(r is not None for r in reasons), "a choice without its finish"
    assert [c["index"] for c in finish["choices"]] == sorted(
        {c["index"] for c in finish["choices"]}
    )
    if trace.terminal == "fail":
        assert trace.error is not None
        assert last["error"] == as_sent(trace.error.error_object())
    else:
        assert "error" not in last and "error" not in reasons
    # every finish reason is on the finish chunk, none before it
    for c in view.chunks:
        if c is not finish:
            assert all(ch["finish_reason"] is None for ch in c["choices"]), "an early finish"
    return view


def read_responses(raw: bytes) -> list[dict[str, Any]]:
    schemas = responses_schemas()
    out = []
    for n, ev in enumerate(parse_sse(raw)):
        value = strict_json(ev.data)
        assert ev.event == value.get("type") and ev.id is None
        assert value["type"] in schemas, f"unknown event {value['type']}"
        conform(value, schemas[value["type"]], value["type"])
        assert value["sequence_number"] == n, "sequence numbers are not 0, 1, 2, ..."
        out.append(value)
    return out


RESPONSE_TERMINALS = {
    "response.completed",
    "response.incomplete",
    "response.failed",
    "response.cancelled",
}


def check_responses(raw: bytes, trace: Trace, body: Body) -> list[dict[str, Any]]:
    evs = read_responses(raw)
    types = [e["type"] for e in evs]
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert types[-1] in RESPONSE_TERMINALS and not RESPONSE_TERMINALS & set(types[:-1])
    final = evs[-1]["response"]
    assert final["gateway"] == as_sent(trace.manifest)
    deltas = "".join(e["delta"] for e in evs if e["type"] == "response.output_text.delta")
    assert final["output_text"] == deltas
    args: dict[str, list[str]] = {}
    for e in evs:
        if e["type"] == "response.function_call_arguments.delta":
            args.setdefault(e["item_id"], []).append(e["delta"])
    if types[-1] in ("response.completed", "response.incomplete"):
        done = [e for e in evs if e["type"] == "response.output_text.done"]
        assert len(done) == 1 and done[0]["text"] == deltas
        assert final["output"][0]["content"][0]["text"] == deltas
        for item in final["output"][1:]:
            assert item["arguments"] == "".join(args.get(item["id"], ()))
        for e in evs:
            if e["type"] == "response.function_call_arguments.done":
                assert e["arguments"] == "".join(args.get(e["item_id"], ()))
    if trace.terminal == "fail":
        assert types[-1] == "response.failed"
        assert trace.error is not None and final["error"]["code"] == trace.error.code
    strings_ = [s for e in evs for s in strings(e)]
    texts_ = [deltas, *("".join(v) for v in args.values())]
    check_no_leak(raw.decode(), [*strings_, *texts_], body.secrets)
    seen = check_links([*strings_, *texts_], trace.links)
    assert seen <= {a["url"] for a in trace.manifest["artifacts"]}
    return evs


def read_runs(raw: bytes, run_id: str) -> list[dict[str, Any]]:
    schemas = runs_schemas(run_id)
    out = []
    for n, ev in enumerate(parse_sse(raw), start=1):
        value = strict_json(ev.data)
        assert ev.event is None and ev.id == str(value.get("seq"))
        assert value.get("event") in schemas, f"unknown run event {value.get('event')}"
        conform(value, schemas[value["event"]], value["event"])
        assert value["seq"] == n, "run sequence numbers are not 1, 2, ..."
        out.append(value)
    return out


RUN_TERMINALS = {"run.completed", "run.failed", "run.cancelled"}


def check_runs(raw: bytes, trace: Trace, body: Body, run_id: str) -> list[dict[str, Any]]:
    evs = read_runs(raw, run_id)
    kinds = [e["event"] for e in evs]
    assert kinds[0] == "run.started"
    assert kinds[-1] in RUN_TERMINALS and not RUN_TERMINALS & set(kinds[:-1])
    final = evs[-1]
    output = "".join(e["delta"] for e in evs if e["event"] == "message.delta")
    assert final["output"] == output and final["gateway"] == as_sent(trace.manifest)
    expected = {"end": "run.completed", "fail": "run.failed", "cancel": "run.cancelled"}
    assert kinds[-1] == expected[trace.terminal]
    if trace.terminal == "fail":
        assert trace.error is not None and final["error"]["code"] == trace.error.code
    started = [e["tool_call_id"] for e in evs if e["event"] == "tool.started"]
    completed = [e["tool_call_id"] for e in evs if e["event"] == "tool.completed"]
    assert sorted(started) == sorted(completed), "a tool started and never completed"
    strings_ = [s for e in evs for s in strings(e)]
    check_no_leak(raw.decode(), [*strings_, output], body.secrets)
    seen = check_links([*strings_, output], trace.links)
    assert seen <= {a["url"] for a in trace.manifest["artifacts"]}
    return evs


# --- the proxy's side ------------------------------------------------------------------


def run_proxy(
    journal_sse: bytes, splits: Iterable[int], links: dict[str, str], mode: str = "private"
) -> Trace:
    """The proxy's relay over a run's events (``GET /v1/runs/{id}/events``) read in
    ``splits``: :class:`RemoteRunSource`'s parsing, :class:`RunEventStage`."""
    from gateway.proxy.stream import RemoteRunSource, RunEventStage

    stage = RunEventStage(mode, base_url=LINK_BASE, extra_roots=pathgen.CONFIG_ROOTS)
    source = RemoteRunSource(None, "run_x", {})  # type: ignore[arg-type]  # only parsing
    cuts = sorted({0, *splits, len(journal_sse)})
    batches: list[list[Event]] = []
    outcome: GatewayError | str | None = None
    try:
        for a, b in itertools.pairwise(cuts):
            item = source._events(journal_sse[a:b])
            step = run_sync(stage.feed(item))
            if step.events:
                batches.append(step.events)
            error = getattr(step, "error", None)
            if error is not None:
                outcome = error
                break
            if step.done:
                outcome = "completed"
                break
            if source.ended:
                break
        else:
            raise AssertionError("the run's events ended without a terminal event")
    except GatewayError as exc:
        outcome = exc
    assert outcome is not None, "the run's events ended without a terminal event"
    final = run_sync(stage.finish(failed=outcome != "completed"))
    manifest = stage.manifest()
    if isinstance(outcome, GatewayError):
        return Trace(batches, "fail", final, outcome, manifest, links)
    return Trace(batches, "end", final, None, manifest, links)
