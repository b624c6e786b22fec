"""Background upkeep of the shared state: run leases, retention, the signer's key cache.

Leases
------
The instance running a run holds its lease: ``runs.holder`` = this instance's
:func:`new_holder_id`, ``runs.lease_expires`` = now + ``runs.lease_seconds`` (15 s).
:func:`keep_lease` renews it every ``lease_seconds / 3`` while the run goes on, so a
live holder is always at least 2/3 of a lease ahead. Every instance runs
:func:`lease_watcher`, which every ``interval`` (default ``lease_seconds / 3``) calls
:meth:`~gateway.store.Store.interrupt_expired_runs`: an unfinished run whose lease
expired gets exactly one terminal ``run.failed`` (``run_interrupted``) event and
status ``interrupted``, and its followers are woken (:class:`~gateway.runs.bus.RunBus`).

**Bound**: an instance SIGKILLed mid-run stops renewing; its runs end ``interrupted``
within ``lease_seconds + interval`` (15 + 5 = 20 s by default) of its last renewal,
as long as any instance is up (the first sweep runs when an instance starts, so a lone
instance that crashed interrupts its own old runs when it comes back). Leases compare
instance wall clocks: keep them in sync (NTP) to well under ``lease_seconds``.
An instance that drains (SIGTERM) ends its own runs itself, at once, with
``finish_run`` -- it does not wait for the lease.

Retention
---------
:func:`retention_reaper` deletes, every ``retention.reaper_interval_seconds`` (60),
run journals finished more than ``retention.runs_seconds`` (1 day) ago and expired
documents (stored responses are written with ``expires = now +
retention.responses_seconds``, 30 days). One instance at a time does it: the sweep
runs under ``try_advisory_lock("reaper")`` (a PostgreSQL advisory lock; SQLite has one
instance) and the others skip that round.

Config keys (read with defaults until ``gateway.ops.config`` has them): ``[runs]
lease_seconds = 15``, ``[retention] runs_seconds = 86400, responses_seconds =
2592000, reaper_interval_seconds = 60``.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import trio

from gateway.links.signing import ACTIVE_KEY_MAX_AGE, Signer
from gateway.ops.config import Config
from gateway.runs.bus import RunBus
from gateway.store import RunRecord, Store, StoreError

__all__ = [
    "MaintenanceSettings",
    "ReapResult",
    "keep_lease",
    "lease_watcher",
    "new_holder_id",
    "reap_once",
    "retention_reaper",
    "run_maintenance",
    "signer_refresher",
]

log = logging.getLogger("gateway.reaper")


def new_holder_id() -> str:
    """This instance's lease-holder id: host, pid and a random part (unique per start)."""
    host = socket.gethostname().split(".")[0][:40] or "host"
    return f"{host}:{os.getpid()}:{secrets.token_hex(4)}"


@dataclass(frozen=True, slots=True)
class MaintenanceSettings:
    lease_seconds: float = 15.0
    runs_seconds: float = 86400.0
    responses_seconds: float = 2592000.0
    reaper_interval_seconds: float = 60.0

    @property
    def lease_interval(self) -> float:
        """How often the lease watcher sweeps and :func:`keep_lease` renews."""
        return self.lease_seconds / 3

    @property
    def interruption_bound(self) -> float:
        """Longest time from a holder's last renewal to its runs' ``interrupted``."""
        return self.lease_seconds + self.lease_interval

    @classmethod
    def from_config(cls, config: Config) -> MaintenanceSettings:
        return cls(
            lease_seconds=config.runs.lease_seconds,
            runs_seconds=config.retention.runs_seconds,
            responses_seconds=config.retention.responses_seconds,
            reaper_interval_seconds=config.retention.reaper_interval_seconds,
        )


#: ``(runs)``: follow runs this instance adopted (their upstream runs them on)
Adopt = Callable[[list[RunRecord]], None]


async def lease_watcher(
    store: Store,
    bus: RunBus | None,
    *,
    interval: float,
    clock: Callable[[], float] = time.time,
    adopt: tuple[str, float, Adopt] | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Interrupt runs whose lease expired, every ``interval`` s (first sweep at once).
    ``adopt`` = ``(holder, lease_seconds, follow)``: runs the upstream runs on (the
    agent's own runs) are adopted instead and handed to ``follow``."""
    task_status.started()
    while True:
        if adopt is not None:
            holder, lease, follow = adopt
            try:
                now = clock()
                taken = await trio.to_thread.run_sync(
                    store.adopt_expired_runs, now, holder, now + lease
                )
            except StoreError as exc:
                log.warning("lease watcher: %s", exc.message)
            else:
                if taken:
                    log.warning(
                        "adopted %d run(s) whose instance stopped: following them upstream",
                        len(taken),
                    )
                    follow(taken)
        try:
            ended = await trio.to_thread.run_sync(store.interrupt_expired_runs, clock())
        except StoreError as exc:
            log.warning("lease watcher: %s; trying again in %.0f s", exc.message, interval)
        else:
            for run in ended:
                log.warning(
                    "run %s interrupted: the instance holding it stopped renewing its lease",
                    run.run_id,
                )
                if bus is not None:
                    bus.published(run.run_id, run.seq)
        await trio.sleep(interval)


class ReapResult(NamedTuple):
    runs: int
    documents: int


def reap_once(store: Store, now: float, runs_seconds: float) -> ReapResult | None:
    """One retention sweep (blocking); None if another instance holds the reaper lock."""
    with store.try_advisory_lock("reaper") as mine:
        if not mine:
            return None
        return ReapResult(store.purge_runs(now - runs_seconds), store.purge_expired(now))


async def retention_reaper(
    store: Store,
    *,
    runs_seconds: float,
    interval: float,
    clock: Callable[[], float] = time.time,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """:func:`reap_once` every ``interval`` s (the first after one interval)."""
    task_status.started()
    while True:
        await trio.sleep(interval)
        try:
            result = await trio.to_thread.run_sync(reap_once, store, clock(), runs_seconds)
        except StoreError as exc:
            log.warning("retention reaper: %s; trying again next round", exc.message)
            continue
        if result is not None and (result.runs or result.documents):
            log.info(
                "retention: deleted %d finished run journals and %d expired documents",
                result.runs,
                result.documents,
            )


async def signer_refresher(
    signer: Signer,
    *,
    interval: float = ACTIVE_KEY_MAX_AGE,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Re-read the active signing key every ``interval`` s (links signed outside minting
    -- listings, manifests -- use a key at most that old after a rotation)."""
    task_status.started()
    while True:
        await trio.sleep(interval)
        try:
            await trio.to_thread.run_sync(lambda: signer.refresh(force=True))
        except StoreError as exc:
            log.warning("signing keys: %s; keeping the cached active key", exc.message)


async def keep_lease(
    store: Store,
    run_id: str,
    holder: str,
    *,
    lease_seconds: float,
    on_lost: Callable[[], None],
    on_stop: Callable[[], None] | None = None,
    clock: Callable[[], float] = time.time,
) -> None:
    """Renew the run's lease every ``lease_seconds / 3`` until cancelled (run it beside
    the run, cancel it when the run is finished). If the lease is lost (another
    instance interrupted the run) or cannot be renewed before it expires (database
    unreachable), call ``on_lost()`` once -- e.g. cancel the run's scope, send nothing
    more -- and return. With ``on_stop``, each renewal also checks whether a stop was
    requested on some instance (the safety net under :meth:`RunBus.wait_stop`) and calls
    it once; renewing goes on, so the run can still journal its ``run.cancelled``.
    """
    expires = clock() + lease_seconds
    while True:
        await trio.sleep(lease_seconds / 3)
        until = clock() + lease_seconds
        try:
            held = await trio.to_thread.run_sync(store.renew_run_lease, run_id, holder, until)
        except StoreError as exc:
            if clock() < expires:
                log.warning("run %s: cannot renew its lease yet (%s)", run_id, exc.message)
                continue
            held = False
        if not held:
            log.warning("run %s: lease lost; stopping it here", run_id)
            on_lost()
            return
        expires = until
        if on_stop is not None:
            try:
                stop = await trio.to_thread.run_sync(store.run_stop_requested, run_id)
            except StoreError:
                continue
            if stop:
                on_stop()
                on_stop = None


async def run_maintenance(
    store: Store,
    bus: RunBus | None,
    signer: Signer | None,
    settings: MaintenanceSettings,
    *,
    adopt: tuple[str, Adopt] | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Everything above in one task for the app's service nursery (until cancelled);
    ``adopt`` = ``(holder, follow)``: see :func:`lease_watcher`."""
    adopting = (adopt[0], settings.lease_seconds, adopt[1]) if adopt is not None else None
    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: lease_watcher(
                store,
                bus,
                interval=settings.lease_interval,
                adopt=adopting,
                task_status=task_status,
            )
        )
        await nursery.start(
            lambda task_status: retention_reaper(
                store,
                runs_seconds=settings.runs_seconds,
                interval=settings.reaper_interval_seconds,
                task_status=task_status,
            )
        )
        if signer is not None and signer.store_backed:
            await nursery.start(
                lambda task_status: signer_refresher(signer, task_status=task_status)
            )
        task_status.started()
