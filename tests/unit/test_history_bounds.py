"""The byte bound of earlier conversation (``limits.history_max_bytes``): a session's
stored history and a rebuilt ``previous_response_id`` chain keep their newest messages."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from gateway.principals.sessions import message_bytes, trim_history

messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant"]), "content": st.text(max_size=60)}
    ),
    max_size=30,
)


@given(messages, st.integers(min_value=0, max_value=2000), st.integers(min_value=1, max_value=40))
def test_the_newest_messages_that_fit(ms: list[dict[str, str]], limit: int, most: int) -> None:
    kept = trim_history(ms, limit, most)
    assert kept == ms[len(ms) - len(kept) :]  # a suffix: the newest, in order
    assert len(kept) <= most
    assert sum(message_bytes(m) for m in kept) <= limit
    if len(kept) < min(len(ms), most):  # one more (the next older) would not fit
        older = ms[len(ms) - len(kept) - 1]
        assert sum(message_bytes(m) for m in kept) + message_bytes(older) > limit


def test_weight_is_the_stored_json() -> None:
    m = {"role": "user", "content": "é 𝄞"}
    assert message_bytes(m) == len(json.dumps(m, separators=(",", ":")))
    assert message_bytes(m) == len(json.dumps(m, separators=(",", ":")).encode())  # ASCII
