"""The pipeline's synchronous path for plain content deltas is the general path.

:meth:`ChatPipeline._plain_delta` takes the common event (a content delta of choice
0, nothing else the pipeline reads) without the general path's awaits. Whatever the
body and its read splits, the stage must hand the relay exactly what it hands it with
that path switched off: the same batches, final events, terminal, error, manifest and
links.
"""

from __future__ import annotations

import json
import os
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings

from gateway.core.events import BOUNDARY, Text
from gateway.core.sse import SSEEvent
from gateway.stream.pipeline import ChatPipeline
from tests import pipegen
from tests.pipegen import Body

CI = settings(
    max_examples=int(os.environ.get("GATEWAY_PIPELINE_EXAMPLES", "8000")) // 4,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(scope="module", autouse=True)
def corpus() -> None:
    pipegen.build_corpus(2000)


def _summary(trace: pipegen.Trace) -> tuple[Any, ...]:
    error = trace.error
    err = None if error is None else (type(error), error.code, str(error))
    return (trace.batches, trace.terminal, trace.final, err, trace.manifest, trace.links)


@CI
@given(pipegen.bodies())
def test_plain_path_changes_nothing(body: Body) -> None:
    fast = pipegen.run_pipeline(body, body.splits)
    with mock.patch.object(ChatPipeline, "_plain_delta", return_value=None):
        general = pipegen.run_pipeline(body, body.splits)
    assert _summary(fast) == _summary(general)


def _event(delta: dict[str, Any], **extra: Any) -> str:
    choice = {"index": 0, "delta": delta, "finish_reason": None}
    obj = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    return json.dumps({**obj, "choices": [choice], **extra})


def test_plain_path_is_taken_for_the_common_event_only() -> None:
    pipeline = ChatPipeline(pipegen.StubLinks())
    first = _event({"role": "assistant", "content": ""})
    assert pipeline._plain_delta(first) is None  # role: the general path
    pipegen.run_sync(pipeline.feed([SSEEvent(first)]))
    pipegen.run_sync(pipeline.feed([SSEEvent(_event({"content": "a "}))]))
    assert pipeline._plain_delta(_event({"content": "hello "})) == ["hello "]
    for other in (
        _event({"content": "x", "refusal": "y"}),  # a second channel
        _event({"content": "x"}, usage={"total_tokens": 1}),
        _event({"content": "x"}, error={"message": "no"}),
        _event({"content": "x"}).replace('"model": "m"', '"model": "n"'),  # new metadata
        _event({"content": "x"}).replace('"index": 0', '"index": 1'),
        _event({"content": "x"}).replace('"index": 0', '"index": false'),
        _event({"content": "x"}).replace('"finish_reason": null', '"finish_reason": "stop"'),
        _event({"content": "x"}) + " x",  # not JSON
        " " + _event({"content": "x"}),
        "[DONE]",
    ):
        assert pipeline._plain_delta(other) is None, other
    step = pipegen.run_sync(pipeline.feed([SSEEvent(_event({"content": "b c "}))]))
    assert step.events == [Text(0, "content", "b c "), BOUNDARY]


def test_the_paths_of_one_read_are_resolved_in_one_batch() -> None:
    """Plain deltas of one read holding several new paths ask the resolver once for
    all of them; the text is what the same deltas give one read each."""
    root = pipegen._ROOT_PREFIXES[0]
    words = [f"see {root}a.txt and ", f"{root}b.txt, ", "then ", f"{root}a.txt ok "]
    events = [
        _event({"role": "assistant", "content": ""}),
        *(_event({"content": w}) for w in words),
    ]

    def run(reads: list[list[str]]) -> tuple[list[str], int]:
        links = pipegen.StubLinks()
        pipeline = ChatPipeline(links)
        out: list[str] = []
        for read in reads:
            step = pipegen.run_sync(pipeline.feed([SSEEvent(e) for e in read]))
            out += [e.text for e in step.events if isinstance(e, Text)]
        out += [e.text for e in pipegen.run_sync(pipeline.finish()) if isinstance(e, Text)]
        return out, links.batches

    one_read, batches = run([events])
    assert batches == 1
    separate, _ = run([[e] for e in events])
    assert "".join(one_read) == "".join(separate)
    assert root not in "".join(one_read)  # every path went out as its link
