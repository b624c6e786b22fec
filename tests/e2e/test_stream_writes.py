"""A relayed stream's writes are joined when their bytes are ready together, never held.

Real hypercorn for the gateway; the upstream is a :class:`harness.transport.ScriptedTransport`.
Every socket write of the gateway's connections is recorded (the connection handler's
one ``send(2)``, :meth:`gateway.http.connection.Connection._send_now`): an answer the upstream gave at once leaves in one write
(head, events, the body's end); an upstream that is slow to its first event still gets
the client the response head at once, and each event in its own write as it comes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from gateway.core.sse import DONE
from gateway.http.connection import Connection
from harness.transport import Scripted, ScriptedTransport
from tests.conftest import make_config, start_gateway
from tests.e2e.test_hostile_upstream import CHAT, MESSAGES, SCRIPTED_URL, chunk
from tests.upstream_server import HEAD, raw_server


def record_writes(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    writes: list[bytes] = []
    original = Connection._send_now

    def recording(self: Connection, data: Any) -> Any:
        writes.append(bytes(data))
        return original(self, data)

    monkeypatch.setattr(Connection, "_send_now", recording)
    return writes


BODY = {"model": "m", "messages": MESSAGES, "stream": True}


async def test_an_answer_ready_at_once_leaves_in_one_write(
    nursery: trio.Nursery, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a real socket upstream (the lean client) that answers everything in one write
    events = chunk({"content": "hello"}) + chunk({}, "stop") + DONE
    answer = [HEAD + b"%x\r\n%s\r\n0\r\n\r\n" % (len(events), events)]
    async with raw_server(lambda n: answer) as srv:
        gw = await start_gateway(nursery, make_config(tmp_path, srv.url + "/v1"))
        writes = record_writes(monkeypatch)
        async with gw.client() as c:
            for _ in range(10):
                writes.clear()
                resp = await c.post(CHAT, json=BODY)
                assert resp.status_code == 200 and "hello" in resp.text
                assert "[DONE]" in resp.text
                assert len(writes) == 1, [w[:30] + b"..." + w[-30:] for w in writes]
                assert writes[0].startswith(b"HTTP/1.1 200") and writes[0].endswith(b"0\r\n\r\n")


async def test_a_slow_upstream_gets_the_head_out_at_once(
    nursery: trio.Nursery, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gates = [trio.Event(), trio.Event(), trio.Event()]
    answer = Scripted([chunk({"content": "one"}), chunk({"content": "two"}), DONE], gates=gates)
    transport = ScriptedTransport(lambda req: answer)
    gw = await start_gateway(nursery, make_config(tmp_path, SCRIPTED_URL), transport=transport)
    writes = record_writes(monkeypatch)
    async with gw.client() as c, c.stream("POST", CHAT, json=BODY) as resp:
        # the head came though the upstream sent nothing yet
        assert resp.status_code == 200
        assert len(writes) == 1 and writes[0].startswith(b"HTTP/1.1 200")
        lines = resp.aiter_lines()
        for n, (gate, word) in enumerate(zip(gates[:2], ["one", "two"], strict=True)):
            gate.set()
            while True:  # each event arrives as it comes, in its own write
                line = await lines.__anext__()
                if line.startswith("data: "):
                    break
            assert json.loads(line[6:])["choices"][0]["delta"]["content"] == word
            assert len(writes) == n + 2
        gates[2].set()
        rest = [line async for line in lines]
        assert "data: [DONE]" in rest
