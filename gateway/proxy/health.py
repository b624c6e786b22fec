"""The proxy's view of the gateway's health, for ``GET /health``.

``/health`` needs no key, so each call must not cost a call to the gateway: a client
pipelining health checks would otherwise make the proxy send the gateway one request
per check. The answer is kept for :data:`FRESH_SECONDS`; while one check is in flight,
every other caller waits for its answer (one request at a time, whatever the load).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import trio

__all__ = ["FRESH_SECONDS", "GatewayHealth"]

#: how long one answer of the gateway's ``/health`` is reported
FRESH_SECONDS = 1.0


class GatewayHealth:
    def __init__(
        self,
        client: httpx.AsyncClient,
        clock: Callable[[], float] = time.monotonic,
        timeout: float = 2.0,
    ) -> None:
        self._client = client
        self._clock = clock
        self._timeout = timeout
        self._answer: tuple[float, str] | None = None
        self._pending: trio.Event | None = None

    async def status(self) -> str:
        """``"ok"``, ``"http <status>"`` or ``"unreachable"``: at most
        :data:`FRESH_SECONDS` old."""
        while True:
            answer = self._answer
            if answer is not None and self._clock() - answer[0] < FRESH_SECONDS:
                return answer[1]
            if self._pending is None:
                return await self._check()
            await self._pending.wait()

    async def _check(self) -> str:
        done = self._pending = trio.Event()
        started = self._clock()
        try:
            r = await self._client.get("/health", timeout=self._timeout)
            status = "ok" if r.status_code == 200 else f"http {r.status_code}"
        except httpx.HTTPError:
            status = "unreachable"
        finally:
            self._pending = None
            done.set()
        self._answer = (started, status)
        return status
