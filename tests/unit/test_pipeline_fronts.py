"""The middle layer, in milliseconds and without HTTP: upstream SSE bytes → the SSE
source → :class:`ChatPipeline` → every front, for representative bodies read whole,
byte by byte, split at every point and at seeded random points.

- the text a client assembles (chat, Responses, runs, Open WebUI) is the same for every
  chunking and equals the one-shot rewrite of the upstream's text;
- the chat output is the same bytes for every chunking (the chat front keeps the
  upstream's chunk boundaries through ``Boundary`` events), so are the Responses and
  the Open WebUI outputs, and the stage's events;
- every output passes the allowlists of :mod:`tests.pipegen`, leaks no secret folder,
  and its terminal event agrees with the deltas and carries the manifest;
- failures (an upstream error chunk, an :class:`UpstreamError` or a broken connection
  from the source, an oversized event, a drain, a stop) end every front with its
  proper terminal, the held text flushed as file names only.

Then the regressions the generated test found, one by one.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from typing import Any

import pytest

import gateway.fronts.responses as responses_front
from gateway.core.checks import check_usage
from gateway.core.events import Extra, Finish, Meta, Named, Role, Text, ToolCall, Usage
from gateway.core.sse import SSEEvent
from gateway.fronts.chat import ChatEncoder
from gateway.fronts.openwebui import OpenWebUIEncoder, private_note
from gateway.fronts.responses import ResponsesEncoder, ResponsesJournalFront, response_sse
from gateway.fronts.runs import RunEncoder, run_sse
from gateway.proxy.stream import RunEventStage
from gateway.stream.pipeline import ChatPipeline, Scrubber
from tests import pathgen, pipegen
from tests.pipegen import Body, StubLinks, Trace, run_sync

SETTINGS = pipegen.SETTINGS[(False, False)]
RUN_ID = "run_" + "cd" * 16
RESP_ID = "resp_" + "1" * 32

LINKED = "/workspace/zqsecretaa01/report.pdf"  # under a configured root: a link
NAMED = "/Users/zqsecretbb02/notes/plan.md"  # outside every root: its name
WIN = "C:\\Users\\zqsecretcc03\\out\\plot.png"
SECRETS = ("zqsecretaa01", "zqsecretbb02", "zqsecretcc03")


def chunk(delta: dict[str, Any] | None = None, *, index: int = 0, **extra: Any) -> dict[str, Any]:
    finish = extra.pop("finish", None)
    return {
        "id": "chatcmpl-up1",
        "object": "chat.completion.chunk",
        "created": 1_700_000_001,
        "model": "hermes-agent",
        "choices": [{"index": index, "delta": delta or {}, "finish_reason": finish}],
        **extra,
    }


def sse(*events: Any, eol: str = "\n") -> bytes:
    """Events as SSE: a dict is a data event, ``(name, dict)`` a named one, a str raw data."""
    out = []
    for ev in events:
        name = None
        if isinstance(ev, tuple):
            name, ev = ev
        data = ev if isinstance(ev, str) else json.dumps(ev, ensure_ascii=False)
        out.append((f"event: {name}{eol}" if name else "") + f"data: {data}{eol}{eol}")
    return "".join(out).encode()


def content(text: str, **kw: Any) -> dict[str, Any]:
    return chunk({"content": text}, **kw)


BODIES: dict[str, tuple[bytes, dict[tuple[int, str], str]]] = {
    # a path split across deltas, inside a code span, a Windows path, usage at the end
    "prose": (
        sse(
            chunk({"role": "assistant", "content": ""}),
            content("Saved to /works"),
            content("pace/zqsecretaa01/rep"),
            content("ort.pdf and `"),
            content(NAMED),
            content("`. Also C:\\Users\\zqsec"),
            content("retcc03\\out\\plot.png."),
            chunk(finish="stop"),
            {**chunk(), "choices": [], "usage": {"prompt_tokens": 3, "total_tokens": 9}},
            "[DONE]",
        ),
        {(0, "content"): f"Saved to {LINKED} and `{NAMED}`. Also {WIN}."},
    ),
    # reasoning, a tool call whose JSON arguments hold paths, then content
    "channels": (
        sse(
            chunk({"reasoning_content": "Looking at /Users/zqsecretbb02/notes/pl"}),
            chunk({"reasoning_content": "an.md first."}),
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_a1",
                            "type": "function",
                            "function": {"name": "read_file", "arguments": ""},
                        }
                    ]
                }
            ),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"path": "/work'}}]}),
            chunk(
                {
                    "tool_calls": [
                        {"index": 0, "function": {"arguments": 'space/zqsecretaa01/report.pdf"'}}
                    ]
                }
            ),
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "function": {
                                "arguments": ', "and": "C:\\\\Users\\\\zqsecretcc03\\\\x"}'
                            },
                        }
                    ]
                }
            ),
            content("Reading it."),
            chunk(finish="tool_calls"),
            "[DONE]",
        ),
        {
            (0, "reasoning_content"): f"Looking at {NAMED} first.",
            (0, "tool0"): '{"path": "/workspace/zqsecretaa01/report.pdf", "and": '
            '"C:\\\\Users\\\\zqsecretcc03\\\\x"}',
            (0, "content"): "Reading it.",
        },
    ),
    # CRLF, a named event with a path, two choices, CJK text running into a path
    "named_crlf_cjk": (
        sse(
            ("hermes.tool.progress", {"path": NAMED, "pct": 50, "event": {"type": "x"}}),
            content("保存在/Users/zqsecretbb02/报"),
            content("second: /workspace/zqsecretaa01/report.pdf ok", index=1),
            content("告.pdf。然后"),
            chunk(finish="stop"),
            chunk(index=1, finish="length"),
            "[DONE]",
            eol="\r\n",
        ),
        {
            (0, "content"): "保存在/Users/zqsecretbb02/报告.pdf。然后",
            (1, "content"): f"second: {LINKED} ok",
        },
    ),
    # no finish, no [DONE]: the path at the very end is held until finish()
    "no_done": (
        sse(content("The file is at /workspace/zqsecretaa01/ou"), content("t/report.pdf")),
        {(0, "content"): "The file is at /workspace/zqsecretaa01/out/report.pdf"},
    ),
    # the legacy function_call
    "legacy": (
        sse(
            chunk({"function_call": {"name": "save", "arguments": '{"to": "/Users/zqsec'}}),
            chunk({"function_call": {"arguments": 'retbb02/a.txt"}'}}),
            chunk(finish="function_call"),
            "[DONE]",
        ),
        {(0, "fc"): '{"to": "/Users/zqsecretbb02/a.txt"}'},
    ),
}


def body_of(
    raw: bytes, ending: str = "done", outcome: str = "completed", limit: int = 1 << 20
) -> Body:
    return Body(raw, (), ending, outcome, None, limit, SECRETS, "", SETTINGS)


def chunkings(raw: bytes, seed: int) -> Iterator[tuple[int, ...]]:
    """Read splits: whole, byte by byte, seeded random (every split point: see below)."""
    yield ()
    yield tuple(range(1, len(raw)))
    rnd = random.Random(seed)
    for _ in range(25):
        yield tuple(sorted({rnd.randrange(1, len(raw)) for _ in range(rnd.randint(1, 20))}))


class Ids:
    """Deterministic stand-in for ``secrets`` in the Responses front (fixed ids)."""

    def __init__(self) -> None:
        self.n = 0

    def token_hex(self, nbytes: int = 16) -> str:
        self.n += 1
        return f"{self.n:0{2 * nbytes}x}"


def responses_out(trace: Trace, monkeypatch: pytest.MonkeyPatch) -> bytes:
    monkeypatch.setattr(responses_front, "secrets", Ids())
    return b"".join(pipegen.replay(trace, ResponsesEncoder(RESP_ID, "m", created_at=1)))


def owui() -> OpenWebUIEncoder:
    enc = OpenWebUIEncoder("owui-model", "private")
    enc.meta = Meta(id="chatcmpl-owui", created=1_700_000_000, model="owui-model")
    return enc


def one_shot(text: str, *, json_text: bool = False) -> str:
    scrub = Scrubber(StubLinks(), SETTINGS)
    if not json_text:
        return run_sync(scrub.text(text))
    rw = scrub.rewriter(json_text=True)
    return run_sync(scrub.render(rw.feed_pieces(text) + rw.flush_pieces(), json_text=True))


def outputs(trace: Trace, body: Body, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Every front's output for ``trace``, checked against its allowlist and the oracle."""
    chat = b"".join(pipegen.replay(trace, ChatEncoder()))
    view = pipegen.check_chat(chat, trace, body)
    resp = responses_out(trace, monkeypatch)
    evs = pipegen.check_responses(resp, trace, body)
    journal = [e for o in pipegen.replay(trace, RunEncoder(RUN_ID, "m")) for e in o]
    runs = pipegen.check_runs(run_sse(journal), trace, body, RUN_ID)
    ow = b"".join(pipegen.replay(trace, owui()))
    ow_view = pipegen.check_chat(ow, trace, body, named=False, all_links=False)
    proxied = pipegen.run_proxy(run_sse(journal), (), trace.links)
    px = b"".join(pipegen.replay(proxied, owui()))
    px_view = pipegen.check_chat(px, proxied, body, named=False, all_links=False)
    return {
        "chat": chat,
        "chat_texts": view.texts,
        "responses": resp,
        "responses_text": evs[-1]["response"]["output_text"],
        "runs_output": runs[-1]["output"],
        "runs_terminal": {k: v for k, v in runs[-1].items() if k != "seq"},
        "owui": ow,
        "owui_text": ow_view.texts.get((0, "content"), ""),
        "proxy_text": px_view.texts.get((0, "content"), ""),
    }


@pytest.mark.parametrize("name", sorted(BODIES))
def test_every_front_is_the_same_for_every_chunking(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw, channels = BODIES[name]
    body = body_of(raw, "done" if b"[DONE]" in raw else "eof")
    reference = pipegen.run_pipeline(body, ())
    expected = outputs(reference, body, monkeypatch)

    # the text a client assembles is the one-shot rewrite of the upstream's text
    for (choice, channel), text in channels.items():
        json_text = channel.startswith(("tool", "fc"))
        assert expected["chat_texts"][(choice, channel)] == one_shot(text, json_text=json_text)
    content0 = expected["chat_texts"].get((0, "content"), "")
    assert expected["responses_text"] == expected["runs_output"] == content0
    arts = reference.manifest["artifacts"]
    note = private_note(arts) if arts else ""  # private mode, links
    assert expected["owui_text"] == expected["proxy_text"] == content0 + note

    for splits in chunkings(raw, seed=len(name)):
        trace = pipegen.run_pipeline(body, splits)
        assert outputs(trace, body, monkeypatch) == expected, splits
    # every split point: the stage's events and the chat bytes
    for i in range(1, len(raw)):
        trace = pipegen.run_pipeline(body, (i,))
        assert trace.events() == reference.events()
        assert b"".join(pipegen.replay(trace, ChatEncoder())) == expected["chat"], i


def test_the_chat_front_keeps_the_upstreams_chunks() -> None:
    """One output chunk per upstream chunk that had something to say (not per read)."""
    raw, _ = BODIES["prose"]
    body = body_of(raw)
    for splits in ((), tuple(range(1, len(raw)))):
        view = pipegen.read_chat(
            b"".join(pipegen.replay(pipegen.run_pipeline(body, splits), ChatEncoder()))
        )
        deltas = [c["choices"][0]["delta"].get("content") for c in view.chunks if c["choices"]]
        # the role chunk; "/works" and "pace/.../rep" are held until "ort.pdf and `"
        # completes the path; the code span waits for its closing backtick; the Windows
        # path is held across two chunks; the finish chunk; usage on a chunk of its own
        assert deltas == [None, "Saved to ", deltas[2], "`plan.md`. Also ", "plot.png.", None]
        assert deltas[2].startswith("[report.pdf](https://gw.test/v1/artifacts/")
        assert deltas[2].endswith(") and ")
        assert view.chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
        assert view.chunks[-1]["choices"] == [] and "usage" in view.chunks[-1]


# --- failures ---------------------------------------------------------------------------

HELD = content("see /workspace/zqsecretaa01/rep")  # a path still running: held
LIMIT = 1000  # the decoder's bound: the oversized event's, the others are far below it
FAILURES: dict[str, tuple[list[bytes], str, str | None]] = {
    # name: (reads, ending, terminal error code; None: a stop without error)
    "error_chunk": (
        [sse(HELD), sse({"error": {"message": "disk full at /Users/zqsecretbb02/x.log"}})],
        "eof",
        "upstream_error",
    ),
    "upstream_error": ([sse(HELD)], "upstream_error", "upstream_error"),
    "broken_connection": ([sse(HELD)], "source_error", "upstream_disconnected"),
    "oversize": ([sse(HELD), b"data: " + b"x" * 2000], "eof", "sse_event_too_large"),
    "drain": ([sse(HELD)], "drain", "gateway_draining"),
    "cancel": ([sse(HELD)], "cancel", None),
}


def _relay(reads: list[bytes], ending: str, front: Any, join: Any = b"".join) -> list[Any]:
    import trio

    return trio.run(
        lambda: pipegen.relay_reads(reads, ending, front, settings=SETTINGS, limit=LIMIT, join=join)
    )


def _concat(parts: list[list[Any]]) -> list[Any]:
    return [e for p in parts for e in p]


@pytest.mark.parametrize("name", sorted(FAILURES))
def test_failures_end_every_front_with_its_terminal_and_names_only(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads, ending, code = FAILURES[name]
    raw = b"".join(reads)
    body = body_of(raw, ending, "cancelled" if code is None else "failed", LIMIT)
    trace = pipegen.run_pipeline(body, [len(r) for r in reads[:1]])
    assert trace.terminal == ("cancel" if code is None else "fail")
    assert trace.manifest["artifacts"] == [] and trace.links == {}  # nothing resolved
    monkeypatch.setattr(responses_front, "secrets", Ids())
    held = "see rep"  # the held path: its name alone (no link, though under a root)

    chat = b"".join(_relay(reads, ending, ChatEncoder()))
    assert chat == b"".join(pipegen.replay(trace, ChatEncoder()))
    view = pipegen.check_chat(chat, trace, body)
    last = view.chunks[-1]
    assert view.texts[(0, "content")] == held
    if code is None:  # a stop: the stream ends normally
        assert last["choices"][0]["finish_reason"] == "stop"
    else:
        assert last["error"]["code"] == code
        assert last["choices"][0] == {
            "index": 0,
            "delta": {"content": "rep"},
            "finish_reason": "error",
        }

    resp = b"".join(_relay(reads, ending, ResponsesEncoder(RESP_ID, "m", created_at=1)))
    evs = pipegen.check_responses(resp, trace, body)
    assert evs[-1]["response"]["output_text"] == held
    assert evs[-1]["type"] == ("response.completed" if code is None else "response.failed")

    journal = _relay(reads, ending, ResponsesJournalFront(ResponsesEncoder(RESP_ID, "m")), _concat)
    jevs = pipegen.check_responses(response_sse(_concat(journal)), trace, body)
    assert jevs[-1]["type"] == ("response.cancelled" if code is None else "response.failed")
    assert jevs[-1]["response"]["output_text"] == held

    runs = _concat(_relay(reads, ending, RunEncoder(RUN_ID, "m"), _concat))
    revs = pipegen.check_runs(run_sse(runs), trace, body, RUN_ID)
    assert revs[-1]["event"] == ("run.cancelled" if code is None else "run.failed")
    assert revs[-1]["output"] == held
    if code is not None:
        assert revs[-1]["error"]["code"] == code

    ow = b"".join(_relay(reads, ending, owui()))
    ow_view = pipegen.check_chat(ow, trace, body, named=False, all_links=False)
    assert ow_view.texts[(0, "content")] == held

    # and through the proxy: the run's failure ends Open WebUI's stream with its code
    ptrace = pipegen.run_proxy(run_sse(runs), (), {})
    px = b"".join(pipegen.replay(ptrace, owui()))
    px_view = pipegen.check_chat(px, ptrace, body, named=False, all_links=False)
    assert px_view.texts[(0, "content")] == held
    assert px_view.chunks[-1]["error"]["code"] == (code or "run_cancelled")


def test_an_upstream_error_message_is_names_only() -> None:
    reads, ending, _ = FAILURES["error_chunk"]
    view = pipegen.read_chat(b"".join(_relay(reads, ending, ChatEncoder())))
    assert view.chunks[-1]["error"]["message"] == (
        "The upstream model server reported an error: disk full at x.log"
    )


# --- regressions found by the generated test --------------------------------------------


def events_of(*objs: Any, settings: Any = SETTINGS) -> list[Any]:
    pipeline = ChatPipeline(StubLinks(), settings)
    step = run_sync(pipeline.feed([SSEEvent(json.dumps(o)) for o in objs]))
    assert step.error is None
    return [*step.events, *run_sync(pipeline.finish())]


@pytest.mark.parametrize("value", [["stop"], {"a": 1}, 7, True])
def test_an_unhashable_or_odd_finish_reason_is_stop(value: Any) -> None:
    evs = events_of({"choices": [{"index": 0, "delta": {"role": ["x"]}, "finish_reason": value}]})
    assert [e for e in evs if isinstance(e, Finish)] == [Finish(0, "stop")]
    assert not any(isinstance(e, Role) for e in evs)  # a list role is no role


def test_non_finite_numbers_are_dropped_from_relayed_json() -> None:
    settings = pipegen.SETTINGS[(True, True)]  # logprobs and extra keys on
    pipeline = ChatPipeline(StubLinks(), settings)
    raw = (
        '{"choices": [{"index": 0, "delta": {"content": "hi"}, "logprobs": {"content": '
        '[{"logprob": -Infinity}, {"logprob": -1e308}, {"logprob": -1e308}]}}],'
        ' "x_operator_extra": {"a": NaN, "b": [Infinity, 1.5]}}'
    )
    named = SSEEvent('{"v": -Infinity, "w": NaN, "n": 2}', event="hermes.progress")
    step = run_sync(pipeline.feed([SSEEvent(raw), named]))
    by_type = {type(e).__name__: e for e in step.events}
    assert by_type["Extra"] == Extra({pipegen.EXTRA_KEY: {"a": None, "b": [None, 1.5]}})
    assert by_type["Named"] == Named("hermes.progress", {"v": None, "w": None, "n": 2})
    assert by_type["Logprobs"].logprob == -1.7976931348623157e308
    out = ChatEncoder().encode(step.events)
    for line in out.decode().splitlines():
        if line.startswith("data: "):
            pipegen.strict_json(line[6:])  # no NaN, no Infinity


def test_usage_keeps_token_counts_only() -> None:
    usage = {
        "prompt_tokens": 3,
        "completion_tokens": 5,
        "total_tokens": 8,
        "prompt_tokens_details": {"cached_tokens": 1, "x": 2, "audio_tokens": "4"},
        "completion_tokens_details": {"reasoning_tokens": 2},
        "completed": {"usage": 0},  # not a token count: dropped (it broke the Responses front)
        "cost": 7,
        "prompt_cache_hit_tokens": 2,
        "x_tokens_details": 5,
    }
    assert check_usage(usage) == {
        "prompt_tokens": 3,
        "completion_tokens": 5,
        "total_tokens": 8,
        "prompt_tokens_details": {"cached_tokens": 1},
        "completion_tokens_details": {"reasoning_tokens": 2},
        "prompt_cache_hit_tokens": 2,
    }
    enc = ResponsesEncoder(RESP_ID, "m")
    enc.events([Usage({"prompt_tokens": 3, "completion_tokens": 5})])
    assert enc.usage is not None and enc.usage["total_tokens"] == 8


@pytest.mark.parametrize(
    "error",
    [
        ["file:\\\\/\\\\/localhost\\\\/Users\\\\/zqsecretbb02\\\\/report.pdf"],
        {"message": {"path": "C:\\Users\\zqsecretcc03\\x.txt"}},
        {"message": ["/Users/zqsecretbb02/a"]},
    ],
)
def test_an_upstream_error_that_is_not_a_string_is_not_quoted(error: Any) -> None:
    """The repr of a list or dict doubles every backslash: its paths would be read one
    JSON level too deep and go out whole."""
    pipeline = ChatPipeline(StubLinks(), SETTINGS)
    step = run_sync(pipeline.feed([SSEEvent(json.dumps({"error": error}))]))
    assert step.error is not None
    assert step.error.message == "The upstream model server reported an error: upstream error"


def test_an_upstream_error_is_rewritten_before_it_is_cut() -> None:
    """Cut first, a path would end at the cut and keep its folder as its "name"."""
    msg = "x" * 470 + " /Users/zqsecretbb02/zqsecretaa01/report.pdf and more"
    pipeline = ChatPipeline(StubLinks(), SETTINGS)
    step = run_sync(pipeline.feed([SSEEvent(json.dumps({"error": {"message": msg}}))]))
    assert step.error is not None
    assert not pathgen.leaked(step.error.message, SECRETS)
    assert step.error.message.endswith(" report.pdf and more")


def test_a_lone_surrogate_in_the_model_name_does_not_break_the_chat_front() -> None:
    """A JSON "\\ud800" upstream is a lone surrogate in Python: the fast path encoded it
    strictly and the stream died with UnicodeEncodeError. It goes out as U+FFFD: its
    escape text again would be rejected by strict JSON parsers."""
    enc = ChatEncoder()
    out = enc.encode([Meta(id="c-1", model="m\ud800"), Text(0, "content", "hi\udfff")])
    assert b"\\ud" not in out and b"\\ud" not in ChatEncoder().encode(
        [Text(0, "content", "\ud800")]
    )
    obj = json.loads(out.decode("utf-8", "strict").removeprefix("data: "))
    assert obj["model"] == "m\ufffd" and obj["choices"][0]["delta"]["content"] == "hi\ufffd"


def test_the_open_webui_front_writes_no_operator_extra_keys() -> None:
    """Open WebUI acts on chunk keys besides ``choices``: the front writes none of them."""
    enc = owui()
    out = enc.encode([Extra({"event": {"type": "execute"}}), Text(0, "content", "hi")])
    assert b"execute" not in out and b'"hi"' in out


def test_the_proxy_relays_the_text_before_a_run_failure_in_the_same_read() -> None:
    stage = RunEventStage("private", base_url=pipegen.LINK_BASE)
    step = run_sync(
        stage.feed(
            [
                {"event": "message.delta", "run_id": RUN_ID, "seq": 2, "delta": "très bien"},
                {"event": "run.failed", "run_id": RUN_ID, "seq": 3, "error": {"code": "x_y"}},
            ]
        )
    )
    assert step.events == [Text(0, "content", "très bien")]
    assert step.error is not None and step.error.code == "x_y"


@pytest.mark.parametrize(
    ("sent", "expected"),
    [
        ("get_weather", "get_weather"),
        ("mcp.files:read-1", "mcp.files:read-1"),
        ("/tmp/zqsecretaa01/report.pdf", "report.pdf"),  # a path alone: its file name
        ("get.weather/tmp/zqsecretaa01/zqsecretbb02/x.txt", None),  # no boundary: hashed
        ("C:\\Users\\zqsecretaa01\\run", "run"),
        ("run it now", None),
        ("x" * 65, None),
    ],
)
def test_a_tool_name_is_a_name_or_a_stand_in(sent: str, expected: str | None) -> None:
    """Folder names inside a name that is no name never come out (they used to, with
    their separators turned into underscores)."""
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": sent}}
    obj = {"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}
    (tool,) = [e for e in events_of(obj) if isinstance(e, ToolCall)]
    if expected is not None:
        assert tool.name == expected
    else:
        assert tool.name is not None and re.fullmatch(r"tool_[0-9a-f]{24}", tool.name)
        (again,) = [e for e in events_of(obj) if isinstance(e, ToolCall)]
        assert again.name == tool.name  # stable: the same input, the same stand-in
    assert "zqsecret" not in (tool.name or "")


def test_a_named_event_cannot_forge_the_manifest_or_pose_as_a_chunk() -> None:
    """An unknown named event keeps its own fields, never ours: a ``gateway`` manifest
    with ``javascript:`` links, a chunk's ``object``/``id``/``model``, Open WebUI's
    ``event`` (an ``execute`` runs JavaScript there)."""
    forged = {
        "gateway": {"download_link_mode": "public", "artifacts": [{"url": "javascript:x"}]},
        "object": "chat.completion.chunk",
        "id": "chatcmpl-forged",
        "model": "m",
        "created": 1,
        "system_fingerprint": "fp",
        "event": {"type": "execute", "data": {"code": "alert(1)"}},
        "type": "progress",
        "step": 3,
    }
    pipeline = ChatPipeline(StubLinks(), SETTINGS)
    step = run_sync(pipeline.feed([SSEEvent(json.dumps(forged), event="hermes.tool.progress")]))
    (named,) = [e for e in step.events if isinstance(e, Named)]
    assert named.data == {"type": "progress", "step": 3}
    out = ChatEncoder().encode([named]).decode()
    assert out.startswith("event: hermes.tool.progress\n")
    assert "javascript" not in out and "forged" not in out and "execute" not in out


def test_a_long_text_is_rewritten_in_slices_with_pauses() -> None:
    """A ~1 MB event of path-like text costs seconds of rewriting: the pipeline feeds it
    in slices and awaits its ``pause`` (a trio checkpoint in the gateway) between them,
    so other streams go on; the text is what one feed gives, whatever the slices cut."""
    from gateway.stream.pipeline import FEED_SLICE

    unit = "see /tmp/zqsecretaa01/zqsecretbb02/r.txt and (((( "
    text = unit * (6 * FEED_SLICE // len(unit))
    pauses = []

    async def pause() -> None:
        pauses.append(1)

    def run(with_pause: bool) -> list[Any]:
        pipeline = ChatPipeline(StubLinks(), SETTINGS, pause=pause if with_pause else None)
        obj = {"choices": [{"index": 0, "delta": {"content": text}}]}
        step = run_sync(pipeline.feed([SSEEvent(json.dumps(obj))]))
        events = [*step.events, *run_sync(pipeline.finish())]
        return [e for e in events if not isinstance(e, Meta)]  # its id is random

    sliced, whole = run(True), run(False)
    assert len(pauses) >= 6
    assert sliced == whole
    out = "".join(e.text for e in sliced if isinstance(e, Text))
    assert "zqsecret" not in out and out.count("r.txt") == text.count("r.txt")


def test_a_field_that_is_a_path_becomes_its_bare_link() -> None:
    """A JSON field whose value is a path and nothing else (a named event's
    ``args.path``) becomes the link alone or the name, never a markdown link; a field
    holding text with a path keeps the markdown link (the sixth red-team pass)."""
    data = {"args": {"path": LINKED, "note": f"saved {LINKED} ok"}, "other": NAMED}
    pipeline = ChatPipeline(StubLinks(), SETTINGS)
    step = run_sync(pipeline.feed([SSEEvent(json.dumps(data), event="hermes.tool.progress")]))
    (named,) = [e for e in step.events if isinstance(e, Named)]
    link = named.data["args"]["path"]
    assert link.startswith("http") and "[" not in link and "zqsecret" not in link, link
    assert named.data["args"]["note"] == f"saved [report.pdf]({link}) ok"
    assert named.data["other"] == "plan.md"
