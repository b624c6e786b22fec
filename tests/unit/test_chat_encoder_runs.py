"""The chat encoder's template for plain content deltas is its general chunk builder.

``ChatEncoder.encode`` takes every run of plain content deltas (choice 0, channel
``content``, with their boundaries) through a byte template and the rest through the
chunk builder; ``encode_general`` builds every chunk. Whatever the events and however
they are batched, both must give the same bytes and leave the encoder in the same
state (the text a session stores, the choices seen, the held finish and usage).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.events import BOUNDARY, Event, Finish, Meta, Named, Role, Text, Usage
from gateway.fronts.chat import ChatEncoder
from gateway.fronts.openwebui import OpenWebUIEncoder

_texts = st.text(alphabet=st.sampled_from('ab \n"\\é\u2028\ud800'), max_size=6)

EVENTS = st.one_of(
    st.builds(lambda t: Text(0, "content", t), _texts),  # the plain delta, mostly
    st.builds(lambda t: Text(0, "content", t), _texts),
    st.just(BOUNDARY),
    st.just(BOUNDARY),
    st.builds(Text, st.sampled_from([0, 1]), st.sampled_from(["content", "reasoning"]), _texts),
    st.builds(Role, st.sampled_from([0, 1]), st.just("assistant")),
    st.builds(Finish, st.sampled_from([0, 1]), st.sampled_from(["stop", "length"])),
    st.just(Usage({"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3})),
    st.builds(lambda m: Meta(id="chatcmpl-" + m, created=1, model=m), st.sampled_from("xy")),
    st.just(Named("ping", {"n": 1})),
)


def _state(enc: ChatEncoder) -> tuple[object, ...]:
    return (enc.text(0), enc.text(1), sorted(enc._seen), list(enc._held), enc.meta)


def _both(batches: list[list[Event]]) -> None:
    fast, ref = (ChatEncoder(relay_named=True), ChatEncoder(relay_named=True))
    for batch in batches:
        assert fast.encode(list(batch)) == ref.encode_general(list(batch))
    assert _state(fast) == _state(ref)
    assert fast.end([], {}) == ref.end([], {})


@settings(max_examples=400)
@given(st.lists(st.lists(EVENTS, max_size=14), max_size=5))
def test_any_batches_encode_as_the_chunk_builder_does(batches: list[list[Event]]) -> None:
    _both(batches)


def test_a_first_batch_with_the_role_and_many_deltas() -> None:
    first = [Role(0, "assistant"), Text(0, "content", ""), BOUNDARY]
    for i in range(64):
        first += [Text(0, "content", f"w{i} "), BOUNDARY]
    last = [Text(0, "content", "end"), BOUNDARY, Finish(0, "stop"), BOUNDARY]
    _both([first, last])


def test_a_delta_not_closed_by_a_boundary_shares_its_chunk() -> None:
    # the text before the role is in the role's chunk, as the upstream sent it
    _both([[Text(0, "content", "a"), BOUNDARY, Text(0, "content", "b"), Role(1, "assistant")]])


def test_the_open_webui_front_keeps_the_same_bytes() -> None:
    batch = [Role(0, "assistant"), BOUNDARY, Text(0, "content", "x"), BOUNDARY, Finish(0, "stop")]
    a, b = OpenWebUIEncoder("m", "public"), OpenWebUIEncoder("m", "public")
    b.meta = a.meta
    general = ChatEncoder.encode_general(b, [e for e in batch])
    assert a.encode(batch) == general
