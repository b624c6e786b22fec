"""``gateway health URL``: poll a health endpoint until it answers 2xx, count the tries.

Used after a restart (runbook: wait for health, then doctor, then smoke) and by the
harness's health-recovery scenario. One try = one GET with its own timeout; tries are
``interval`` seconds apart (start to start), so "healthy on try 4" means "about 3 s
after the poller started". An answer no later try can change (a 4xx other than 408 and
429: a server is up, but this URL is not its health endpoint, or needs a key) ends the
polling at once, with a hint when the path is not the gateway's ``/health``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

__all__ = ["HealthResult", "poll_health"]


@dataclass(frozen=True)
class HealthResult:
    healthy: bool
    tries: int  # the try that succeeded, or the number made
    elapsed: float
    status: int | None  # HTTP status of the last answer, None if there was none
    detail: str  # body excerpt or the error of the last try

    def summary(self, url: str, max_tries: int) -> str:
        if self.healthy:
            return (
                f"healthy on try {self.tries} of {max_tries} after {self.elapsed:.1f} s: "
                f"{url} -> HTTP {self.status} {self.detail}"
            )
        return (
            f"not healthy after {self.tries} tries over {self.elapsed:.1f} s: {url} -> "
            f"{self.detail}"
        )


def _describe(exc: httpx.HTTPError) -> str:
    if isinstance(exc, httpx.ConnectError):
        return "connection refused or host unreachable"
    if isinstance(exc, httpx.TimeoutException):
        return f"timed out ({type(exc).__name__})"
    return f"{type(exc).__name__}: {exc}"


#: statuses after which trying again can give another answer (besides 5xx)
_TRANSIENT = frozenset({408, 425, 429})
_HEALTH_PATHS = ("/health", "/health/ready")


def _final(url: str, status: int) -> str | None:
    """Why polling ``url`` again is pointless after ``status`` (None: it is not)."""
    if not 400 <= status < 500 or status in _TRANSIENT:
        return None
    path = httpx.URL(url).path.rstrip("/") or "/"
    if path not in _HEALTH_PATHS:
        return f"a server answered, but {path} is not a health endpoint: try /health"
    return "a server answered: polling again would not change it"


def poll_health(
    url: str,
    *,
    tries: int = 1,
    interval: float = 1.0,
    timeout: float = 2.0,
    on_try: Callable[[int, str], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    transport: httpx.BaseTransport | None = None,
) -> HealthResult:
    """GET ``url`` up to ``tries`` times, ``interval`` s apart, until it answers 2xx.

    ``on_try(n, outcome)`` is told about every failed try (for progress output).
    """
    t0 = time.monotonic()
    status: int | None = None
    detail = "no try made"
    with httpx.Client(timeout=timeout, transport=transport, follow_redirects=False) as client:
        for n in range(1, max(tries, 1) + 1):
            started = time.monotonic()
            try:
                resp = client.get(url, headers={"Cache-Control": "no-cache"})
                status = resp.status_code
                detail = resp.text.strip().replace("\n", " ")[:200]
                if 200 <= status < 300:
                    return HealthResult(True, n, time.monotonic() - t0, status, detail)
                detail = f"HTTP {status} {detail}"
                why = _final(url, status)
                if why is not None:
                    return HealthResult(
                        False, n, time.monotonic() - t0, status, f"{detail} ({why})"
                    )
            except httpx.HTTPError as exc:
                status = None
                detail = _describe(exc)
            if on_try is not None:
                on_try(n, detail)
            if n < tries:
                sleep(max(0.0, interval - (time.monotonic() - started)))
    return HealthResult(False, max(tries, 1), time.monotonic() - t0, status, detail)
