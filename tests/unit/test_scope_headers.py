"""The direct routes' request headers (:class:`gateway.http.direct.ScopeHeaders`): case-insensitive
look-ups over the ASGI list, an index built on the first look-up, dropped by
``forget`` (a streaming answer does not hold it) and built again on the next."""

from __future__ import annotations

from gateway.http.direct import ScopeHeaders


def test_lookups_survive_forgetting_the_index() -> None:
    raw = [(b"X-Session-Id", b"s1"), (b"accept", b"a"), (b"Accept", b"b")]
    headers = ScopeHeaders(raw)
    assert headers.get("x-session-id") == "s1"
    assert headers.getlist("ACCEPT") == ["a", "b"]
    assert headers._index is not None
    headers.forget()
    assert headers._index is None  # nothing held while the answer streams
    assert headers.get("X-SESSION-ID") == "s1" and headers.get("missing", "d") == "d"
    assert headers.getlist("accept") == ["a", "b"]
