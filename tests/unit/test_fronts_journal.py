"""A background response's journal as SSE: the store's own interruption event too."""

from __future__ import annotations

import json

from gateway.core.sse import SSEDecoder
from gateway.fronts.responses import (
    ResponsesEncoder,
    ResponsesJournalFront,
    journal_response_sse,
)
from gateway.store import INTERRUPTED_ERROR
from gateway.store.base import interrupted_event


def decode(data: bytes) -> list[tuple[str, dict[str, object]]]:
    return [(ev.event, json.loads(ev.data)) for ev in SSEDecoder().feed(data)]


def test_the_interruption_event_goes_out_as_response_failed() -> None:
    front = ResponsesJournalFront(ResponsesEncoder("resp_x", "m", created_at=7, background=True))
    journal = front.start()  # what the instance journaled before it died: seq 1..4
    assert [o["seq"] for o in journal] == [1, 2, 3, 4]
    journal.append(interrupted_event("resp_x", 5))  # what the lease watcher appends
    encode = journal_response_sse("resp_x", "m", 7)
    out = decode(encode(journal))
    assert [obj["sequence_number"] for _, obj in out] == [0, 1, 2, 3, 4]
    assert all("seq" not in obj for _, obj in out)
    kind, last = out[-1]
    assert kind == last["type"] == "response.failed"
    response = last["response"]
    assert isinstance(response, dict)
    assert response["id"] == "resp_x" and response["model"] == "m"
    assert response["status"] == "failed" and response["background"] is True
    assert response["created_at"] == 7 and response["error"] == INTERRUPTED_ERROR
    # every other event passes as it was journaled
    assert encode(journal[:4]) == b"".join(encode([o]) for o in journal[:4])
