"""The native stages over the real Hermes agent's recorded streams, h11-style.

``cassettes/recorded/hermes-responses-*.yaml`` and ``hermes-runs-*.yaml`` are what
hermes-agent 0.19.0 sent (tests/e2e/hermes/record.py). Each body is read whole, byte
by byte, at every split point and at seeded random points, through the SSE source,
:class:`ResponsesEventsPipeline` / :class:`RunEventsPipeline` and the gateway's fronts:
the events are the same whatever the reads, no byte of the recording host's folders
leaves, the agent's tool calls and results and the files it reported come through.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.api.routes._native import continued
from gateway.core.events import Event, Finish, Text, ToolCall, ToolProgress, ToolResult, Usage
from gateway.core.sse import SSEDecoder, SSEEvent
from gateway.fronts.responses import ResponsesEncoder
from gateway.fronts.runs import RunEncoder
from gateway.stream.native import NativeApis, ResponsesEventsPipeline, RunEventsPipeline, chat_usage
from tests.hostile_agent import CAPABILITIES
from tests.pipegen import StubLinks, run_sync

#: the keys the stages read, and a few they must not
KEYS = [
    "type",
    "event",
    "item",
    "id",
    "name",
    "call_id",
    "arguments",
    "output",
    "delta",
    "response",
    "usage",
    "status",
    "tool",
    "preview",
    "duration",
    "error",
    "message",
    "text",
    "files_modified",
    "resolved_path",
    "item_id",
    "gateway",
    "content",
]
#: the event and item types the stages act on
TYPES = [
    "response.created",
    "response.output_item.added",
    "response.output_item.done",
    "response.output_text.delta",
    "response.function_call_arguments.delta",
    "response.completed",
    "response.incomplete",
    "response.failed",
    "function_call",
    "function_call_output",
    "message",
    "tool.started",
    "tool.completed",
    "message.delta",
    "run.completed",
    "run.failed",
    "run.cancelled",
]
RECORDED = Path(__file__).parent.parent.parent / "cassettes" / "recorded"
HOST = "/tmp/hermes-recording"


def body_of(name: str, path_part: str) -> bytes:
    data = yaml.safe_load((RECORDED / name).read_text())
    for it in data["interactions"]:
        if path_part in it["request"]["uri"]:
            sse = it["response"]["body"]["sse"]
            return "".join(sse).encode()
    raise AssertionError(f"no {path_part} interaction in {name}")


class Links(StubLinks):
    """StubLinks that links every path under the recording host (as a scope would)."""

    async def resolve(self, path: str) -> str | None:
        if not path.startswith(HOST):
            return None
        return await super().resolve(path.replace(HOST, "/workspace", 1))


def splits(body: bytes, seed: int = 7) -> list[list[int]]:
    n = len(body)
    out = [[], list(range(1, n))]
    out += [[i] for i in range(1, n)]  # every split point
    rnd = random.Random(seed)
    out += [sorted(rnd.sample(range(1, n), min(n - 1, 12))) for _ in range(20)]
    return out


def read(body: bytes, cuts: list[int]) -> list[list[SSEEvent]]:
    dec = SSEDecoder()
    bounds = [0, *cuts, len(body)]
    reads = [dec.feed(body[a:b]) for a, b in itertools.pairwise(bounds)]
    return [r for r in reads if r]


def run(pipeline: Any, reads: list[list[SSEEvent]]) -> tuple[list[Event], bool]:
    events: list[Event] = []
    done = False
    for r in reads:
        step = run_sync(pipeline.feed(r))
        events += step.events
        assert step.error is None, step.error
        if step.done:
            done = True
            break
    events += run_sync(pipeline.finish())
    return events, done


def canonical(events: list[Event]) -> list[Any]:
    """The events with text joined (reads may cut it differently)."""
    out: list[Any] = []
    for ev in events:
        if isinstance(ev, Text) and out and isinstance(out[-1], Text):
            out[-1] = Text(ev.choice, ev.channel, out[-1].text + ev.text)
        else:
            out.append(ev)
    return out


@pytest.mark.parametrize(
    "name", ["hermes-responses-fresh-file.yaml", "hermes-responses-chain-overwrite.yaml"]
)
def test_the_agents_responses_stream_under_every_chunking(name: str) -> None:
    body = body_of(name, "/v1/responses")
    baseline = None
    for cuts in splits(body):
        links = Links()
        pipeline = ResponsesEventsPipeline(links)
        events, done = run(pipeline, read(body, cuts))
        assert done and pipeline.upstream_id and pipeline.upstream_id.startswith("resp_")
        got = canonical(events)
        if baseline is None:
            baseline = got
        assert got == baseline, cuts
        enc = ResponsesEncoder("resp_" + "0" * 32, "hermes-agent")
        out = enc.start_events() + enc.end_events(events, links.manifest())
        wire = json.dumps(out)
        assert HOST not in wire and pipeline.upstream_id not in wire
    assert baseline is not None
    calls = [e for e in baseline if isinstance(e, ToolCall)]
    results = [e for e in baseline if isinstance(e, ToolResult)]
    assert calls and calls[0].name == "write_file" and results
    assert any("/workspace" not in r.output and "v1/artifacts" in r.output for r in results)
    assert links.reported  # files_modified / resolved_path / the call's path


def test_the_agents_run_events_under_every_chunking() -> None:
    body = body_of("hermes-runs-fresh-file.yaml", "/events")
    baseline = None
    for cuts in splits(body):
        links = Links()
        pipeline = RunEventsPipeline(links)
        events, done = run(pipeline, read(body, cuts))
        assert done
        got = canonical(events)
        if baseline is None:
            baseline = got
        assert got == baseline, cuts
        runs = RunEncoder("run_x", "hermes-agent").encode(events)
        assert HOST not in json.dumps(runs)
    assert baseline is not None
    progress = [e for e in baseline if isinstance(e, ToolProgress)]
    assert [(p.status, p.name) for p in progress] == [
        ("started", "write_file"),
        ("completed", "write_file"),
    ]
    assert progress[0].preview.startswith("https://") or progress[0].preview == "plan.md"
    text = "".join(e.text for e in baseline if isinstance(e, Text))
    assert text.startswith("\n\nThe plan is at ") and HOST not in text
    assert any(isinstance(e, Usage) for e in baseline)


@pytest.mark.parametrize(
    "event",
    [
        {"event": "tool.started", "tool": ["x"], "preview": 5},
        {"event": "tool.completed", "tool": "write_file", "duration": "NaN", "error": "yes"},
        {"event": "message.delta", "delta": {"a": 1}},
        {"event": "run.completed", "output": 3, "usage": {"input_tokens": -1}},
        {"event": "reasoning.available", "text": f"{HOST}/secret"},
        {"event": "approval.requested", "command": f"rm -rf {HOST}"},
        {"event": "run.failed", "error": {"message": f"boom at {HOST}/x.txt"}},
    ],
)
def test_hostile_run_events_are_dropped_or_read_by_shape(event: dict[str, Any]) -> None:
    pipeline = RunEventsPipeline(Links())
    step = run_sync(pipeline.feed([SSEEvent(json.dumps(event))]))
    out = json.dumps([repr(e) for e in step.events]) + str(step.error and step.error.message)
    assert HOST not in out and "/secret" not in out


@pytest.mark.parametrize(
    "event",
    [
        {
            "type": "response.output_item.added",
            "item": {"type": "function_call", "name": "../x", "call_id": "a/b", "arguments": 7},
        },
        {
            "type": "response.output_item.added",
            "item": {"type": "function_call_output", "output": [{"text": f"{HOST}/f"}]},
        },
        {"type": "response.output_text.delta", "delta": None},
        {"type": "response.created", "response": {"id": "../../etc"}},
        {"type": "response.failed", "response": {"error": {"message": f"{HOST}/a/b.txt failed"}}},
        {"type": "gateway.manifest", "gateway": {"artifacts": [{"url": "javascript:alert(1)"}]}},
    ],
)
def test_hostile_responses_events_are_dropped_or_read_by_shape(event: dict[str, Any]) -> None:
    pipeline = ResponsesEventsPipeline(Links())
    step = run_sync(pipeline.feed([SSEEvent(json.dumps(event))]))
    out = json.dumps([repr(e) for e in step.events]) + str(step.error and step.error.message)
    assert HOST not in out and "javascript" not in out and "../" not in out
    assert pipeline.upstream_id is None or pipeline.upstream_id == "x"


def test_usage_of_the_agents_apis_reads_only_token_counts() -> None:
    assert chat_usage({"input_tokens": 3, "output_tokens": 4, "total_tokens": 7, "x": "y"}) == {
        "prompt_tokens": 3,
        "completion_tokens": 4,
        "total_tokens": 7,
    }
    assert chat_usage({"input_tokens": True, "output_tokens": -1}) is None


async def test_capabilities_choose_the_relay() -> None:
    docs: list[dict[str, Any] | None] = [None]

    async def probe() -> dict[str, Any] | None:
        return docs[0]

    now = [0.0]
    auto = NativeApis("auto", probe, clock=lambda: now[0])
    assert not await auto.responses()  # no document: chat only
    docs[0] = CAPABILITIES
    assert not await auto.runs()  # cached until it is asked again
    now[0] += 31
    assert await auto.responses() and await auto.runs()
    assert not await NativeApis("chat", probe).runs()
    assert await NativeApis("native", probe).responses()


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from([f"{HOST}/a.txt", "write_file", "run_1", "call_1", "../x", *TYPES]),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=5)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.dictionaries(st.sampled_from(KEYS), JSON, max_size=6), max_size=6))
def test_any_event_an_upstream_sends_is_read_by_shape(objs: list[dict[str, Any]]) -> None:
    """Any JSON objects as an agent's Responses or run events: no exception but the
    stream's own error, and no byte of a host folder in what comes out."""
    for stage in (ResponsesEventsPipeline(Links()), RunEventsPipeline(Links())):
        events = [SSEEvent(json.dumps(o), event=str(o.get("type", ""))[:20]) for o in objs]
        step = run_sync(stage.feed(events))
        out = [repr(e) for e in step.events + run_sync(stage.finish(failed=step.error is not None))]
        assert HOST not in json.dumps(out)
        if step.error is not None:
            assert HOST not in step.error.message


@given(st.text(max_size=40), st.text(max_size=40), st.integers(1, 5))
def test_an_adopted_run_continues_the_text_its_client_has(
    before: str, rest: str, pieces: int
) -> None:
    """The adopting instance journals only what the answer holds beyond the text the
    earlier one journaled, and run.completed's output is the answer once: the deltas
    a client assembles equal the output, or (a text that does not continue: a name
    that became a link) no more deltas come and the output is the answer whole."""
    whole = before + rest
    cut = [whole[i * len(whole) // pieces : (i + 1) * len(whole) // pieces] for i in range(pieces)]
    events: list[Event] = [Text(0, "content", p) for p in cut if p]
    events += [Usage({"total_tokens": 1}), Finish(0, "stop")]
    out, had = continued(events, before)
    front = RunEncoder("run_x", "m", first_seq=9)
    front.output.insert(0, had)
    done = front.end(out, {"download_link_mode": "private", "artifacts": []})
    deltas = "".join(e["delta"] for e in done if e["event"] == "message.delta")
    assert before + deltas == whole and done[-1]["output"] == whole
    assert [type(e) for e in out if not isinstance(e, Text)] == [Usage, Finish]
    other = continued(events, "\x00" + before)  # not where the answer begins
    assert [e for e in other[0] if isinstance(e, Text)] == [] and other[1] == whole
