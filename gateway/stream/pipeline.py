"""The one event pipeline: upstream chat-completion chunks → rewritten neutral events.

Every front (chat, Responses, runs, and through runs the Open WebUI proxy) reads the
upstream through :class:`ChatPipeline`, so a fix to rewriting lands everywhere at once.

Strategy
--------
One model of a chunk, with an allowlist: the pipeline reads only the fields of the
chat-completion chunk it knows, checks every structural value by shape
(:mod:`gateway.core.checks`) and rewrites every string; the result is a list of small
typed events (:mod:`gateway.core.events`). Anything else an upstream sends (unknown keys,
wrong types, ``choices`` that is not a list, a string ``delta``) is dropped, unless the
operator listed the key in ``[output] extra_chunk_keys`` (then its strings are
rewritten). ``logprobs`` are dropped unless ``[output] logprobs`` is on; then each
delta's log-probability is attached to the rewritten text (upstream's tokens, which
can hold a path split across them, never leave).

Each text *channel* (a choice's ``content``, ``reasoning_content``, ``reasoning``,
``refusal``, and each tool call's ``arguments``) has its own streaming rewriter; the
text it says is safe goes out at once. When a choice reports ``finish_reason`` its
channels are flushed before the :class:`~gateway.core.events.Finish` event; at the end of
the stream whatever is still held comes out of :meth:`ChatPipeline.finish` (file
names only after a failure). Every other string is rewritten whole.

Resolving a path into a link is async (file checks and database writes run in
worker threads), so the pipeline awaits the resolver between rewriter calls; text
without a path never awaits.
"""

from __future__ import annotations

import hashlib
import json
import math
import secrets
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.core.checks import (
    FINISH_REASONS,
    ROLES,
    JSONTooDeep,
    check_created,
    check_id,
    check_index,
    check_name,
    check_usage,
    event_name,
    identifier,
    loads_bounded,
)
from gateway.core.errors import GatewayError, UpstreamError
from gateway.core.events import (
    BOUNDARY,
    TEXT_CHANNELS,
    Event,
    Extra,
    Finish,
    Logprobs,
    Meta,
    Named,
    Role,
    Text,
    ToolCall,
    ToolProgress,
    Usage,
)
from gateway.core.paths import (
    DEFAULT_MAX_PATH_CHARS,
    Context,
    PathDetector,
    PathMatch,
    could_contain_path,
)
from gateway.core.reports import paths_in, tool_progress_texts
from gateway.core.rewrite import Piece, StreamRewriter, piece_paths, render_piece, scrub_identifier
from gateway.core.sse import SSEEvent

__all__ = ["CLIENT_KEYS", "ChatPipeline", "LinkResolver", "PipelineSettings", "Scrubber", "Step"]

MAX_CHOICES = 128
#: json.loads' own scanner, called directly (see ChatPipeline._plain_delta)
_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
#: json.loads' string scanner (strict, as json.loads is: no raw control characters)
_SCANSTRING: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]
#: how many times a stream may learn a new template of its plain deltas (a stream whose
#: chunks differ in more than their text, e.g. a timestamp per chunk, stops trying)
TEMPLATE_TRIES = 4
#: the lowest log-probability relayed (-Infinity is not JSON)
_LOWEST = -sys.float_info.max
MAX_TOOL_CALLS = 1024
#: characters of a tool's status line shown (a label, a preview: every path its name)
STATUS_CHARS = 500
#: how many times :data:`STATUS_CHARS` of a status line are read (``names(limit=)``)
NAMES_READ = 4
#: the Hermes agent's named event of a tool's progress (reports the files it writes)
TOOL_PROGRESS = "hermes.tool.progress"
#: its ``status`` values as :class:`~gateway.core.events.ToolProgress` statuses
_PROGRESS_STATUS = {"running": "started", "completed": "completed", "failed": "failed"}
#: bounds of the scrubbed model ids kept per app (PipelineSettings.identifiers)
IDENTIFIER_CACHE_SIZE = 256
IDENTIFIER_CACHE_CHARS = 256
#: characters of one text fed to a rewriter between two pauses (≈ 10–50 ms of work for
#: the worst inputs measured, ≈ 3 s per MB)
FEED_SLICE = 16_384
#: keys that clients act on when they appear in a chunk (Open WebUI runs an ``event`` of
#: type ``execute`` as JavaScript), and the gateway's own or a chunk's identity (a forged
#: ``gateway`` manifest with ``javascript:`` links; a named event posing as a chunk):
#: never relayed from an unknown event's data
CLIENT_KEYS = frozenset(
    {"event", "error", "usage", "choices", "sources", "citations", "selected_model_id", "files"}
    | {"gateway", "object", "id", "model", "created", "system_fingerprint"}
)


class LinkResolver(Protocol):
    """The links of one answer (:class:`gateway.links.artifacts.ResponseLinks`): a path's
    link or None (its name alone) at each mention, the same link for the same path;
    ``report`` takes the paths the agent says it writes, ``seal`` (once, when the
    answer ends) binds the links to the files as the answer leaves them, and
    ``manifest`` lists them."""

    @property
    def download_link_mode(self) -> str: ...

    async def resolve(self, path: str) -> str | None: ...

    async def resolve_many(self, paths: list[str]) -> dict[str, str | None]:
        """The answers for ``paths`` in order, stopping before the first that fails
        (missing paths are then asked of :meth:`resolve`, which raises)."""
        ...

    def report(self, paths: Iterable[str]) -> None: ...

    async def seal(self) -> None: ...

    def manifest(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class PipelineSettings:
    """What shapes a pipeline besides its resolver (built once per app)."""

    detector: PathDetector = field(default_factory=lambda: PathDetector.shared())
    extra_chunk_keys: frozenset[str] = frozenset()
    logprobs: bool = False
    max_json_depth: int = 64
    #: model ids already scrubbed (a pure function of the id and the detector): each
    #: stream's first chunk names the model, and scrubbing one cost ~25 µs a request
    identifiers: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def build(
        cls,
        extra_roots: Iterable[str] = (),
        *,
        max_path_chars: int = DEFAULT_MAX_PATH_CHARS,
        **kw: Any,
    ) -> PipelineSettings:
        return cls(PathDetector.shared(tuple(extra_roots), max_path_chars), **kw)


@dataclass
class Step:
    """What upstream SSE events became; ``done`` at ``[DONE]``; ``error`` when the
    upstream reported one (the events before it still go out)."""

    events: list[Event]
    done: bool = False
    error: GatewayError | None = None


@dataclass
class PipelineStats:
    """Paths rewritten into links and into names (fed to the metrics)."""

    links: int = 0
    names: int = 0


class Scrubber:
    """Rewrites whole strings and JSON values with one resolver (paths → links or names)."""

    def __init__(
        self,
        resolver: LinkResolver,
        settings: PipelineSettings,
        *,
        pause: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.resolver = resolver
        self.settings = settings
        self.stats = PipelineStats()
        #: the first failure of the resolver (the store down): from then on every path
        #: is its name, and the stream ends with this error after the text it held
        self.failure: GatewayError | None = None
        #: awaited between slices of a long text (the glue passes a trio checkpoint): a
        #: 1 MB event of path-like text costs seconds of rewriting, which must not stop
        #: every other stream of the process meanwhile
        self.pause = pause

    async def feed_pieces(self, rw: StreamRewriter, text: str) -> list[Piece]:
        """``rw.feed_pieces(text)``, a long text fed in slices with a pause between them
        (the rewriter's output does not depend on how its input is cut)."""
        if len(text) <= FEED_SLICE or self.pause is None:
            return rw.feed_pieces(text)
        pieces: list[Piece] = []
        for at in range(0, len(text), FEED_SLICE):
            pieces += rw.feed_pieces(text[at : at + FEED_SLICE])
            await self.pause()
        return pieces

    def rewriter(self, *, json_text: bool = False) -> StreamRewriter:
        """A streaming rewriter; ``json_text`` for channels that are JSON text (tool-call
        arguments), whose replacements must stay valid inside JSON strings."""
        return StreamRewriter(detector=self.settings.detector, json_text=json_text)

    async def render(
        self,
        pieces: list[Piece],
        *,
        name_only: bool = False,
        json_text: bool = False,
        answers: dict[str, str | None] | None = None,
    ) -> str:
        """The text of rewriter pieces, each path resolved (or its name alone);
        ``answers``: what :meth:`prefetch` gave for them (else it is asked here)."""
        name_only = name_only or self.failure is not None
        if not name_only and answers is None:
            answers = await self._prefetch_or_fail([pieces])
            name_only = self.failure is not None
        urls: dict[str, str | None] = {}
        stats = self.stats
        for piece in pieces:
            if isinstance(piece, str):
                continue
            found = piece_paths(piece)
            if isinstance(piece, PathMatch) and piece.overlong:
                stats.names += 1
            for p in found:
                if p.path not in urls and not name_only:
                    assert answers is not None
                    urls[p.path] = await self._answer(p.path, answers)
                    name_only = self.failure is not None
                if urls.get(p.path) is None:
                    stats.names += 1
                else:
                    stats.links += 1

        def url_of(p: PathMatch) -> str | None:
            return urls.get(p.path)

        return "".join(render_piece(p, url_of, json_text=json_text) for p in pieces)

    async def _answer(self, path: str, answers: dict[str, str | None]) -> str | None:
        """The prefetched answer for ``path``, else the resolver's; a failure of the
        resolver is kept in :attr:`failure` (None: the name, and names from then on)."""
        if path in answers:
            return answers[path]
        try:
            return await self.resolver.resolve(path)
        except GatewayError as exc:
            self.failure = exc
            return None

    async def prefetch(self, batches: list[list[Piece]]) -> dict[str, str | None]:
        """The answers for the paths of ``batches``, checked together (one
        worker-thread hop) before they are rendered one by one; a path the batch could
        not answer is missing (its :meth:`render` asks the resolver alone, which
        raises the failure in its place)."""
        paths = [p.path for pieces in batches for piece in pieces for p in piece_paths(piece)]
        return await self.resolver.resolve_many(paths) if paths else {}

    async def _prefetch_or_fail(self, batches: list[list[Piece]]) -> dict[str, str | None]:
        """:meth:`prefetch`, a failure kept in :attr:`failure` (no answers then)."""
        try:
            return await self.prefetch(batches)
        except GatewayError as exc:
            self.failure = exc
            return {}

    def names(self, text: str, limit: int | None = None) -> str:
        """One-shot rewrite of a short string, every path its name (no link, no pause).
        With ``limit``, at most that many characters come out and only the first
        :data:`NAMES_READ` times ``limit`` are read (a status line from upstream can be
        a megabyte: read whole, it would hold the loop for seconds); a path cut there
        ends in part of its name, never more of it."""
        if limit is not None:
            text = text[: NAMES_READ * limit]
        if could_contain_path(text):
            rw = self.rewriter()
            text = rw.feed(text) + rw.flush()
        return text if limit is None else text[:limit]

    def identifier(self, text: str) -> str:
        """An identifier (a model id): :func:`gateway.core.rewrite.scrub_identifier`, kept
        per app for ids of up to :data:`IDENTIFIER_CACHE_CHARS` characters (at most
        :data:`IDENTIFIER_CACHE_SIZE` of them)."""
        cache = self.settings.identifiers
        done = cache.get(text)
        if done is None:
            done = scrub_identifier(text, self.names)
            if len(text) <= IDENTIFIER_CACHE_CHARS:
                if len(cache) >= IDENTIFIER_CACHE_SIZE:
                    cache.clear()
                cache[text] = done
        return done

    async def text(self, text: str, *, name_only: bool = False, field: bool = False) -> str:
        """One-shot rewrite of a complete string. ``field``: a JSON field's value, where
        a value that is a path and nothing else becomes its link alone (a bare URL, as
        in a quoted string), not a markdown link."""
        if not could_contain_path(text):
            return text
        rw = self.rewriter()
        pieces = await self.feed_pieces(rw, text) + rw.flush_pieces()
        if field and len(pieces) == 1 and isinstance(pieces[0], PathMatch):
            pieces = [pieces[0]._replace(context=Context.QUOTED)]
        return await self.render(pieces, name_only=name_only)

    async def value(self, value: Any, depth: int = 0) -> Any:
        """A JSON value with every string rewritten; keys must be identifiers."""
        if isinstance(value, str):
            return await self.text(value, field=True)
        if value is None or isinstance(value, bool | int):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else None  # NaN/Infinity are not JSON
        if depth >= self.settings.max_json_depth:
            return None
        if isinstance(value, list):
            return [await self.value(v, depth + 1) for v in value]
        if isinstance(value, dict):
            return {k: await self.value(v, depth + 1) for k, v in value.items() if identifier(k)}
        return None


def _skip_ws(text: str, at: int) -> int:
    """The first index from ``at`` that is not JSON whitespace."""
    while at < len(text) and text[at] in " \t\n\r":
        at += 1
    return at


def _tool_id(value: object) -> str | None:
    """A tool call's id as sent when it has an id's shape; another value is replaced by a
    stable stand-in (the same input gives the same id), never relayed; None if absent."""
    if value is None or value == "":
        return None
    checked = check_id(value)
    if checked is not None:
        return checked
    return (
        "call_" + hashlib.sha256(repr(value).encode("utf-8", "backslashreplace")).hexdigest()[:24]
    )


@dataclass(slots=True)
class _Choice:
    channels: dict[str, StreamRewriter] = field(default_factory=dict)
    tools: dict[int, StreamRewriter] = field(default_factory=dict)
    finished: bool = False
    logprob: float = 0.0  # of text held back, attached to the next emitted text
    #: the last content delta came with logprobs (held text gets some only then)
    has_logprobs: bool = False


class ChatPipeline(Scrubber):
    """Rewrites one upstream chat-completion stream (or one non-streaming body)."""

    def __init__(
        self,
        resolver: LinkResolver,
        settings: PipelineSettings | None = None,
        *,
        pause: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(resolver, settings or PipelineSettings(), pause=pause)
        self._choices: dict[int, _Choice] = {}
        self._meta_raw: tuple[object, ...] | None = None
        self._meta_sent = False
        #: the text before and after a plain delta's content string, and the metadata
        #: it was learnt under (see _from_template)
        self._template: tuple[str, str, tuple[object, ...] | None] | None = None
        self._template_tries = TEMPLATE_TRIES
        #: the agent's tools seen so far (Hermes's toolCallId → the answer's tool number)
        self._tool_numbers: dict[str, int] = {}
        self.meta = Meta(id="chatcmpl-" + secrets.token_hex(12), created=int(time.time()))

    # -- streaming -----------------------------------------------------------------

    async def feed(self, events: list[SSEEvent]) -> Step:
        """The upstream SSE events of one read → events to emit (``done`` at ``[DONE]``)."""
        out: list[Event] = []
        plain = not self.settings.extra_chunk_keys and not self.settings.logprobs
        held: list[list[Piece]] = []  # plain deltas with paths, rendered together
        for ev in events:
            if plain and (ev.event == "message" or ev.event == ""):
                pieces = self._plain_delta(ev.data)
                if pieces is not None:  # what the general path makes of it, without awaits
                    if len(pieces) == 1 and type(pieces[0]) is str:
                        if held:
                            held.append(pieces)
                        elif pieces[0]:
                            out.append(Text(0, "content", pieces[0]))
                            out.append(BOUNDARY)
                    elif pieces:
                        held.append(pieces)
                    continue
            try:
                if held:
                    await self._render_held(held, out)
                step = await self.feed_event(ev)
            except GatewayError as exc:
                return Step(out, error=exc)
            if step.events:
                out.extend(step.events)
                out.append(BOUNDARY)
            if self.failure is not None:  # the text so far went out as names
                return Step(out, error=self.failure)
            if step.done:
                return Step(out, done=True)
        if held:
            try:
                await self._render_held(held, out)
            except GatewayError as exc:
                return Step(out, error=exc)
        return Step(out, error=self.failure)

    async def _render_held(self, held: list[list[Piece]], out: list[Event]) -> None:
        """Render held plain deltas in order, their new paths resolved in one hop; each
        delta's text is in ``out`` before the next is rendered (so a failing path ends
        the step after the deltas before it, as when they were rendered one by one)."""
        answers = await self._prefetch_or_fail(held)
        for pieces in held:
            if len(pieces) == 1 and type(pieces[0]) is str:
                text = pieces[0]  # a delta after the first path, without one of its own
            else:
                text = await self.render(pieces, answers=answers)
            if text:
                out.append(Text(0, "content", text))
                out.append(BOUNDARY)
        held.clear()

    def _plain_delta(self, data: str) -> list[Piece] | None:
        """The common event, a content delta of choice 0 and nothing else the pipeline
        reads (same metadata as the last chunk, no finish, no usage, no error): the
        pieces of its text from the channel's rewriter, fed synchronously. None (and
        nothing changed) for any other event: the general path reads it instead.

        Equivalent to :meth:`chunk` for such a chunk: that emits no metadata (unchanged),
        one text event, nothing else (unknown keys are dropped there too; this path is
        off when extra keys or log-probabilities are relayed)."""
        state = self._choices.get(0)
        if state is None or state.finished:
            return None
        text = self._from_template(data)
        if text is None:
            text = self._parse_plain(data)
            if text is None:
                return None
        rw = state.channels.get("content")
        if rw is None:  # the first content (the role's chunk had none): as _feed_text does
            rw = state.channels["content"] = self.rewriter()
        return rw.feed_pieces(text)

    def _from_template(self, data: str) -> str | None:
        """The text of a plain delta written exactly as the last one learnt (the same
        bytes before and after its content string): the string alone is scanned.

        Sound because a JSON string literal is one token: ``before + literal + after``
        parses as the learnt chunk with that string as ``choices[0].delta.content``
        (checked once, by parsing the template itself, in :meth:`_learn`)."""
        tpl = self._template
        if tpl is None or tpl[2] is not self._meta_raw:
            return None
        before, after, _ = tpl
        if not (data.startswith(before) and data.endswith(after)):
            return None
        try:
            text, end = _SCANSTRING(data, len(before))
        except (ValueError, IndexError):
            return None
        if end != len(data) - len(after) or not text or len(text) > FEED_SLICE:
            return None
        return text

    def _parse_plain(self, data: str) -> str | None:
        """The text of a plain delta read whole (json.loads' scanner and shape checks);
        the template of the next ones is learnt from it."""
        if data[:1] != "{" or data.count("{") + data.count("[") > self.settings.max_json_depth:
            return None
        try:  # json.loads without its wrappers (the text starts with "{": no whitespace)
            obj, end = _SCAN(data, 0)
        except (StopIteration, ValueError, RecursionError):
            return None  # not JSON: the general path says what it is
        if end != len(data) and data[end:].strip(" \t\n\r"):
            return None
        if type(obj) is not dict or obj.get("error") or obj.get("usage") is not None:
            return None
        choices = obj.get("choices")
        if type(choices) is not list or len(choices) != 1:
            return None
        choice = choices[0]
        if type(choice) is not dict or choice.get("finish_reason") is not None:
            return None
        index = choice.get("index", 0)
        delta = choice.get("delta")
        if type(index) is not int or index != 0 or type(delta) is not dict or len(delta) != 1:
            return None
        text = delta.get("content")
        if type(text) is not str or not text or len(text) > FEED_SLICE:
            return None  # a long text takes the general path, which pauses between slices
        meta = (obj.get("id"), obj.get("created"), obj.get("model"), obj.get("system_fingerprint"))
        if meta != self._meta_raw:
            return None
        if self._template_tries > 0:
            self._template_tries -= 1
            self._learn(data, obj, delta)
        return text

    def _learn(self, data: str, obj: dict[str, Any], delta: dict[str, Any]) -> None:
        """Learn the text around ``data``'s first ``"content"`` string, if parsing the
        template with an empty string in its place gives ``obj`` with an empty content:
        then that place is the delta's content (not another object's ``content``, nor
        the first of two keys of which JSON keeps the last)."""
        self._template = None
        at = data.find('"content"')
        if at < 0:
            return
        colon = _skip_ws(data, at + 9)
        if data[colon : colon + 1] != ":":
            return
        quote = _skip_ws(data, colon + 1)
        if data[quote : quote + 1] != '"':
            return
        try:
            _, end = _SCANSTRING(data, quote + 1)
            empty, _ = _SCAN(data[: quote + 1] + '"' + data[end:], 0)
        except (StopIteration, ValueError, RecursionError, IndexError):
            return
        delta["content"] = ""
        if empty != obj:
            return
        self._template = (data[: quote + 1], data[end:], self._meta_raw)

    async def feed_event(self, ev: SSEEvent) -> Step:
        """One upstream SSE event → events to emit (``done`` at ``[DONE]``).

        Raises :class:`UpstreamError` when the upstream reports an error or sends an
        event that is not a JSON object.
        """
        data = ev.data
        if data == "[DONE]" or data.strip() == "[DONE]":
            return Step([], done=True)
        try:
            obj = loads_bounded(data, self.settings.max_json_depth)
        except JSONTooDeep:
            raise UpstreamError(
                "The upstream model server sent an event nested too deeply.",
                code="upstream_bad_response",
            ) from None
        except ValueError:
            obj = None
        name = ev.event
        if name == "error" or (isinstance(obj, dict) and obj.get("error")):
            raise await self._upstream_error(obj)
        if name not in ("message", ""):
            return Step(await self._named(name, obj if obj is not None else data))
        if not isinstance(obj, dict):
            raise UpstreamError(
                "The upstream model server sent an event that is not a JSON object.",
                code="upstream_bad_response",
            )
        return Step(await self.chunk(obj))

    async def _upstream_error(self, obj: Any) -> UpstreamError:
        err = obj.get("error") if isinstance(obj, dict) else obj
        msg = err.get("message") if isinstance(err, dict) else err
        if not isinstance(msg, str) or not msg:
            # not str(): the repr of a list or dict doubles every backslash, one JSON
            # level more than a path is read at (its folders would go out)
            msg = "upstream error"
        # rewritten whole, then cut: a path cut short would keep a folder as its "name"
        text = (await self.text(msg, name_only=True))[:500]
        return UpstreamError(
            f"The upstream model server reported an error: {text}", code="upstream_error"
        )

    async def _named(self, name: str, data: Any) -> list[Event]:
        checked = event_name(name)
        if checked is None:
            return []  # a name we cannot vouch for is not relayed
        if not isinstance(data, dict):
            data = {"data": data}
        if checked == TOOL_PROGRESS:  # a tool's start names the file it will write
            self.resolver.report(paths_in(tool_progress_texts(data), self.settings.detector))
        clean = await self.value({k: v for k, v in data.items() if k not in CLIENT_KEYS})
        events: list[Event] = [Named(checked, clean)]
        if checked == TOOL_PROGRESS:
            progress = self._tool_progress(data)
            if progress is not None:
                events.append(progress)
        return events

    def _tool_progress(self, data: dict[str, Any]) -> ToolProgress | None:
        """Hermes's ``hermes.tool.progress`` (as upstream sent it) as the neutral event
        the runs and Open WebUI fronts show: the tool's name checked by shape, its call
        id turned into the answer's tool number, its label with every path its name (a
        status line, not a place to click)."""
        name = check_name(data.get("tool"))
        raw = data.get("status")  # any JSON value: looked up only when it is a string
        status = _PROGRESS_STATUS.get(raw) if isinstance(raw, str) else None
        if name is None or status is None:
            return None
        key = data.get("toolCallId")
        key = key if isinstance(key, str) else name
        index = self._tool_numbers.get(key)
        if index is None:
            if len(self._tool_numbers) >= MAX_TOOL_CALLS:
                return None
            index = self._tool_numbers[key] = len(self._tool_numbers)
        label = data.get("label")
        preview = ""
        if isinstance(label, str) and status == "started":
            preview = self.names(label, STATUS_CHARS)
        return ToolProgress(index, name, status, preview)

    async def chunk(self, obj: dict[str, Any]) -> list[Event]:
        """One ``chat.completion.chunk`` object → events."""
        events: list[Event] = []
        await self._meta(obj, events)
        choices = obj.get("choices")
        if isinstance(choices, list):
            for choice in choices:
                if isinstance(choice, dict):
                    await self._choice(choice, events)
        usage = check_usage(obj.get("usage"))
        if usage is not None:
            events.append(Usage(usage))
        if self.settings.extra_chunk_keys:
            extra = {k: obj[k] for k in self.settings.extra_chunk_keys if k in obj}
            if extra:
                events.append(Extra(await self.value(extra)))
        return events

    async def _meta(self, obj: dict[str, Any], events: list[Event]) -> None:
        raw = (obj.get("id"), obj.get("created"), obj.get("model"), obj.get("system_fingerprint"))
        if raw == self._meta_raw:
            return
        self._meta_raw = raw
        old = self.meta
        model = raw[2]
        meta = Meta(
            id=check_id(raw[0]) or old.id,
            created=check_created(raw[1]) or old.created,
            model=self.identifier(model) if isinstance(model, str) else old.model,
            system_fingerprint=check_id(raw[3]),
        )
        if meta != old or not self._meta_sent:
            self.meta = meta
            self._meta_sent = True
            events.append(meta)

    def _state(self, idx: int) -> _Choice:
        state = self._choices.get(idx)
        if state is None:
            state = self._choices[idx] = _Choice()
        return state

    async def _choice(self, choice: dict[str, Any], events: list[Event]) -> None:
        idx = check_index(choice.get("index", 0), MAX_CHOICES)
        if idx is None:
            return
        state = self._state(idx)
        if state.finished:
            return  # nothing of a finished choice is relayed again
        delta = choice.get("delta")
        if isinstance(delta, dict):
            lp = self._logprob(choice.get("logprobs")) if self.settings.logprobs else None
            await self._delta(idx, state, delta, lp, events)
        reason = choice.get("finish_reason")
        if reason is not None:
            await self._flush_choice(idx, state, events, name_only=False)
            known = isinstance(reason, str) and reason in FINISH_REASONS
            events.append(Finish(idx, reason if known else "stop"))

    @staticmethod
    def _logprob(value: Any) -> float | None:
        entries = value.get("content") if isinstance(value, dict) else None
        if not isinstance(entries, list):
            return None
        total = 0.0
        for e in entries:
            lp = e.get("logprob") if isinstance(e, dict) else None
            if isinstance(lp, int | float) and not isinstance(lp, bool) and lp <= 0:
                total += lp
        # -Infinity (or a sum that overflows to it) is not JSON: the lowest float instead
        return max(total, _LOWEST)

    async def _delta(
        self,
        idx: int,
        state: _Choice,
        delta: dict[str, Any],
        logprob: float | None,
        events: list[Event],
    ) -> None:
        role = delta.get("role")
        if isinstance(role, str) and role in ROLES:
            events.append(Role(idx, role))
        for channel in TEXT_CHANNELS:
            value = delta.get(channel)
            if isinstance(value, str) and value:
                text = await self._feed_text(state, channel, value)
                if channel == "content":
                    state.has_logprobs = logprob is not None  # held text: as its last delta
                if channel == "content" and logprob is not None:
                    state.logprob = max(state.logprob + logprob, _LOWEST)
                if text:
                    events.append(Text(idx, channel, text))
                    if channel == "content" and logprob is not None:
                        events.append(Logprobs(idx, text, state.logprob))
                        state.logprob = 0.0
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for call in calls:
                if isinstance(call, dict):
                    await self._tool_call(idx, state, call, events)
        legacy = delta.get("function_call")
        if isinstance(legacy, dict):
            await self._tool_call(idx, state, legacy, events, legacy=True)

    async def _feed_text(self, state: _Choice, channel: str, value: str) -> str:
        rw = state.channels.get(channel)
        if rw is None:
            rw = state.channels[channel] = self.rewriter()
        pieces = await self.feed_pieces(rw, value)
        if len(pieces) == 1 and isinstance(pieces[0], str):
            return pieces[0]  # the common case: plain text, nothing held back
        return await self.render(pieces)

    async def _tool_call(
        self,
        idx: int,
        state: _Choice,
        call: dict[str, Any],
        events: list[Event],
        *,
        legacy: bool = False,
    ) -> None:
        fn = call if legacy else call.get("function")
        fn = fn if isinstance(fn, dict) else {}
        tidx = -1 if legacy else check_index(call.get("index", 0), MAX_TOOL_CALLS)
        if tidx is None:
            return
        first = tidx not in state.tools
        rw = state.tools.get(tidx)
        if rw is None:
            rw = state.tools[tidx] = self.rewriter(json_text=True)
        args = fn.get("arguments")
        text = ""
        if isinstance(args, str) and args:
            pieces = await self.feed_pieces(rw, args)
            text = await self.render(pieces, json_text=True)
        call_id = name = None
        if first:
            call_id = _tool_id(call.get("id"))
            name = await self._tool_name(fn.get("name"))
        if first or text:
            events.append(ToolCall(idx, tidx, text, call_id, name, legacy))

    async def _tool_name(self, value: object) -> str | None:
        """The function name as sent when it has a name's shape; else its rewrite when
        that has one (a path alone: its file name); else a stable stand-in (folder names
        in a name that is no name must not come out as ``get_tmp_alice_x``); None when
        there is none."""
        name = check_name(value)
        if name is not None:
            return name
        if not isinstance(value, str) or not value:
            return None
        name = check_name(await self.text(value, name_only=True))
        if name is not None:
            return name
        digest = hashlib.sha256(value.encode("utf-8", "backslashreplace")).hexdigest()
        return "tool_" + digest[:24]

    async def _flush_choice(
        self, idx: int, state: _Choice, events: list[Event], *, name_only: bool
    ) -> None:
        state.finished = True
        for channel, rw in state.channels.items():
            rest = await self.render(rw.flush_pieces(), name_only=name_only)
            if rest:
                events.append(Text(idx, channel, rest))
                if channel == "content" and state.has_logprobs:
                    events.append(Logprobs(idx, rest, state.logprob))
        for tidx, rw in state.tools.items():
            rest = await self.render(rw.flush_pieces(), name_only=name_only, json_text=True)
            if rest:
                events.append(ToolCall(idx, tidx, rest, legacy=tidx == -1))

    @property
    def held_chars(self) -> int:
        return sum(
            rw.held_chars
            for st in self._choices.values()
            for rw in (*st.channels.values(), *st.tools.values())
        )

    async def finish(self, *, failed: bool = False) -> list[Event]:
        """End of stream: what every unfinished choice still holds.

        After a failure held text goes out as file names only (nothing is resolved).
        """
        events: list[Event] = []
        try:
            for idx, state in sorted(self._choices.items()):
                if not state.finished:
                    await self._flush_choice(idx, state, events, name_only=failed)
        finally:
            await self.resolver.seal()
        return events

    def manifest(self) -> dict[str, Any]:
        return self.resolver.manifest()

    def choices_seen(self) -> list[int]:
        return sorted(self._choices) or [0]

    # -- non-streaming -------------------------------------------------------------

    async def completion(self, body: dict[str, Any]) -> list[Event]:
        """A whole ``chat.completion`` object → the events of the same answer streamed."""
        events: list[Event] = []
        await self._meta(body, events)
        choices = body.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if isinstance(choice, dict) and isinstance(choice.get("message"), dict):
                as_delta = {**choice, "delta": choice["message"]}
                as_delta.setdefault("finish_reason", "stop")
                await self._choice(as_delta, events)
        usage = check_usage(body.get("usage"))
        if usage is not None:
            events.append(Usage(usage))
        return events
