"""Giving freed heap back to the operating system once the process is idle.

CPython frees most of what start-up and a burst of requests allocate, but glibc's
``malloc`` keeps freed pages inside its heap (only the top of the heap shrinks by
itself). ``malloc_trim(0)`` returns every whole free page: measured here, 3.2 MiB of
the 55.8 MiB a process holds after importing the gateway's modules, and the heap a
burst of requests grew. Elsewhere (macOS, musl's stub) this is a no-op.

:func:`release_when_idle` trims once after start-up and then once after each busy
spell, when no request has been in flight for a second: never while requests run, at
most once a second, ~1 ms each time.

At the first of those moments it also freezes what start-up left (:func:`freeze_start_up`):
the garbage collector's full collections walked every object the process holds, about
64,000 after start-up (modules, compiled patterns, configuration), for 34 ms each;
frozen, they are no longer walked (1.2 ms). Freezing never frees or keeps anything the
collector would have freed: it runs right after a full collection.
"""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Callable, Sequence
from typing import Any

import trio

__all__ = ["freeze_start_up", "release_free_memory", "release_when_idle"]

#: how long the process must have been without a request before it trims
SETTLE_SECONDS = 1.0


def _load_trim() -> Callable[[int], int] | None:
    """The C library's ``malloc_trim`` among the process's symbols (``dlopen(NULL)``:
    no library search, which would run ``ldconfig``), or None."""
    try:
        trim: Any = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


_TRIM = _load_trim()


def release_free_memory() -> bool:
    """``malloc_trim(0)`` where the C library has it; whether anything was returned."""
    return bool(_TRIM(0)) if _TRIM is not None else False


def _activity(apps: Sequence[Any]) -> tuple[int, int]:
    """(requests started, requests in flight) over ``apps``."""
    started = sum(int(getattr(app, "requests_started", 0)) for app in apps)
    inflight = sum(int(getattr(app, "inflight_requests", 0)) for app in apps)
    return started, inflight


def freeze_start_up() -> None:
    """A full collection, then every object still alive moves to the collector's
    permanent generation (``gc.freeze``): later collections no longer walk them."""
    gc.collect()
    gc.freeze()


async def release_when_idle(apps: Sequence[Any], settle: float = SETTLE_SECONDS) -> None:
    """Trim once ``apps`` have had no request in flight for ``settle`` seconds, first
    after start-up (freezing what start-up left), then after every busy spell (runs
    until cancelled; without ``malloc_trim`` it returns after the freeze)."""
    trimmed_at = -1  # the first idle spell after start-up trims too
    while True:
        await trio.sleep(settle)
        started, inflight = _activity(apps)
        if started == trimmed_at or inflight:
            continue
        await trio.sleep(settle)  # idle for a whole ``settle``, not just at this instant
        if _activity(apps) == (started, 0):
            if trimmed_at < 0:
                freeze_start_up()
            if _TRIM is None:
                return
            release_free_memory()
            trimmed_at = started
