"""The relay's inline start (:meth:`gateway.stream.relay.Relay._inline`): a source that holds
items already (``read_nowait``) has them relayed in the consumer's task, with no
producer task when the stream ends there, and with exactly the outputs the producer
would have made in every other case (items held, then waited for; errors; a full
queue; a consumer cancelled mid-way)."""

from __future__ import annotations

import random
from typing import Any

import pytest
import trio
import trio.testing

from gateway.core.errors import UpstreamError
from gateway.stream import relay as relay_module
from gateway.stream.relay import INLINE_READS, OUT_BUFFER, Relay
from tests.unit.test_relay import Echo, Script, Tags, opts, take_instant


class Held(Script):
    """A :class:`Script` whose first ``held`` steps are already there (``read_nowait``);
    the rest is read as the script says."""

    def __init__(self, held: int, *steps: Any) -> None:
        super().__init__(*steps)
        self.held = held
        self.nowait = 0

    def read_nowait(self) -> bytes | None:
        if self.held <= 0 or not self.steps or not _instant(self.steps[0]):
            raise trio.WouldBlock
        self.held -= 1
        self.nowait += 1
        return take_instant(self)


def _seeded_script(seed: int) -> tuple[list[Any], random.Random]:
    """Items, one-second waits, now and then an error step, then an end or an error
    (and the generator, to draw more from)."""
    rnd = random.Random(seed)
    steps: list[Any] = []
    for _ in range(rnd.randrange(0, 40)):
        steps.append(rnd.choice([b"x", b"y", b"z", 1, b"ERR" if rnd.random() < 0.05 else b"w"]))
    steps.append(rnd.choice([None, None, b"DONE", UpstreamError("cut", code="upstream_error")]))
    return steps, rnd


def _instant(step: Any) -> bool:
    return step is None or isinstance(step, bytes | BaseException)


class Spawns(trio.abc.Instrument):
    def __init__(self) -> None:
        self.names: list[str] = []

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.names.append(task.name)


async def _outputs(relay: Relay[Any, Any, Any], first_step: bool = True) -> list[bytes]:
    out = []
    with trio.fail_after(1000):  # a relay waiting on itself fails (autojump: at once)
        async with relay as outputs:
            if first_step:
                await relay.first_step()
            async for o in outputs:
                out.append(o)
    return out


async def test_a_whole_short_answer_is_relayed_without_a_task() -> None:
    source = Held(10, b"a", b"b", None)
    spawns = Spawns()
    trio.lowlevel.add_instrument(spawns)
    try:
        relay = Relay(source, Echo(), Tags(), opts())
        async with relay as outputs:
            assert relay.ready() and relay._nursery is None
            got = [o async for o in outputs]
    finally:
        trio.lowlevel.remove_instrument(spawns)
    assert got == [b"S|E:a|E:b|E:held|END|"]  # queued together: joined, one write
    assert not [n for n in spawns.names if "_produce" in n]
    assert source.nowait == 3 and source.reads == 0 and source.closed == 1


async def test_nothing_held_starts_the_producer_as_before() -> None:
    source = Held(0, b"a", None)
    assert await _outputs(Relay(source, Echo(), Tags(), opts())) == [b"S|E:a|E:held|END|"]
    assert source.nowait == 0 and source.reads == 2


async def test_the_queue_bound_stops_the_inline_start_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(relay_module, "INLINE_READS", 10**6)  # the queue's room alone
    items = [b"%d" % i for i in range(5 * OUT_BUFFER)]
    source = Held(10**6, *items, None)
    got = await _outputs(Relay(source, Echo(), Tags(), opts()))
    assert b"".join(got).endswith(b"E:held|END|") and len(b"".join(got)) > 5 * OUT_BUFFER
    assert OUT_BUFFER - 2 <= source.nowait < len(items)


async def test_held_items_then_a_wait_go_on_in_the_producer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = Held(2, b"a", b"b", 5, b"c", None)
    got = await _outputs(Relay(source, Echo(), Tags(), opts()))
    assert b"".join(got) == b"S|E:a|E:b|E:c|E:held|END|"
    assert got[0] == b"S|E:a|E:b|"  # what was held leaves with the head
    assert source.nowait == 2


async def test_an_error_held_ends_the_stream_with_its_code() -> None:
    source = Held(5, b"a", UpstreamError("cut", code="upstream_disconnected"))
    got = await _outputs(Relay(source, Echo(), Tags(), opts()))
    assert got == [b"S|E:a|E:held|FAIL:upstream_disconnected|"]
    assert source.closed == 1


async def test_an_error_step_held_ends_the_stream() -> None:
    source = Held(5, b"a", b"ERR", b"never")
    got = await _outputs(Relay(source, Echo(), Tags(), opts()))
    assert got == [b"S|E:a|E:before-error|E:held|FAIL:upstream_error|"]


async def test_more_held_than_the_queue_holds_never_waits_on_itself() -> None:
    items = [b"%d" % i for i in range(5 * OUT_BUFFER)]
    source = Held(10**6, *items, None)
    with trio.fail_after(5):  # a push that waited for this task would hang here
        got = await _outputs(Relay(source, Echo(), Tags(), opts()))
    expected = b"S|" + b"".join(b"E:" + i + b"|" for i in items) + b"E:held|END|"
    assert b"".join(got) == expected
    assert source.nowait == INLINE_READS  # then the producer read the rest


async def test_a_stop_before_entering_leaves_the_start_to_the_producer() -> None:
    source = Held(5, b"a", None)
    relay = Relay(source, Echo(), Tags(), opts())
    relay.stop()
    assert await _outputs(relay) == [b"S|E:held|CANCEL|"]
    assert source.nowait == 0


async def test_a_consumer_cancelled_while_a_held_item_is_fed_releases_the_source() -> None:
    class SlowEcho(Echo):
        async def feed(self, item: bytes) -> Any:
            await trio.sleep_forever()

    source = Held(5, b"a", None)
    relay = Relay(source, SlowEcho(), Tags(), opts())
    with trio.move_on_after(0.05):
        async with relay:
            pytest.fail("entered although the stage never returned")  # pragma: no cover
    assert source.closed == 1
    assert relay._timer is not None and relay._timer.target is None  # off the clock


@pytest.mark.parametrize("seed", range(40))
async def test_any_held_prefix_gives_the_outputs_of_the_producer(
    seed: int, autojump_clock: trio.testing.MockClock
) -> None:
    """Seeded scripts (items, waits, an error or the end): the joined outputs are the
    same whatever part of the script is held, and the same as without ``read_nowait``."""
    steps, rnd = _seeded_script(seed)
    plain = b"".join(await _outputs(Relay(Script(*steps), Echo(), Tags(), opts())))
    for held in (0, 1, rnd.randrange(0, 50), 10**6):
        got = b"".join(await _outputs(Relay(Held(held, *steps), Echo(), Tags(), opts())))
        assert got == plain, (held, steps)


async def test_a_source_that_closes_without_waiting_is_not_closed_again() -> None:
    class Quick(Held):
        def close_nowait(self) -> bool:
            self.closed += 1
            return True

    source = Quick(10, b"a", None)
    assert await _outputs(Relay(source, Echo(), Tags(), opts())) == [b"S|E:a|E:held|END|"]
    assert source.closed == 1  # close_nowait, and no aclose after it


async def test_a_source_that_cannot_close_at_once_is_closed_the_usual_way() -> None:
    class Slow(Held):
        def close_nowait(self) -> bool:
            return False

    source = Slow(10, b"a", None)
    await _outputs(Relay(source, Echo(), Tags(), opts()))
    assert source.closed == 1  # by aclose


async def test_a_bug_while_relaying_what_is_held_is_raised_on_exit_after_the_answer() -> None:
    """As from the producer: what was queued is delivered, then the error is raised
    when the relay is left (so a body's own exit still runs)."""

    async def broken(outcome: object) -> None:
        raise RuntimeError("a bug in a hook")

    for held in (10, 0):  # inline, and through the producer: the same
        source = Held(held, b"a", None)
        relay = Relay(source, Echo(), Tags(), opts(on_outcome=broken))
        got: list[bytes] = []
        with pytest.raises(RuntimeError, match="a bug in a hook"):
            async with relay as outputs:
                await relay.first_step()
                async for o in outputs:
                    got.append(o)
        assert b"".join(got) == b"S|E:a|E:held|END|", held
        assert source.closed == 1


# -- pull mode: a pull-safe source is read by the consumer, never by a producer task


class Pulled(Held):
    """A :class:`Held` whose reads are pull-safe (as the lean client's source)."""

    pull_safe = True


@pytest.mark.parametrize("seed", range(40))
async def test_a_pulled_stream_gives_the_outputs_of_the_producer(
    seed: int, autojump_clock: trio.testing.MockClock
) -> None:
    """Seeded scripts (items, waits, an error or the end) and any part of them held:
    read by the consumer, the stream's bytes are those of the producer, and no task is
    spawned for it."""
    steps, rnd = _seeded_script(seed)
    plain = b"".join(await _outputs(Relay(Script(*steps), Echo(), Tags(), opts())))
    spawns = Spawns()
    trio.lowlevel.add_instrument(spawns)
    try:
        for held in (0, 1, rnd.randrange(0, 50), 10**6):
            relay = Relay(Pulled(held, *steps), Echo(), Tags(), opts())
            got = b"".join(await _outputs(relay))
            assert got == plain, (held, steps)
            assert relay._nursery is None
    finally:
        trio.lowlevel.remove_instrument(spawns)
    assert not [n for n in spawns.names if "_produce" in n]


@pytest.mark.parametrize("seed", range(20))
async def test_pulled_keepalives_and_timeouts_come_at_the_producers_moments(
    seed: int, autojump_clock: trio.testing.MockClock
) -> None:
    """Long silences (keep-alives, the idle bound) in seeded scripts: every output at
    the same virtual moment as with a producer (those of one moment joined)."""
    rnd = random.Random(seed)
    steps: list[Any] = []
    for _ in range(rnd.randrange(1, 12)):  # waits that never end on a tick: no ties,
        # whose order trio leaves to chance (a ping then the data, or the data alone)
        steps.append(rnd.choice([b"x", b"y", 3.01, 14.03, 16.07, 31.11, 59.13]))
    steps.append(rnd.choice([None, b"DONE", 400.17, "block"]))
    o = opts(keepalive_seconds=15.0, idle_timeout_seconds=60.0, first_byte_seconds=50.0)

    async def timed(source: Script) -> list[tuple[float, bytes]]:
        out: list[tuple[float, bytes]] = []
        t0 = trio.current_time()
        async with Relay(source, Echo(), Tags(), o) as outputs:
            async for chunk in outputs:
                now = round(trio.current_time() - t0, 3)
                if out and out[-1][0] == now:
                    out[-1] = (now, out[-1][1] + chunk)
                else:
                    out.append((now, chunk))
        return out

    assert await timed(Pulled(10**6, *steps)) == await timed(Script(*steps))


async def test_a_pulled_read_is_cancelled_only_while_it_waits(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A stop while the consumer is busy elsewhere (writing) cancels nothing: the stream
    ends before its next read; a stop during the read ends that wait at once."""
    source = Pulled(10**6, b"a", 5, b"b", "block")
    relay = Relay(source, Echo(), Tags(), opts())
    got = []
    async with relay as outputs:
        async for chunk in outputs:
            got.append((trio.current_time(), chunk))
            if chunk == b"E:b|":
                relay.stop()  # not reading: nothing to cancel
                assert source.cancelled == 0
    assert got == [(0, b"S|E:a|"), (5, b"E:b|"), (5, b"E:held|CANCEL|")]
    assert source.cancelled == 0 and source.closed == 1

    source = Pulled(10**6, b"a", "block")
    relay = Relay(source, Echo(), Tags(), opts())
    t0 = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_stop_later, relay, 7.0)
        got2 = [(trio.current_time() - t0, chunk) async for chunk in _iterate(relay)]
    assert got2 == [(0, b"S|E:a|"), (7, b"E:held|CANCEL|")]
    assert source.cancelled == 1 and source.closed == 1


async def _stop_later(relay: Relay[Any, Any, Any], delay: float) -> None:
    await trio.sleep(delay)
    relay.stop()


async def _iterate(relay: Relay[Any, Any, Any]) -> Any:
    async with relay as outputs:
        async for chunk in outputs:
            yield chunk


async def test_a_pulled_stream_with_more_than_the_queue_holds_never_waits_on_itself() -> None:
    items = [b"%d" % i for i in range(5 * OUT_BUFFER)]
    got = await _outputs(Relay(Pulled(10**6, *items, None), Echo(), Tags(), opts()))
    assert b"".join(got) == b"S|" + b"".join(b"E:" + i + b"|" for i in items) + b"E:held|END|"
