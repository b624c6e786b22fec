"""The small per-request state objects: the disconnect callback and the text log."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.core.events import TextLog
from gateway.http.exchange import Disconnect


def test_a_disconnect_calls_the_registered_callback_once() -> None:
    calls: list[str] = []
    gone = Disconnect()
    gone.on(lambda: calls.append("a"))
    gone.set()
    gone.set()
    assert calls == ["a"] and gone.happened


def test_a_callback_registered_after_the_disconnect_runs_at_once() -> None:
    calls: list[str] = []
    gone = Disconnect()
    gone.set()
    gone.on(lambda: calls.append("late"))
    assert calls == ["late"]


def test_a_forgotten_callback_is_not_called() -> None:
    calls: list[str] = []
    gone = Disconnect()
    gone.on(lambda: calls.append("x"))
    gone.on(None)
    gone.set()
    assert calls == [] and gone.happened


@given(st.lists(st.text(max_size=5), max_size=2 * TextLog.BLOCK + 7))
def test_the_text_log_is_the_pieces_joined(pieces: list[str]) -> None:
    log = TextLog()
    for p in pieces:
        log.append(p)
    assert log.text() == "".join(pieces)
