"""harness.scripted_llm: the model behind the real agent answers as OpenAI clients expect.

Read back with the openai SDK (the client Hermes itself uses), streamed and not: the
text, the tool calls (ids, names, JSON arguments cut into pieces), the finish reason,
the usage chunk; side requests (no ``tools``) never consume a turn; a used-up script
answers a fixed text instead of hanging.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import openai
import pytest

from harness.scripted_llm import EXHAUSTED, MODEL, SIDE_TEXT, ScriptedLLM, ToolCall, Turn

TOOLS = [{"type": "function", "function": {"name": "write_file", "parameters": {}}}]
MESSAGES = [{"role": "user", "content": "go"}]


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    server = ScriptedLLM.start()
    try:
        yield server
    finally:
        server.close()


def _client(llm: ScriptedLLM) -> openai.OpenAI:
    return openai.OpenAI(base_url=llm.base_url, api_key="x", max_retries=0)


def test_streamed_tool_calls_then_text(llm: ScriptedLLM) -> None:
    calls = [
        ToolCall("write_file", {"path": "/tmp/a b/ü.md", "content": "x" * 50}),
        ToolCall("terminal", {"command": "ls"}),
    ]
    llm.script([Turn(text="Let me.", tool_calls=calls, chunk_chars=3), Turn(text="Done.")])
    with _client(llm) as client:
        args: dict[int, list[str]] = {}
        names: dict[int, str] = {}
        ids: dict[int, str] = {}
        text, finish, usage = [], None, None
        stream = client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            tools=TOOLS,
            stream=True,
            stream_options={"include_usage": True},
        )
        for chunk in stream:
            usage = chunk.usage or usage
            for ch in chunk.choices:
                text.append(ch.delta.content or "")
                finish = ch.finish_reason or finish
                for tc in ch.delta.tool_calls or ():
                    if tc.id:
                        ids[tc.index] = tc.id
                    if tc.function and tc.function.name:
                        names[tc.index] = tc.function.name
                    if tc.function and tc.function.arguments:
                        args.setdefault(tc.index, []).append(tc.function.arguments)
        assert "".join(text) == "Let me."
        assert finish == "tool_calls"
        assert usage is not None and usage.total_tokens > 0
        assert names == {0: "write_file", 1: "terminal"}
        assert ids == {0: "call_1_0", 1: "call_1_1"}
        assert len(args[0]) > 1  # streamed in pieces
        assert [json.loads("".join(args[i])) for i in (0, 1)] == [c.arguments for c in calls]
        answer = client.chat.completions.create(model=MODEL, messages=MESSAGES, tools=TOOLS)
        assert answer.choices[0].message.content == "Done."
        assert answer.choices[0].finish_reason == "stop"
    assert llm.turns_left == 0 and llm.turns_served == 2
    assert [r.get("stream") for r in llm.requests] == [True, None]


def test_side_requests_do_not_consume_turns_and_an_empty_script_says_so(llm: ScriptedLLM) -> None:
    llm.script([Turn(tool_calls=[ToolCall("write_file", {"path": "/tmp/x"})])])
    with _client(llm) as client:
        side = client.chat.completions.create(model=MODEL, messages=MESSAGES)
        assert side.choices[0].message.content == SIDE_TEXT
        assert llm.turns_left == 1
        got = client.chat.completions.create(model=MODEL, messages=MESSAGES, tools=TOOLS)
        call = got.choices[0].message.tool_calls[0]  # type: ignore[index]
        assert call.function.name == "write_file"  # type: ignore[union-attr]
        assert json.loads(call.function.arguments) == {"path": "/tmp/x"}  # type: ignore[union-attr]
        assert got.choices[0].finish_reason == "tool_calls"
        again = client.chat.completions.create(model=MODEL, messages=MESSAGES, tools=TOOLS)
        assert again.choices[0].message.content == EXHAUSTED
        assert [m.id for m in client.models.list()] == [MODEL]


def test_bad_requests_get_openai_errors(llm: ScriptedLLM) -> None:
    r = httpx.post(llm.base_url + "/chat/completions", content=b"{nope")
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    assert httpx.post(llm.base_url + "/embeddings", json={}).status_code == 404
