"""A request's cleanups (:class:`gateway.web.Cleanup`): last in, first out; every one
runs even when an earlier one fails; the first failure is raised after the last."""

from __future__ import annotations

import pytest

from gateway.web import Cleanup


async def test_cleanups_run_last_in_first_out_and_all_of_them() -> None:
    ran: list[str] = []
    stack = Cleanup()

    async def closing(name: str) -> None:
        ran.append(name)
        if name == "b":
            raise OSError("b failed")

    def failing(name: str) -> None:
        ran.append(name)
        raise ValueError(f"{name} failed")

    stack.callback(ran.append, "a")
    stack.push_async_callback(closing, "b")
    stack.callback(failing, "c")
    stack.push_async_callback(closing, "d")
    with pytest.raises(ValueError, match="c failed"):  # the first to fail, in run order
        await stack.aclose()
    assert ran == ["d", "c", "b", "a"]
    await stack.aclose()  # closed once: a second close runs nothing
    assert ran == ["d", "c", "b", "a"]


async def test_close_nowait_runs_the_sync_ones_when_every_async_one_is_done() -> None:
    ran: list[str] = []
    state = {"closed": True}
    stack = Cleanup()

    async def closing(name: str) -> None:  # pragma: no cover - skipped: done already
        ran.append(name)

    stack.callback(ran.append, "a")
    stack.push_async_callback(closing, "b", done=lambda: state["closed"])
    stack.callback(ran.append, "c")
    assert stack.close_nowait() is True
    assert ran == ["c", "a"] and not stack  # last in, first out; nothing left


async def test_close_nowait_does_nothing_while_an_async_one_has_work_left() -> None:
    ran: list[str] = []
    stack = Cleanup()

    async def closing(name: str) -> None:
        ran.append(name)

    stack.callback(ran.append, "a")
    stack.push_async_callback(closing, "b", done=lambda: False)
    stack.push_async_callback(closing, "c")  # no done: always awaited
    assert stack.close_nowait() is False
    assert ran == [] and stack
    await stack.aclose()
    assert ran == ["c", "b", "a"]


async def test_close_nowait_runs_every_sync_one_and_raises_the_first_failure() -> None:
    ran: list[str] = []
    stack = Cleanup()

    def failing(name: str) -> None:
        ran.append(name)
        raise ValueError(f"{name} failed")

    stack.callback(failing, "a")
    stack.callback(failing, "b")
    with pytest.raises(ValueError, match="b failed"):
        stack.close_nowait()
    assert ran == ["b", "a"] and not stack
