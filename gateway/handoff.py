"""The bounded queue between a relay's producer and its consumer.

A trio memory channel pair costs ≈ 2.4 KiB (its state, two channel objects, two
parking lots' ordered dicts) and serves any number of tasks on each side. A relay has
one producer and one consumer (the stream clock only ever adds without waiting), and
so has a request's ASGI queue (the connection's reader puts, the app receives), so
this is a list and at most one parked task per side (a second one waiting raises
:class:`trio.BusyResourceError` rather than hang): the same semantics for what the
relay uses (``send_nowait`` raising :class:`trio.WouldBlock` when full, ``send``
waiting for room, ``receive_nowait``/``receive``, :class:`trio.EndOfChannel` after the
producer closed its side and the queue ran dry, :class:`trio.BrokenResourceError` for a
producer whose consumer left) in a few hundred bytes.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import trio

__all__ = ["Handoff"]

T = TypeVar("T")


class Handoff(Generic[T]):
    __slots__ = ("_getter", "_items", "_limit", "_putter", "receive_closed", "send_closed")

    def __init__(self, limit: int) -> None:
        self._items: list[T] = []  # ≤ limit items: a list is smaller than a deque
        self._limit = limit
        self._getter: trio.lowlevel.Task | None = None
        self._putter: trio.lowlevel.Task | None = None
        #: the producer is done: the consumer gets EndOfChannel once the queue is empty
        self.send_closed = False
        #: the consumer left: the producer's sends raise BrokenResourceError
        self.receive_closed = False

    def __len__(self) -> int:
        return len(self._items)

    # -- producer side

    def send_nowait(self, item: T) -> None:
        if self.send_closed:
            raise trio.ClosedResourceError("this handoff's sending side is closed")
        if self.receive_closed:
            raise trio.BrokenResourceError("the consumer left")
        if len(self._items) >= self._limit:
            raise trio.WouldBlock
        self._items.append(item)
        self._wake_getter()

    async def send(self, item: T) -> None:
        # as trio's channels: a cancellation is seen before the item is queued, never
        # after (a checkpoint that raised then would lose a queued item's fate)
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            self.send_nowait(item)
        except trio.WouldBlock:
            pass
        else:
            await trio.lowlevel.cancel_shielded_checkpoint()
            return
        while True:
            if self._putter is not None:
                raise trio.BusyResourceError("another task is already waiting to send here")
            self._putter = trio.lowlevel.current_task()
            await trio.lowlevel.wait_task_rescheduled(self._abort_put)
            try:
                self.send_nowait(item)
            except trio.WouldBlock:
                continue
            return

    def send_past_limit(self, item: T) -> None:
        """Queue ``item`` even when full (a last message that must not wait: a
        disconnect); dropped if the consumer left."""
        if self.receive_closed or self.send_closed:
            return
        self._items.append(item)
        self._wake_getter()

    def close_send(self) -> None:
        self.send_closed = True
        self._wake_getter()

    # -- consumer side

    def receive_nowait(self) -> T:
        if self.receive_closed:
            raise trio.ClosedResourceError("this handoff's receiving side is closed")
        if self._items:
            item = self._items.pop(0)
            self._wake_putter()
            return item
        if self.send_closed:
            raise trio.EndOfChannel
        raise trio.WouldBlock

    async def receive(self) -> T:
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            item = self.receive_nowait()
        except trio.WouldBlock:
            pass
        else:
            await trio.lowlevel.cancel_shielded_checkpoint()
            return item
        while True:
            if self._getter is not None:
                raise trio.BusyResourceError("another task is already waiting to receive here")
            self._getter = trio.lowlevel.current_task()
            await trio.lowlevel.wait_task_rescheduled(self._abort_get)
            try:
                return self.receive_nowait()
            except trio.WouldBlock:
                continue

    def close_receive(self) -> None:
        self.receive_closed = True
        self._items.clear()
        self._wake_getter()  # a receiver still waiting (none in the gateway) is told
        self._wake_putter()

    # -- parking

    def _wake_getter(self) -> None:
        getter = self._getter
        if getter is not None:
            self._getter = None
            trio.lowlevel.reschedule(getter)

    def _wake_putter(self) -> None:
        putter = self._putter
        if putter is not None:
            self._putter = None
            trio.lowlevel.reschedule(putter)

    def _abort_get(self, _: object) -> trio.lowlevel.Abort:
        self._getter = None
        return trio.lowlevel.Abort.SUCCEEDED

    def _abort_put(self, _: object) -> trio.lowlevel.Abort:
        self._putter = None
        return trio.lowlevel.Abort.SUCCEEDED
