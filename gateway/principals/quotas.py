"""Per-principal quotas (``[quotas]``): no principal can use up a shared gateway.

Every quota is counted per principal (the owner a request acts for: a key's principal,
or the Open WebUI user a proxy key asserts), in the state store, so instances sharing
PostgreSQL enforce one limit together and a refusal never touches another principal:

* **background runs** (``POST /v1/runs``, background Responses, the proxy's runs):
  ``max_running_runs`` run at once, ``max_queued_runs`` more wait (first come, first
  served; :class:`gateway.runs.manager.Runs`); beyond both, 429 ``run_quota_exceeded``;
* **stored bytes** (stored responses, sessions, run journals): a request that would
  store more while the principal is at ``max_stored_bytes`` gets 429
  ``storage_quota_exceeded``. Admitting one reserves its input's bytes until it ends,
  so requests admitted at once (on one instance) count each other: one request's own
  size is all a principal can end above the limit by (per instance);
* **links minted per minute** (``links_per_minute``, fixed one-minute windows): a path
  over the quota becomes its file name, like any path that gets no link
  (:meth:`Quotas.take_links`, called where links are minted); an owner's ``POST
  /v1/artifacts/{id}/share`` over it gets 429 ``link_quota_exceeded``;
* **self-tests per hour** (``selftests_per_hour``, fixed one-hour windows; each writes a
  file under the first artifact root): 429 ``selftest_quota_exceeded``.

Every refusal is :class:`~gateway.core.errors.QuotaExceeded`: one sentence and a
``Retry-After`` (the window's end; for stored bytes, when the next of the principal's
documents or run journals expires; for runs, a few seconds).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import trio

from gateway.core.errors import QuotaExceeded
from gateway.ops.config import Config
from gateway.store import Store, StoredUsage

__all__ = ["RUN_RETRY_AFTER", "Quotas", "run_quota_exceeded"]

MiB = 1024 * 1024
#: ``Retry-After`` of a refused run: runs end at no known time; look again soon
RUN_RETRY_AFTER = 5
LINKS, SELFTESTS = "links", "selftests"


def run_quota_exceeded(max_running: int, max_queued: int) -> QuotaExceeded:
    return QuotaExceeded(
        f"You already have {max_running + max_queued} background runs or responses running "
        "or waiting, the most this gateway takes per user; wait for one to end (or stop "
        "one) and try again.",
        code="run_quota_exceeded",
        retry_after=RUN_RETRY_AFTER,
    )


class Quotas:
    """The ``[quotas]`` of one gateway, counted in its store."""

    def __init__(self, store: Store, config: Config, *, clock: Callable[[], float] = time.time):
        self.store = store
        self.limits = config.quotas
        self._runs_seconds = config.retention.runs_seconds
        self._reaper_seconds = config.retention.reaper_interval_seconds
        self._clock = clock
        #: bytes admitted requests of each owner will store, until they end (this process)
        self._pending: dict[str, int] = {}

    def _release(self, owner: str, size: int) -> None:
        left = self._pending.get(owner, 0) - size
        if left > 0:
            self._pending[owner] = left
        else:
            self._pending.pop(owner, None)

    # -- links (blocking: called from the minting worker thread) ------------------------

    def take_links(self, owner: str, n: int) -> int:
        """How many of ``n`` new links ``owner`` may mint now (the rest become names)."""
        if n <= 0:
            return 0
        got = self.store.take_quota(
            owner, LINKS, self.limits.links_per_minute, 60, n, now=self._clock()
        )
        return got.granted

    async def take_link_or_refuse(self, owner: str) -> None:
        """One link for a request that exists only to make it (the share route)."""
        got = await trio.to_thread.run_sync(
            lambda: self.store.take_quota(
                owner, LINKS, self.limits.links_per_minute, 60, 1, now=self._clock()
            )
        )
        if not got.granted:
            raise QuotaExceeded(
                f"You made {self.limits.links_per_minute} links in the last minute, the most "
                "this gateway allows per user; try again when the minute is over.",
                code="link_quota_exceeded",
                retry_after=got.resets_at - self._clock(),
            )

    # -- self-tests ------------------------------------------------------------------------

    async def take_selftest(self, owner: str) -> None:
        limit = self.limits.selftests_per_hour
        got = await trio.to_thread.run_sync(
            lambda: self.store.take_quota(owner, SELFTESTS, limit, 3600, 1, now=self._clock())
        )
        if not got.granted:
            raise QuotaExceeded(
                f"You ran {limit} self-tests this hour, the most this gateway allows per "
                "user; try again when the hour is over.",
                code="selftest_quota_exceeded",
                retry_after=got.resets_at - self._clock(),
            )

    # -- stored bytes -----------------------------------------------------------------------

    async def check_storage(self, owner: str, size: int = 1, cleanup: Any = None) -> None:
        """Admit a request that will store about ``size`` bytes (its input) for
        ``owner`` while what it stores and what the requests admitted before it (still
        running here) will store stays below the limit; refuse it otherwise. The bytes
        stay reserved until ``cleanup`` (the request's) runs its callbacks."""
        now = self._clock()
        usage = await trio.to_thread.run_sync(self.store.stored_usage, owner, now)
        limit = self.limits.max_stored_bytes
        if usage.bytes + self._pending.get(owner, 0) < limit:
            if cleanup is not None:
                want = max(1, size)
                self._pending[owner] = self._pending.get(owner, 0) + want
                cleanup.callback(self._release, owner, want)
            return
        raise QuotaExceeded(
            f"You store {usage.bytes / MiB:.1f} MiB of responses, sessions and run journals, "
            f"the most this gateway keeps per user ({limit / MiB:g} MiB); delete some "
            "(DELETE /v1/responses/{id} or /v1/sessions/{id}) or wait until older ones expire.",
            code="storage_quota_exceeded",
            retry_after=self._storage_retry(usage, now),
        )

    def _storage_retry(self, usage: StoredUsage, now: float) -> float:
        """When the reaper can next free something of this owner's (at least one reaper
        round, at most a day; an hour when nothing of theirs expires: only deleting helps)."""
        ends = [usage.next_expiry] if usage.next_expiry is not None else []
        if usage.oldest_finished is not None:
            ends.append(usage.oldest_finished + self._runs_seconds)
        if not ends:
            return 3600.0
        wait = min(ends) - now + self._reaper_seconds
        return min(max(wait, self._reaper_seconds), 86400.0)
