"""The agent's own tools through every front: Hermes's tool progress, tool results.

Hermes runs its tools itself and says so (``hermes.tool.progress`` on its chat stream,
``tool.started`` / ``tool.completed`` in its runs, ``function_call_output`` items in its
Responses): the runs front shows them as tool events, the Open WebUI front as status
events, the Responses front as output items, the chat front relays only the named
event. Nothing of a path goes out.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.core.events import Text, ToolCall, ToolProgress, ToolResult
from gateway.core.sse import SSEDecoder, SSEEvent
from gateway.fronts.chat import ChatEncoder
from gateway.fronts.openwebui import OpenWebUIEncoder
from gateway.fronts.responses import ResponsesEncoder
from gateway.fronts.runs import RunEncoder
from gateway.stream.native import RunEventsPipeline
from gateway.stream.pipeline import NAMES_READ, STATUS_CHARS, ChatPipeline
from tests.pipegen import StubLinks, run_sync

SECRET = "zqsecretprog"


def progress(status: str, label: str = "", call: str = "call_a") -> SSEEvent:
    data: dict[str, Any] = {"tool": "write_file", "toolCallId": call, "status": status}
    if label:
        data["label"] = label
    return SSEEvent(json.dumps(data), event="hermes.tool.progress")


def test_hermes_tool_progress_becomes_tool_events() -> None:
    pipeline = ChatPipeline(StubLinks())
    step = run_sync(
        pipeline.feed(
            [
                progress("running", f"/home/{SECRET}/out/a.md"),
                progress("completed"),
                progress("running", "mkdir -p out", call="call_b"),
                SSEEvent(
                    json.dumps({"tool": ["no"], "status": "running"}), event="hermes.tool.progress"
                ),
            ]
        )
    )
    tools = [e for e in step.events if isinstance(e, ToolProgress)]
    assert [(t.index, t.status, t.preview) for t in tools] == [
        (0, "started", "a.md"),
        (0, "completed", ""),
        (1, "started", "mkdir -p out"),
    ]
    runs = RunEncoder("run_x", "m").encode(step.events)
    assert [(e["event"], e["tool_call_id"]) for e in runs] == [
        ("tool.started", "tool_0"),
        ("tool.completed", "tool_0"),
        ("tool.started", "tool_1"),
    ]
    assert runs[0]["preview"] == "a.md" and runs[1]["error"] is False
    chat = ChatEncoder().encode(step.events).decode()
    assert "tool.started" not in chat and chat.count("event: hermes.tool.progress") == 4
    assert SECRET not in chat + json.dumps(runs)


def test_open_webui_shows_the_agents_tools_as_status_events() -> None:
    enc = OpenWebUIEncoder("m", "private")
    out = enc.encode([ToolProgress(0, "write_file", "started", "a.md"), Text(0, "content", "ok")])
    chunks = [json.loads(e.data) for e in SSEDecoder().feed(out)]
    status = [c["event"] for c in chunks if "event" in c]
    assert status == [
        {"type": "status", "data": {"description": "write_file: a.md", "done": False}}
    ]
    assert all(c["choices"] == [] for c in chunks if "event" in c)


def test_responses_front_closes_a_call_with_its_output() -> None:
    enc = ResponsesEncoder("resp_x", "m")
    enc.start_events()
    evs = enc.events(
        [
            ToolCall(0, 0, '{"path": "a.md"}', "call_1", "write_file"),
            ToolResult("call_1", '{"bytes_written": 8}'),
            Text(0, "content", "done"),
        ]
    )
    kinds = [(e["type"], e.get("output_index")) for e in evs]
    assert kinds == [
        ("response.output_item.added", 1),
        ("response.function_call_arguments.delta", 1),
        ("response.function_call_arguments.done", 1),
        ("response.output_item.done", 1),
        ("response.output_item.added", 2),
        ("response.output_item.done", 2),
        ("response.output_text.delta", 0),
    ]
    end = enc.end_events([], {"download_link_mode": "private", "artifacts": []})
    final = end[-1]["response"]
    assert [i["type"] for i in final["output"]] == [
        "message",
        "function_call",
        "function_call_output",
    ]
    assert final["output"][2] == {**final["output"][2], "call_id": "call_1", "status": "completed"}
    assert sum(e["type"] == "response.output_item.done" for e in end) == 1  # the message only


def test_a_megabyte_status_line_is_read_only_at_its_start() -> None:
    """A hostile upstream's tool label or preview can be as long as an event may be
    (1 MiB): only its start is rewritten (read whole, ``names`` held the loop for
    seconds, red team), and a path cut there shows part of its name, no folder."""
    label = f"/home/{SECRET}/" + "deep/" * 200_000
    chat, native = ChatPipeline(StubLinks()), RunEventsPipeline(StubLinks())
    fed: list[int] = []
    for pipe in (chat, native):
        make = pipe.rewriter

        def counting(*a: Any, _make: Any = make, **kw: Any) -> Any:
            rw = _make(*a, **kw)
            feed = rw.feed

            def feed_counted(text: str) -> str:
                fed.append(len(text))
                return feed(text)

            rw.feed = feed_counted
            return rw

        pipe.rewriter = counting  # type: ignore[method-assign]
    chat_step = run_sync(chat.feed([progress("running", label)]))
    started = {"event": "tool.started", "tool": "terminal", "preview": label}
    native_step = run_sync(native.feed([SSEEvent(json.dumps(started))]))
    previews = [
        e.preview for e in (*chat_step.events, *native_step.events) if isinstance(e, ToolProgress)
    ]
    assert len(previews) == 2 and fed and max(fed) <= NAMES_READ * STATUS_CHARS
    for preview in previews:
        assert 0 < len(preview) <= STATUS_CHARS and SECRET not in preview and "/" not in preview
