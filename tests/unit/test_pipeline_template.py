"""The plain deltas' template (``ChatPipeline._from_template``) is the general path.

A stream's plain deltas are written alike but for their text, so the pipeline learns
the text before and after the content string once and then scans that string alone.
Whatever an upstream writes (key order, spacing, escaped keys, a ``"content"`` key in
another object, a text that tries to close the string early, any one-character change
anywhere in an event) the pipeline must hand on exactly what it hands on with the
plain path switched off.
"""

from __future__ import annotations

import json
import os
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.core.sse import SSEEvent
from gateway.stream.pipeline import ChatPipeline
from tests import pipegen

CI = settings(
    max_examples=int(os.environ.get("GATEWAY_PIPELINE_EXAMPLES", "8000")) // 8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
ROOT = pipegen._ROOT_PREFIXES[0]
#: raw text put where a delta's string was (closing it early, bad escapes, a raw control)
RAWS = (
    *('"x","y":"z"', '"x","refusal":"z"', '"x","role":"assistant"'),
    *('"a\\"', '"\\ud800"', '"\x01"', '""', '"x"},"finish_reason":"stop"'),
)


def _dumps(obj: Any, style: int) -> str:
    if style == 0:
        return json.dumps(obj, separators=(",", ":"))
    if style == 1:
        return json.dumps(obj)
    if style == 2:
        return json.dumps(obj, ensure_ascii=False, indent=1)
    return json.dumps(obj, separators=(" , ", " : ")).replace('"content"', '"con\\u0074ent"', 1)


def _chunk(delta: dict[str, Any], head: dict[str, Any], tail: dict[str, Any]) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": None, **tail}
    return {**head, "choices": [choice]}


def _summary(pipeline: ChatPipeline, reads: list[list[str]]) -> list[Any]:
    out: list[Any] = []
    for read in reads:
        step = pipegen.run_sync(pipeline.feed([SSEEvent(data) for data in read]))
        err = None if step.error is None else (step.error.code, str(step.error))
        out.append((step.events, step.done, err))
        if step.done or step.error:
            return out
    out.append(pipegen.run_sync(pipeline.finish()))
    return out


def _both(reads: list[list[str]]) -> tuple[list[Any], list[Any]]:
    fast = _summary(ChatPipeline(pipegen.StubLinks()), reads)
    with mock.patch.object(ChatPipeline, "_plain_delta", return_value=None):
        general = _summary(ChatPipeline(pipegen.StubLinks()), reads)
    return fast, general


texts = st.one_of(
    st.text(max_size=12),
    st.sampled_from(
        ['a"b', "a\\b", "\\u0041", "x\n", "}]}", '"},"finish_reason":"stop"}]}', ROOT + "r.pdf "]
    ),
    st.builds(lambda w: f"see {ROOT}{w}.txt ", st.text("abc/", min_size=1, max_size=5)),
)
heads = st.fixed_dictionaries(
    {"id": st.sampled_from(["c1", "content"]), "created": st.integers(1, 3)},
    optional={
        "object": st.sampled_from(["chunk", '"content":"x"']),
        "model": st.sampled_from(["m", "content", '"content":']),
        "x": st.dictionaries(st.sampled_from(["content", "y"]), st.text(max_size=3), max_size=2),
    },
)
tails = st.fixed_dictionaries(
    {}, optional={"logprobs": st.just({"content": None}), "extra": st.just({"a": "content"})}
)


@st.composite
def streams(draw: st.DrawFn) -> list[list[str]]:
    """Reads of one stream: a role chunk, then plain deltas written from one template
    (style, key order, extra keys), some of them changed by one character or spliced
    with raw text in place of their string."""
    head, tail, style = draw(heads), draw(tails), draw(st.integers(0, 3))
    role = _dumps(_chunk({"role": "assistant", "content": ""}, head, tail), style)
    events = [role]
    for _ in range(draw(st.integers(1, 12))):
        data = _dumps(_chunk({"content": draw(texts)}, head, tail), style)
        how = draw(st.integers(0, 5))
        if how == 4 and data:  # one character changed, anywhere
            at = draw(st.integers(0, len(data) - 1))
            data = data[:at] + draw(st.sampled_from('"\\{}[],: x0')) + data[at + 1 :]
        elif how == 5:  # raw text where the string was
            marker = json.dumps("\x00")
            base = _dumps(_chunk({"content": "\x00"}, head, tail), style)
            if marker in base:
                raw = draw(st.sampled_from(RAWS))
                data = base.replace(marker, raw, 1)
        events.append(data)
    cuts = sorted(draw(st.sets(st.integers(1, len(events) - 1), max_size=4)))
    return [events[a:b] for a, b in zip([0, *cuts], [*cuts, len(events)], strict=True)]


@CI
@given(streams())
def test_the_template_changes_nothing(reads: list[list[str]]) -> None:
    fast, general = _both(reads)
    assert fast == general


def _event(text: str, **head: Any) -> str:
    return json.dumps(_chunk({"content": text}, {"id": "c1", "model": "m", **head}, {}))


def test_the_template_is_learnt_once_and_used_for_every_plain_delta() -> None:
    pipeline = ChatPipeline(pipegen.StubLinks())
    role = json.dumps(_chunk({"role": "assistant", "content": ""}, {"id": "c1", "model": "m"}, {}))
    pipegen.run_sync(pipeline.feed([SSEEvent(role)]))
    reads = [[_event(f"word {i} "), _event('a "quoted" \\ word ')] for i in range(50)]
    with mock.patch.object(pipeline, "_parse_plain", wraps=pipeline._parse_plain) as whole:
        for read in reads:
            pipegen.run_sync(pipeline.feed([SSEEvent(d) for d in read]))
    assert whole.call_count == 1  # the first delta; the other 99 from the template
    assert pipeline._template is not None


def test_a_content_key_elsewhere_is_never_read_as_the_delta() -> None:
    """Another object's ``content`` (before or after the delta's, escaped or not) that
    changes from chunk to chunk while the delta's text does not."""
    shapes = (
        '{"id":"c1","x":{"content":"%s"},"choices":[{"index":0,"delta":{"content":"x"}}]}',
        '{"id":"c1","choices":[{"index":0,"delta":{"content":"x"},"logprobs":{"content":"%s"}}]}',
        '{"id":"c1","choices":[{"index":0,"delta":{"con\\u0074ent":"x"},"content":"%s"}]}',
        '{"id":"c1","choices":[{"content":"%s","index":0,"delta":{"con\\u0074ent":"x"}}]}',
    )
    for shape in shapes:
        role = json.loads(shape % "x")
        role["choices"][0]["delta"] = {"role": "assistant"}
        reads = [[json.dumps(role)], *([shape % v] for v in ("x", "x", "secret1", "secret2"))]
        fast, general = _both(reads)
        assert fast == general, shape
        assert "secret" not in repr(fast)


def test_a_decoy_content_key_before_the_delta_is_not_learnt() -> None:
    """The only literal ``"content"`` key is another object's, equal to the delta's text
    (whose key is escaped): a template there would read the decoy's next values as the
    delta's text."""

    def data(decoy: str) -> str:
        head = f'{{"id":"c1","x":{{"content":"{decoy}"}},"choices":[{{"index":0,'
        return head + '"delta":{"con\\u0074ent":"hi"},"finish_reason":null}]}'

    role = json.dumps(_chunk({"role": "assistant"}, {"id": "c1", "x": {"content": "hi"}}, {}))
    reads = [[role], [data("hi")], [data("hi")], *([data(f"secret{i}")] for i in range(3))]
    fast, general = _both(reads)
    assert fast == general
    assert "secret" not in repr(fast)


def test_a_new_model_id_ends_the_template() -> None:
    reads = [[_event("a ")], [_event("b ")], [_event("c ", model="n")], [_event("d ", model="n")]]
    reads.insert(0, [json.dumps(_chunk({"role": "assistant"}, {"id": "c1", "model": "m"}, {}))])
    fast, general = _both(reads)
    assert fast == general


def test_a_stream_whose_chunks_all_differ_stops_learning() -> None:
    pipeline = ChatPipeline(pipegen.StubLinks())
    role = json.dumps(_chunk({"role": "assistant"}, {"id": "c1", "created": 0}, {}))
    pipegen.run_sync(pipeline.feed([SSEEvent(role)]))
    with mock.patch.object(pipeline, "_learn", wraps=pipeline._learn) as learn:
        for i in range(20):  # a timestamp per chunk: each one new metadata
            data = json.dumps(_chunk({"content": "x"}, {"id": "c1", "created": 0}, {"t": i}))
            pipegen.run_sync(pipeline.feed([SSEEvent(data)]))
    assert learn.call_count == 4  # TEMPLATE_TRIES
