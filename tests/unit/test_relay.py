"""The relay alone (:class:`gateway.stream.relay.Relay`), with in-memory parts and trio's
``MockClock`` (autojump: virtual time passes whenever every task waits).

A scripted source, an echo stage and a front that tags its outputs show what the relay
does on its own: keep-alives only after real silence, the idle and first-byte
timeouts, ``stop()`` cancelling a pending read, the consumer leaving (the source is
closed), outputs queued together joined, the ``check`` hook, ``on_outcome`` before the
terminal output is sent, and a terminal output on every way out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pytest
import trio
import trio.testing

from gateway.core.errors import Draining, GatewayError, RunLogFull, StoreError, UpstreamError
from gateway.stream.relay import CANCELLED, Relay, RelayOptions


@dataclass
class Step:
    events: list[bytes]
    done: bool = False
    error: GatewayError | None = None


class Script:
    """A source that follows a script: ``bytes`` (an item), a number (sleep that long
    first), ``None`` (the end), an exception (raised), ``"block"`` (wait forever).

    Its reads are pull-safe (a cancelled read loses nothing: the rest of its wait is
    put back); ``pull_safe`` says so to the relay only where a test (or the module's
    fixture) sets it, so every test here runs with a producer task and without."""

    pull_safe = False

    def __init__(self, *steps: Any) -> None:
        self.steps = list(steps)
        self.reads = 0
        self.cancelled = 0
        self.closed = 0
        self._wait = trio.CancelScope()

    async def read(self) -> bytes | None:
        self.reads += 1
        while True:
            step = self.steps.pop(0) if self.steps else "block"
            started = trio.current_time()
            with trio.CancelScope() as self._wait:  # interrupt() cancels this one
                try:
                    if step == "block":
                        await trio.sleep_forever()
                    if isinstance(step, int | float) and not isinstance(step, bool):
                        await trio.sleep(step)
                        continue
                except trio.Cancelled:
                    self.cancelled += 1
                    if step == "block":
                        self.steps.insert(0, step)
                    else:
                        self.steps.insert(0, max(0.0, step - (trio.current_time() - started)))
                    raise
            if self._wait.cancelled_caught:  # interrupted: nothing taken
                raise trio.WouldBlock
            if isinstance(step, BaseException):
                raise step
            assert step is None or isinstance(step, bytes)
            return step

    def interrupt(self) -> None:
        """Wake a waiting read (pull mode): it raises WouldBlock, its wait put back."""
        self._wait.cancel()

    async def aclose(self) -> None:
        self.closed += 1


@dataclass
class Echo:
    """Each item is one event; ``b"DONE"`` ends the stream; ``b"ERR"`` is an error step."""

    held_chars: int = 0
    finished: list[bool] = field(default_factory=list)
    fail_finish: GatewayError | None = None

    async def feed(self, item: bytes) -> Step:
        if item == b"ERR":
            return Step([b"before-error"], error=UpstreamError("boom", code="upstream_error"))
        return Step([item], done=item == b"DONE")

    async def finish(self, *, failed: bool = False) -> list[bytes]:
        self.finished.append(failed)
        if self.fail_finish is not None and not failed:
            raise self.fail_finish
        return [b"held"]

    def manifest(self) -> dict[str, Any]:
        return {"artifacts": []}


class Tags:
    """A front whose outputs say what they are."""

    def start(self) -> bytes:
        return b"S|"

    def keepalive(self) -> bytes:
        return b"K|"

    def encode(self, events: list[bytes]) -> bytes:
        return b"".join(b"E:" + e + b"|" for e in events)

    def end(self, events: list[bytes], manifest: dict[str, Any]) -> bytes:
        return self.encode(events) + b"END|"

    def fail(self, events: list[bytes], error: GatewayError, manifest: dict[str, Any]) -> bytes:
        return self.encode(events) + b"FAIL:" + error.code.encode() + b"|"

    def cancel(self, events: list[bytes], manifest: dict[str, Any]) -> bytes:
        return self.encode(events) + b"CANCEL|"


@pytest.fixture(autouse=True, params=["producer", "pull"])
def relay_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test twice: the source read by a producer task, and by the consumer."""
    if request.param == "pull":  # as the lean client's source: pull-safe, read_nowait
        monkeypatch.setattr(Script, "pull_safe", True)
        monkeypatch.setattr(Script, "read_nowait", _read_nowait, raising=False)
    return str(request.param)


def _read_nowait(self: Script) -> bytes | None:
    step = take_instant(self)
    self.reads += 1
    return step


def take_instant(script: Script) -> bytes | None:
    """The script's next step if it is there without a wait (an item, the end, an
    error: raised), else :class:`trio.WouldBlock`."""
    steps = script.steps
    if not steps or not (steps[0] is None or isinstance(steps[0], bytes | BaseException)):
        raise trio.WouldBlock
    step = steps.pop(0)
    if isinstance(step, BaseException):
        raise step
    assert step is None or isinstance(step, bytes)
    return step


def pulled(relay: Relay[Any, Any, Any]) -> bool:
    return relay._pull


def opts(**kw: Any) -> RelayOptions:
    return RelayOptions(**{"keepalive_seconds": 15.0, "idle_timeout_seconds": 300.0, **kw})


async def collect(relay: Relay[Any, Any, Any]) -> list[tuple[float, bytes]]:
    """Every output with the (virtual) time it was received. Read by the consumer
    (pull mode), what one read brought is one output: those of one moment are joined
    here, as the producer's queue joins what it queued before the consumer ran."""
    out: list[tuple[float, bytes]] = []
    t0 = trio.current_time()
    async with relay as outputs:
        async for o in outputs:
            now = round(trio.current_time() - t0, 3)
            if pulled(relay) and out and out[-1][0] == now:
                out[-1] = (now, out[-1][1] + o)
            else:
                out.append((now, o))
    return out


async def test_keepalive_only_after_real_silence(autojump_clock: trio.testing.MockClock) -> None:
    source = Script(b"a", 10, b"b", 10, b"c", 20, b"d", None)
    got = await collect(Relay(source, Echo(), Tags(), opts()))
    # data 10 s apart never gets a keep-alive; 20 s of silence gets one after 15 s
    assert got == [
        (0, b"S|E:a|"),
        (10, b"E:b|"),
        (20, b"E:c|"),
        (35, b"K|"),
        (40, b"E:d|E:held|END|"),
    ]
    assert source.closed == 1


async def test_keepalive_counts_from_the_last_data_not_from_the_last_tick(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = Script(b"a", 40, b"b", 14, b"c", None)
    got = await collect(Relay(source, Echo(), Tags(), opts()))
    assert [t for t, o in got if o == b"K|"] == [15, 30]  # none at 54: data came at 40


async def test_idle_timeout_ends_the_stream_and_cancels_the_read(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = Script(b"a", "block")
    relay = Relay(source, Echo(), Tags(), opts(idle_timeout_seconds=60))
    got = await collect(relay)
    assert got == [
        (0, b"S|E:a|"),
        (15, b"K|"),
        (30, b"K|"),
        (45, b"K|"),
        (60, b"E:held|FAIL:upstream_timeout|"),
    ]
    # read by the consumer, each keep-alive also ends a wait (the read goes on after it)
    assert source.cancelled == (4 if pulled(relay) else 1) and source.closed == 1


@pytest.mark.parametrize(
    ("first_byte", "keepalive", "expected"),
    [(20.0, 15.0, 20), (5.0, 15.0, 5), (45.0, 15.0, 45), (30.0, 7.0, 30)],
)
async def test_first_byte_timeout_is_kept_to_the_second(
    autojump_clock: trio.testing.MockClock, first_byte: float, keepalive: float, expected: float
) -> None:
    """Before the first item the first-byte bound applies, at its own time (not at the
    next keep-alive tick)."""
    source = Script("block")
    relay = Relay(
        source, Echo(), Tags(), opts(keepalive_seconds=keepalive, first_byte_seconds=first_byte)
    )
    got = await collect(relay)
    assert got[-1] == (expected, b"E:held|FAIL:upstream_timeout|")
    pings = [t for t, o in got if o == b"K|"]
    assert pings == [keepalive * k for k in range(1, math.ceil(expected / keepalive))]


async def test_after_the_first_item_the_idle_bound_applies(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = Script(10, b"a", 100, b"b", None)
    relay = Relay(source, Echo(), Tags(), opts(first_byte_seconds=20, idle_timeout_seconds=300))
    got = await collect(relay)
    assert got[-1] == (110, b"E:b|E:held|END|")


async def test_idle_timeout_between_keepalive_ticks(autojump_clock: trio.testing.MockClock) -> None:
    source = Script(b"a", "block")
    got = await collect(Relay(source, Echo(), Tags(), opts(idle_timeout_seconds=40)))
    assert got[-1] == (40, b"E:held|FAIL:upstream_timeout|")


@pytest.mark.parametrize(
    ("reason", "terminal"),
    [
        (Draining(), b"E:held|FAIL:gateway_draining|"),
        (CANCELLED, b"E:held|CANCEL|"),
        (RunLogFull(), b"E:held|FAIL:run_log_full|"),
    ],
)
async def test_stop_cancels_a_pending_read(
    autojump_clock: trio.testing.MockClock, reason: GatewayError | None, terminal: bytes
) -> None:
    source = Script(b"a", "block")
    stage = Echo()
    relay = Relay(source, stage, Tags(), opts())
    got = []
    async with relay as outputs:
        async for o in outputs:
            got.append((trio.current_time(), o))
            if o == b"S|E:a|":
                await trio.sleep(3)
                relay.stop(reason)
    assert got == [(0, b"S|E:a|"), (3, terminal)]
    # read by the consumer, nothing was read while it slept: no read to cancel
    assert source.reads == (1 if pulled(relay) else 2)
    assert source.cancelled == (0 if pulled(relay) else 1) and source.closed == 1
    assert stage.finished == [True]  # held text: file names only
    assert relay.outcome is reason


async def test_drain_ends_the_stream_with_gateway_draining(
    autojump_clock: trio.testing.MockClock,
) -> None:
    draining = trio.Event()
    source = Script(b"a", "block")
    relay = Relay(source, Echo(), Tags(), opts(draining=draining))
    got = []
    async with trio.open_nursery() as nursery:

        async def drain_later() -> None:
            await trio.sleep(7)
            draining.set()

        nursery.start_soon(drain_later)
        got = await collect(relay)
    assert got == [(0, b"S|E:a|"), (7, b"E:held|FAIL:gateway_draining|")]
    assert source.cancelled == 1 and source.closed == 1


async def test_the_consumer_leaving_closes_the_source(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = Script(b"a", "block")
    relay = Relay(source, Echo(), Tags(), opts())
    async with relay as outputs:
        async for o in outputs:
            assert o == b"S|E:a|"
            await trio.sleep(1)  # the producer is in its read now (not in pull mode)
            break
    assert source.cancelled == (0 if pulled(relay) else 1) and source.closed == 1
    assert relay.outcome is None  # nobody to write a terminal to


async def test_a_cancelled_consumer_closes_the_source(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = Script(b"a", "block")
    got = []
    relay = Relay(source, Echo(), Tags(), opts())
    with trio.move_on_after(20):
        async with relay as outputs:
            async for o in outputs:
                got.append(o)
    assert got == [b"S|E:a|", b"K|"]
    # read by the consumer, the keep-alive also ended a wait
    assert source.cancelled == (2 if pulled(relay) else 1) and source.closed == 1


async def test_outputs_queued_together_leave_in_one_write(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Items that are there without waiting are encoded and queued without a
    checkpoint; the consumer joins what is queued (and never waits for more)."""
    source = Script(b"a", b"b", b"c", b"DONE")
    got = await collect(Relay(source, Echo(), Tags(), opts()))
    assert got == [(0, b"S|E:a|E:b|E:c|E:DONE|E:held|END|")]


async def test_a_step_error_sends_its_events_first(autojump_clock: trio.testing.MockClock) -> None:
    source = Script(b"a", 1, b"ERR", b"never")
    got = await collect(Relay(source, Echo(), Tags(), opts()))
    assert got == [(0, b"S|E:a|"), (1, b"E:before-error|E:held|FAIL:upstream_error|")]
    assert source.reads == 2


async def test_an_error_from_the_source_ends_the_stream(
    autojump_clock: trio.testing.MockClock,
) -> None:
    err = UpstreamError("gone", code="upstream_disconnected")
    source = Script(b"a", 2, err)
    got = await collect(Relay(source, Echo(), Tags(), opts()))
    assert got == [(0, b"S|E:a|"), (2, b"E:held|FAIL:upstream_disconnected|")]
    assert source.closed == 1


async def test_the_check_hook_ends_the_stream_before_the_next_read(
    autojump_clock: trio.testing.MockClock,
) -> None:
    source = Script(b"a", 1, b"b", b"c", None)
    batches = [0]

    def check() -> GatewayError | None:
        batches[0] += 1
        return RunLogFull() if batches[0] == 2 else None

    got = await collect(Relay(source, Echo(), Tags(), opts(check=check)))
    assert got == [(0, b"S|E:a|"), (1, b"E:b|E:held|FAIL:run_log_full|")]
    assert source.reads == 2  # "c" is never read


@pytest.mark.parametrize(
    ("script", "outcome"),
    [
        ((b"a", 1, None), "completed"),
        ((b"a", 1, b"DONE"), "completed"),
        ((b"a", 1, UpstreamError("x", code="upstream_error")), "upstream_error"),
    ],
)
async def test_on_outcome_is_awaited_before_the_terminal_is_sent(
    autojump_clock: trio.testing.MockClock, script: tuple[Any, ...], outcome: str
) -> None:
    got: list[bytes] = []
    seen: list[tuple[str, list[bytes]]] = []

    async def on_outcome(value: object) -> None:
        name = value.code if isinstance(value, GatewayError) else str(value)
        seen.append((name, list(got)))
        await trio.sleep(5)  # a slow session write: the terminal waits for it

    relay = Relay(Script(*script), Echo(), Tags(), opts(on_outcome=on_outcome))
    async with relay as outputs:
        async for o in outputs:
            got.append(o)
            terminal = o.endswith((b"END|", b"upstream_error|"))
            assert (trio.current_time() == 6) == terminal
    assert seen == [(outcome, [b"S|E:a|"])]


async def test_on_outcome_after_a_stop(autojump_clock: trio.testing.MockClock) -> None:
    seen: list[object] = []

    async def on_outcome(value: object) -> None:
        seen.append(value)

    relay = Relay(Script("block"), Echo(), Tags(), opts(on_outcome=on_outcome))
    async with relay as outputs:
        async for _ in outputs:
            relay.stop(CANCELLED)
    assert seen == [CANCELLED]


async def test_a_failing_on_outcome_still_sends_the_terminal(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The answer is complete when the session write fails: the client still gets its end."""

    async def on_outcome(value: object) -> None:
        raise StoreError("The state store is unavailable.")

    got = await collect(Relay(Script(b"a", None), Echo(), Tags(), opts(on_outcome=on_outcome)))
    assert got[-1][1].endswith(b"END|")


async def test_a_failing_final_flush_ends_with_that_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The resolver failing while the held text is flushed (a store error at the end)
    still ends the stream with a terminal output, the error's."""
    stage = Echo(fail_finish=StoreError("The state store is unavailable."))
    got = await collect(Relay(Script(b"a", None), stage, Tags(), opts()))
    assert got[-1][1].endswith(b"E:a|FAIL:store_unavailable|")
    assert stage.finished == [False]


async def test_a_bug_in_the_stage_reaches_the_consumer_as_itself() -> None:
    class Broken(Echo):
        async def feed(self, item: bytes) -> Step:
            raise ValueError("a bug")

    source = Script(b"a", None)
    with pytest.raises(ValueError, match="a bug"):
        await collect(Relay(source, Broken(), Tags(), opts()))
    assert source.closed == 1


async def test_on_held_is_told_and_reset() -> None:
    seen: list[int] = []

    await collect(
        Relay(Script(b"a", b"b", None), Echo(held_chars=7), Tags(), opts(on_held=seen.append))
    )
    assert seen == [7, 7, 0]


async def test_the_silence_bound_fires_at_its_moment_despite_rounding(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # 0.7 + 0.1 - 0.7 < 0.1 in floating point: a bound checked as ``now - last >= limit``
    # at the moment ``last + limit`` was false there, and the timer asked for that same
    # moment again, for ever (a red-team pass read it off the code)
    assert 0.7 + 0.1 - 0.7 < 0.1
    assert trio.current_time() == 0.0  # the mock clock of a new run
    source = Script(0.7, b"a", "block")  # the item arrives at virtual 0.7
    relay = Relay(source, Echo(), Tags(), opts(idle_timeout_seconds=0.1, first_byte_seconds=9))
    got = await collect(relay)
    assert got == [(0, b"S|"), (0.7, b"E:a|"), (0.8, b"E:held|FAIL:upstream_timeout|")]
