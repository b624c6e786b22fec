"""The proxy's ``/health`` asks the gateway at most once per second, one check at a time."""

from __future__ import annotations

import httpx
import pytest
import trio

from gateway.proxy.health import FRESH_SECONDS, GatewayHealth


class Gateway:
    """The gateway's ``/health`` behind httpx's mock transport: counts, stalls, fails."""

    def __init__(self) -> None:
        self.calls = 0
        self.status = 200
        self.stall = 0.05
        self.down = False

    async def handle(self, request: httpx.Request) -> httpx.Response:
        self.calls += 1
        await trio.sleep(self.stall)
        if self.down:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(self.status, json={"status": "ok"})


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def health(gw: Gateway, clock: Clock) -> GatewayHealth:
    client = httpx.AsyncClient(transport=httpx.MockTransport(gw.handle), base_url="http://gw")
    return GatewayHealth(client, clock=clock)


async def test_concurrent_callers_share_one_check() -> None:
    gw, clock = Gateway(), Clock()
    h = health(gw, clock)
    answers: list[str] = []

    async def ask() -> None:
        answers.append(await h.status())

    async with trio.open_nursery() as nursery:
        for _ in range(50):
            nursery.start_soon(ask)
    assert answers == ["ok"] * 50 and gw.calls == 1
    for _ in range(20):
        assert await h.status() == "ok"
    assert gw.calls == 1


@pytest.mark.parametrize(
    ("status", "down", "expected"),
    [(200, False, "ok"), (503, False, "http 503"), (200, True, "unreachable")],
)
async def test_answers_age_out(status: int, down: bool, expected: str) -> None:
    gw, clock = Gateway(), Clock()
    h = health(gw, clock)
    assert await h.status() == "ok"
    gw.status, gw.down = status, down
    clock.now += FRESH_SECONDS / 2
    assert await h.status() == "ok" and gw.calls == 1
    clock.now += FRESH_SECONDS
    assert await h.status() == expected and gw.calls == 2


async def test_a_cancelled_check_hands_over_to_a_waiter() -> None:
    gw, clock = Gateway(), Clock()
    gw.stall = 0.2
    h = health(gw, clock)
    got: list[str] = []
    first = trio.CancelScope()

    async def check_then_leave() -> None:
        with first:
            await h.status()

    async def wait_for_answer() -> None:
        got.append(await h.status())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(check_then_leave)
        await trio.sleep(0.05)  # the first caller's check is in flight
        nursery.start_soon(wait_for_answer)
        await trio.sleep(0.05)  # the waiter waits for it
        first.cancel()  # its client went away: the waiter checks in its place
    assert first.cancelled_caught
    assert got == ["ok"] and gw.calls == 2
