"""gateway.ops.memory: freed heap goes back to the OS once the process is idle, never
while requests run (virtual time: trio's autojump clock)."""

from __future__ import annotations

import contextlib
import gc
import subprocess
import sys
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio
import trio.testing

from gateway.ops import memory

REAL_FREEZE = memory.freeze_start_up


@dataclass
class FakeApp:
    requests_started: int = 0
    inflight_requests: int = 0


@pytest.fixture
def trims(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    calls: list[float] = []

    def fake(pad: int) -> int:
        assert pad == 0
        calls.append(trio.current_time())
        return 1

    monkeypatch.setattr(memory, "_TRIM", fake)
    return calls


@pytest.fixture(autouse=True)
def freezes(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The freeze after start-up, recorded instead of done (this is pytest's process)."""
    calls: list[float] = []
    monkeypatch.setattr(memory, "freeze_start_up", lambda: calls.append(trio.current_time()))
    return calls


@contextlib.asynccontextmanager
async def trimming(app: FakeApp) -> AsyncIterator[None]:
    """``release_when_idle`` watching ``app`` for the block's duration."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(memory.release_when_idle, [app])
        yield
        nursery.cancel_scope.cancel()


async def test_trims_after_start_up_then_after_each_busy_spell(
    autojump_clock: trio.testing.MockClock, trims: list[float]
) -> None:
    app = FakeApp()
    async with trimming(app):
        await trio.sleep(10)
        assert len(trims) == 1  # after start-up, once, however long it stays idle
        app.requests_started += 1
        app.inflight_requests += 1
        await trio.sleep(30)
        assert len(trims) == 1  # never while a request is in flight
        app.inflight_requests -= 1
        t_idle = trio.current_time()
        await trio.sleep(10)
        assert len(trims) == 2
        assert trims[1] - t_idle >= memory.SETTLE_SECONDS


async def test_a_request_during_the_settle_time_postpones_the_trim(
    autojump_clock: trio.testing.MockClock, trims: list[float]
) -> None:
    app = FakeApp()
    async with trimming(app):
        await trio.sleep(0.5)
        for _ in range(20):  # a request every 0.6 s: never a whole idle second
            app.requests_started += 1
            await trio.sleep(0.6)
        assert trims == []
        await trio.sleep(5)
        assert len(trims) == 1


async def test_start_up_is_frozen_once_at_the_first_trim(
    autojump_clock: trio.testing.MockClock, trims: list[float], freezes: list[float]
) -> None:
    app = FakeApp()
    async with trimming(app):
        await trio.sleep(10)
        app.requests_started += 1
        await trio.sleep(10)
    assert len(trims) == 2 and freezes == trims[:1]  # before the first trim, not again


async def test_without_malloc_trim_it_freezes_then_returns(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch, freezes: list[float]
) -> None:
    monkeypatch.setattr(memory, "_TRIM", None)
    with trio.fail_after(10):
        await memory.release_when_idle([FakeApp()])
    assert len(freezes) == 1
    assert memory.release_free_memory() is False


def test_freeze_start_up_freezes_and_later_cycles_are_still_collected() -> None:
    class Node:
        other: Node

    try:
        REAL_FREEZE()
        assert gc.get_freeze_count() > 0
        a, b = Node(), Node()
        a.other, b.other = b, a
        ref = weakref.ref(a)
        del a, b
        gc.collect()
        assert ref() is None  # a cycle made after the freeze is still collected
    finally:
        gc.unfreeze()  # pytest's process: back as it was


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_the_real_trim_runs_here() -> None:
    assert memory._TRIM is not None
    junk = [bytearray(100_000) for _ in range(200)]  # 20 MB through malloc
    del junk
    memory.release_free_memory()  # does not crash; returns whether pages went back


def test_the_detector_built_first_is_the_one_the_app_takes(tmp_path: Path) -> None:
    """``gateway run`` builds the path detector before the app's modules load (its
    regexes' short-lived objects then no longer pin allocator arenas the imports would
    otherwise fill); the app must take that detector, not build a second one."""
    from gateway.api.app import create_app
    from gateway.cli.serve import _detector_first
    from gateway.core.paths import PathDetector
    from gateway.ops.config import extra_roots
    from tests.conftest import make_config

    cfg = make_config(tmp_path, "http://127.0.0.1:9/v1")
    _detector_first(cfg)
    first = PathDetector.shared(extra_roots(cfg), cfg.limits.max_path_chars)
    app = create_app(cfg)
    try:
        assert app.gateway.settings.detector is first
        assert app.gateway.scrub("/srv/x/report.pdf") == "report.pdf"
    finally:
        app.gateway.store.close()


def test_the_detector_is_built_before_the_app_modules_load(tmp_path: Path) -> None:
    """What makes the ordering pay: building the detector imports none of the big
    modules (quart, hypercorn, httpx). A fresh interpreter, as ``gateway run`` has."""
    code = (
        "import sys\n"
        "from gateway.cli.serve import _detector_first\n"
        "from gateway.ops.config import config_from_dict\n"
        f"cfg = config_from_dict({{'state_dir': {str(tmp_path)!r}}})\n"
        "_detector_first(cfg)\n"
        "print(sorted(m for m in ('quart', 'hypercorn', 'httpx', 'gateway.api.app')"
        " if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]", out.stderr
