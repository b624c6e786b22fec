"""``ChannelBody`` (gateway/http/replies.py): a body whose entry fails or is cancelled
(the client left during the relay's first step) exits its channel itself, and its
``on_close`` runs exactly once however the body ends, or when it is never entered.

Red-team finding (issue 35): a reset 1 ms after ``GET /v1/runs/{id}/events`` cancelled
the first step, ``async with`` never called ``__aexit__``, the relay's nursery stayed
open ("Nursery stack corrupted"), and the open-streams gauge stayed up for good."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
import trio.lowlevel

from gateway.http.replies import ChannelBody


class Channel:
    """A channel whose first step waits for ever (or fails), that records its exit;
    like a relay, it opens a nursery when entered."""

    def __init__(self, first_step_fails: bool = False) -> None:
        self.exited = 0
        self.fails = first_step_fails
        self._cm = self._open()

    @asynccontextmanager
    async def _open(self) -> AsyncIterator[AsyncIterator[bytes]]:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            try:
                yield self._chunks()
            finally:
                self.exited += 1
                nursery.cancel_scope.cancel()

    async def _chunks(self) -> AsyncIterator[bytes]:
        yield b"x"

    async def __aenter__(self) -> AsyncIterator[bytes]:
        return await self._cm.__aenter__()

    async def __aexit__(self, *exc: object) -> bool | None:
        return await self._cm.__aexit__(*exc)  # type: ignore[arg-type]

    async def first_step(self) -> None:
        if self.fails:
            raise ValueError("the first step failed")
        await trio.sleep_forever()


async def test_cancelled_during_the_first_step_exits_the_channel_and_closes_once() -> None:
    closed: list[int] = []
    channel = Channel()
    body = ChannelBody(channel, on_close=lambda: closed.append(1))
    with trio.move_on_after(0.01) as scope:
        async with body:
            raise AssertionError("the first step never ends")
    assert scope.cancelled_caught
    assert channel.exited == 1 and closed == [1]
    body.discard()  # the request's cleanup runs it again: nothing more
    assert closed == [1]
    await trio.lowlevel.checkpoint()  # the task's nursery stack is intact: trio goes on


async def test_a_failing_first_step_exits_the_channel_and_closes_once() -> None:
    closed: list[int] = []
    channel = Channel(first_step_fails=True)
    raised: list[BaseException] = []
    try:
        async with ChannelBody(channel, on_close=lambda: closed.append(1)):
            pass
    except* ValueError as group:  # (raised through the channel's nursery)
        raised.append(group)
    assert raised
    assert channel.exited == 1 and closed == [1]


async def test_a_body_never_entered_closes_once_when_discarded() -> None:
    closed: list[int] = []
    body = ChannelBody(Channel(), on_close=lambda: closed.append(1))
    body.discard()
    body.discard()
    assert closed == [1]
