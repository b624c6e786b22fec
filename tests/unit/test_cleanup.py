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
