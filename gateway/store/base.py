"""The state store's interface: the :class:`Store` protocol, its records and errors.

Everything that several gateway instances must share lives behind this one protocol:
the artifact registry (and its revocations), small JSON documents (sessions, stored
responses), the signing keys and principal salt, and the run journal. Two backends
implement it, SQLite (:mod:`gateway.store.sqlite`, embedded, one instance) and
PostgreSQL (:mod:`gateway.store.postgres`, shared); the contract tests run against
both.

Contract
--------
* **Blocking and thread-safe.** Every method blocks; the trio layer calls them through
  ``trio.to_thread.run_sync``. Any backend failure (disk, lock, network, server down)
  raises :class:`StoreError` (code ``store_unavailable``, status 503) whose message
  names no path, host password or SQL. Programming errors (a bad argument) raise
  ``ValueError``/``TypeError``. Nothing is cached between calls: what one instance
  wrote is what the next call on any instance reads (a revoke on B is refused by A at
  once; a retired key stops verifying at once).
* **Owner scoping.** Everything a principal owns is read with its owner;
  another owner's object reads as absent. The only exception is
  :meth:`Store.get_artifact` (the download route checks the owner or the signature
  itself) and the run journal's event reads (after :meth:`Store.get_run`).
* **Artifacts** are never purged: an expired or revoked link must still answer 410.
  ``path`` is a resolved host path and never leaves the gateway. ``ctime_ns`` is None
  on records minted before it was recorded (they compare the old way).
* **Documents** ``(kind, owner, key) -> dict``; an absolute ``expires`` (unix
  seconds): once ``expires <= now`` it reads as absent and :meth:`Store.purge_expired`
  deletes it. :meth:`Store.update_json` is an atomic read-modify-write (one
  transaction holding the row, across instances).
* **Signing keys** (``kid`` -> secret, one active) and the never-rotated principal
  salt. :meth:`Store.init_signing` seeds them once (the first caller wins);
  :meth:`Store.add_signing_key` rotates (the new key becomes the only active one);
  :meth:`Store.retire_signing_key` deletes a key, refusing the active one.
* **Run journal.** A run row (owner, kind, model, link mode, status, a JSON summary,
  a lease ``holder`` + ``lease_expires``, ``last_seq``) and its events, opaque JSON
  objects each carrying an int ``seq``: 1, 2, ... without gaps, unique per run. Only
  the lease holder appends, and only while the run is unfinished
  (:class:`LeaseLost` otherwise). :meth:`Store.finish_run` appends the terminal event
  and sets the final status in one transaction. :meth:`Store.interrupt_expired_runs`
  gives every unfinished run whose lease expired exactly one terminal
  ``run.failed``/``run_interrupted`` event and status ``interrupted`` -- atomically,
  so two instances doing it at once interrupt each run once. The PostgreSQL backend
  sends ``NOTIFY gateway_runs, '<run_id>:<seq>'`` in the same transaction as every
  append (see :mod:`gateway.runs.bus`). :meth:`Store.request_run_stop` records a stop
  asked on any instance (``NOTIFY ... '<run_id>:stop'``) for the holder to act on.
* **Quotas.** Per-owner counters in fixed time windows (:meth:`Store.take_quota`: a
  read-modify-write holding the counter's row, so instances sharing the database never
  grant more than the limit together); what an owner stores (:meth:`Store.stored_usage`:
  the bytes of its unexpired documents, counted at every write, and of its run
  journals' events); and admission of runs (:meth:`Store.create_run` with
  ``max_active``, :meth:`Store.claim_run_slot`), serialized per owner.
* **Health.** :meth:`Store.check_writable` performs a real write and answers False
  instead of raising; :meth:`Store.check` gives the details ``gateway db check``
  prints; :meth:`Store.close` is idempotent.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from gateway.core.errors import LeaseLost, StoreError

__all__ = [
    "INTERRUPTED_ERROR",
    "LINK_MODES",
    "RUN_ACTIVE_STATUSES",
    "RUN_FINISHED_STATUSES",
    "ArtifactRecord",
    "InterruptedRun",
    "LeaseLost",
    "Notification",
    "NotificationSource",
    "QuotaTake",
    "RunRecord",
    "SigningKey",
    "Store",
    "StoreCheck",
    "StoreError",
    "StoredUsage",
]

LINK_MODES = frozenset({"private", "public"})
RUN_ACTIVE_STATUSES = frozenset({"queued", "running"})
RUN_FINISHED_STATUSES = frozenset({"completed", "failed", "cancelled", "interrupted"})
#: the ``error`` of the terminal event :meth:`Store.interrupt_expired_runs` appends
INTERRUPTED_ERROR: dict[str, str] = {
    "code": "run_interrupted",
    "message": "The gateway instance running this run stopped; the run was interrupted.",
}
#: the PostgreSQL NOTIFY channel of run journal appends (payload ``<run_id>:<seq>``)
RUNS_CHANNEL = "gateway_runs"


@dataclass(frozen=True, slots=True)
class ArtifactRecord:
    """One minted link: who owns it and the identity of the file it points at."""

    id: str
    owner: str
    link_mode: str  # "private" | "public"
    path: str  # resolved absolute host path -- never sent to clients
    filename: str
    device: int
    inode: int
    size: int
    mtime_ns: int
    created: float
    expires: float | None
    revoked: bool = False
    content_type: str = "application/octet-stream"
    #: st_ctime_ns at mint; None on records minted before it was recorded
    ctime_ns: int | None = None


@dataclass(frozen=True, slots=True)
class SigningKey:
    """A link-signing key. ``created`` is unix seconds; the secret never shows in repr."""

    kid: str
    secret: bytes = field(repr=False)
    created: int
    active: bool


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A journaled run (or background response) without its events."""

    id: str
    owner: str
    kind: str  # "run" | "response"
    model: str
    link_mode: str
    status: str  # queued | running | completed | failed | cancelled | interrupted
    created: float
    finished_at: float | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    holder: str | None = None  # the instance holding the lease (None once finished)
    lease_expires: float | None = None
    last_seq: int = 0  # seq of the last journaled event, 0 before the first
    stop_requested: float | None = None  # when someone asked to stop it (any instance)

    @property
    def finished(self) -> bool:
        return self.status in RUN_FINISHED_STATUSES


class QuotaTake(NamedTuple):
    """What :meth:`Store.take_quota` granted."""

    granted: int  # how many of the asked units were granted (0 .. n)
    used: int  # the window's count afterwards
    resets_at: float  # when the window ends (unix seconds)


#: what one link record counts toward its owner's stored bytes (its row, about)
LINK_RECORD_BYTES = 256


class StoredUsage(NamedTuple):
    """What one owner stores (:meth:`Store.stored_usage`)."""

    #: unexpired documents (sessions, stored responses), run journal events, and link
    #: records (:data:`LINK_RECORD_BYTES` each)
    bytes: int
    next_expiry: float | None  # the earliest expiry of one of its documents
    oldest_finished: float | None  # when its oldest finished run (still kept) ended


class InterruptedRun(NamedTuple):
    """A run :meth:`Store.interrupt_expired_runs` ended; ``seq`` is its terminal event's."""

    run_id: str
    owner: str
    seq: int


class Notification(NamedTuple):
    channel: str
    payload: str


@dataclass(frozen=True, slots=True)
class StoreCheck:
    """What ``gateway db check`` reports."""

    backend: str  # "sqlite" | "postgresql"
    location: str  # file path, or host:port/dbname (never a password)
    schema_version: int | None  # None when unreachable
    expected_version: int
    reachable: bool
    writable: bool
    latency_ms: float | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.reachable and self.writable and self.schema_version == self.expected_version


class NotificationSource(Protocol):
    """A dedicated listening connection (PostgreSQL LISTEN); used by one thread only."""

    def wait(self, timeout: float) -> list[Notification]:
        """Block up to ``timeout`` s for notifications; [] on timeout; StoreError if broken."""
        ...

    def close(self) -> None: ...


class Store(Protocol):
    """The state store interface; see the module docstring for the contract."""

    #: "sqlite" | "postgresql"
    backend: str

    # -- artifacts ----------------------------------------------------------------------

    def create_artifact(self, rec: ArtifactRecord) -> None:
        """Insert a new record (its id must be new: ValueError otherwise)."""
        ...

    def create_artifacts(self, recs: Sequence[ArtifactRecord]) -> None:
        """Insert new records in one transaction: all of them or, on any failure (a
        duplicate id: ValueError), none."""
        ...

    def save_artifacts(
        self, new: Sequence[ArtifactRecord], rebound: Sequence[ArtifactRecord]
    ) -> None:
        """In one transaction, all or nothing: insert ``new`` (ids must be new:
        ValueError otherwise) and give each record of ``rebound`` the file identity it
        carries (path, name, device, inode, size, times, type; matched by id and owner,
        nothing else of the stored record changes)."""
        ...

    def get_artifact(self, artifact_id: str) -> ArtifactRecord | None:
        """The record with this id, whoever owns it, or None."""
        ...

    def list_artifacts(self, owner: str, *, limit: int = 100) -> list[ArtifactRecord]:
        """The owner's records, newest first (revoked and expired ones too)."""
        ...

    def revoke_artifact(self, artifact_id: str, owner: str) -> bool:
        """Revoke the owner's record (idempotent); False if unknown or someone else's."""
        ...

    # -- documents ----------------------------------------------------------------------

    def put_json(
        self,
        kind: str,
        owner: str,
        key: str,
        value: dict[str, Any],
        *,
        expires: float | None = None,
    ) -> None:
        """Insert or replace the document at (kind, owner, key)."""
        ...

    def get_json(self, kind: str, owner: str, key: str) -> dict[str, Any] | None:
        """The document, or None if absent or expired."""
        ...

    def update_json(
        self,
        kind: str,
        owner: str,
        key: str,
        fn: Callable[[dict[str, Any] | None], dict[str, Any] | None],
        *,
        expires: float | None = None,
    ) -> dict[str, Any] | None:
        """Atomic read-modify-write: ``fn(current or None)`` -> the new document, or None
        to leave it as it is. Returns what is stored afterwards. Runs in one transaction
        holding the row (across instances); ``fn`` must be quick and pure (it may be
        called again if a concurrent writer created the document first)."""
        ...

    def list_json(
        self, kind: str, owner: str, *, limit: int = 100
    ) -> list[tuple[str, dict[str, Any]]]:
        """The owner's unexpired ``(key, document)`` pairs of this kind, newest write first."""
        ...

    def delete_json(self, kind: str, owner: str, key: str) -> bool:
        """Delete the document; False if there was none."""
        ...

    def purge_expired(self, now: float | None = None) -> int:
        """Delete expired documents; return how many."""
        ...

    # -- signing keys -------------------------------------------------------------------

    def init_signing(self, keys: Sequence[SigningKey], principal_salt: bytes) -> bool:
        """Seed keys (exactly one active) and salt if the store has none; False if it had."""
        ...

    def principal_salt(self) -> bytes | None:
        """The principal salt, or None before :meth:`init_signing`."""
        ...

    def list_signing_keys(self) -> list[SigningKey]:
        """Every key that verifies, oldest first."""
        ...

    def get_signing_key(self, kid: str) -> bytes | None:
        """The secret of a key that still verifies, or None (unknown or retired)."""
        ...

    def active_signing_key(self) -> SigningKey | None:
        """The key that signs new links."""
        ...

    def add_signing_key(self, key: SigningKey) -> None:
        """Rotate: add ``key`` as the only active key (the others keep verifying)."""
        ...

    def retire_signing_key(self, kid: str) -> None:
        """Delete a key; ValueError if unknown or active (rotate first)."""
        ...

    # -- run journal --------------------------------------------------------------------

    def create_run(self, rec: RunRecord, *, max_active: int | None = None) -> bool:
        """Insert a new run (``last_seq`` must be 0; ValueError on a duplicate id). With
        ``max_active``: only if the owner has fewer unfinished runs (any kind) than that,
        checked and inserted atomically across instances; False when refused."""
        ...

    def claim_run_slot(self, run_id: str, holder: str, max_running: int) -> bool:
        """Move the held, queued run to ``running`` if its owner's running runs plus its
        queued runs created before it are fewer than ``max_running`` (first come, first
        served); True if it is running now. LeaseLost unless ``holder`` holds it."""
        ...

    def get_run(self, run_id: str, owner: str) -> RunRecord | None:
        """The owner's run, or None (unknown or someone else's)."""
        ...

    def update_run(
        self,
        run_id: str,
        holder: str,
        *,
        status: str | None = None,
        summary: dict[str, Any] | None = None,
    ) -> None:
        """Change an unfinished run's status (queued/running) or summary; LeaseLost if
        ``holder`` does not hold it."""
        ...

    def append_run_events(self, run_id: str, events: Sequence[dict[str, Any]], holder: str) -> None:
        """Journal events ``last_seq+1, last_seq+2, ...`` (their ``seq``); LeaseLost unless
        ``holder`` holds the unfinished run; ValueError for a gap or a repeat."""
        ...

    def read_run_events(
        self, run_id: str, after_seq: int, limit: int = 1000
    ) -> list[dict[str, Any]]:
        """Events with ``seq > after_seq``, in order, at most ``limit``."""
        ...

    def finish_run(
        self,
        run_id: str,
        status: str,
        summary: dict[str, Any],
        holder: str,
        events: Sequence[dict[str, Any]] = (),
    ) -> None:
        """Append ``events`` (the terminal one) and set the final status, summary and
        ``finished_at`` in one transaction; the lease ends. LeaseLost as above."""
        ...

    def renew_run_lease(self, run_id: str, holder: str, until: float) -> bool:
        """Extend the lease to ``until``; False if ``holder`` lost it or the run ended."""
        ...

    def request_run_stop(self, run_id: str, owner: str) -> bool:
        """Ask the holder (whichever instance) to stop the owner's unfinished run: sets
        ``stop_requested`` (the first time only) and, on PostgreSQL, sends ``NOTIFY
        gateway_runs, '<run_id>:stop'``. False if unknown, someone else's or finished."""
        ...

    def run_stop_requested(self, run_id: str) -> bool:
        """Whether a stop was asked for this run (the holder's safety check)."""
        ...

    def adopt_expired_runs(self, now: float, holder: str, until: float) -> list[RunRecord]:
        """Take the lease (``holder`` until ``until``) of every unfinished run whose
        lease expired and whose summary names an ``upstream_run_id`` (the upstream runs
        it on: this instance follows it to its end); :meth:`interrupt_expired_runs`
        ends the others. Each such run goes to one instance only."""
        ...

    def interrupt_expired_runs(self, now: float) -> list[InterruptedRun]:
        """End every unfinished run whose lease expired before ``now`` (see contract)."""
        ...

    def purge_runs(self, finished_before: float) -> int:
        """Delete runs (and their events) finished before ``finished_before``; how many."""
        ...

    # -- quotas -------------------------------------------------------------------------

    def take_quota(
        self,
        owner: str,
        kind: str,
        limit: int,
        window: int,
        n: int = 1,
        now: float | None = None,
        whole: bool = False,
    ) -> QuotaTake:
        """Count up to ``n`` units of ``kind`` for ``owner`` in the current fixed window of
        ``window`` seconds, as many as keep the window's count at most ``limit`` (``whole``:
        all ``n`` or none)."""
        ...

    def stored_usage(self, owner: str, now: float | None = None) -> StoredUsage:
        """What ``owner`` stores now (unexpired documents and its runs' journals)."""
        ...

    def purge_quota_counters(self, before: float) -> int:
        """Delete counters of windows that started before ``before``; how many."""
        ...

    # -- coordination, health, lifetime -------------------------------------------------

    def try_advisory_lock(self, name: str) -> AbstractContextManager[bool]:
        """``with store.try_advisory_lock("reaper") as mine:`` -- True in at most one
        instance at a time (PostgreSQL advisory lock; SQLite: always True)."""
        ...

    def open_notifications(self, channels: Sequence[str]) -> NotificationSource | None:
        """A dedicated listening connection, or None when the backend has no
        cross-instance notifications (SQLite: one instance, local wake-ups suffice)."""
        ...

    def schema_version(self) -> int:
        """The applied schema version (0: empty database)."""
        ...

    def migrate(self) -> tuple[int, int]:
        """Apply missing migrations; ``(version before, version after)``."""
        ...

    def check_writable(self) -> bool:
        """Perform a real write; False (never an exception) if it fails."""
        ...

    def check(self) -> StoreCheck:
        """Backend, location, schema version, connectivity and writability; never raises."""
        ...

    def close(self) -> None:
        """Release the backend; idempotent."""
        ...


# -- helpers shared by the backends ------------------------------------------------------


def check_limit(limit: int) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError("limit is a positive int")


def dump_doc(value: dict[str, Any]) -> str:
    """Compact JSON, ASCII only (lone surrogates and NUL escaped), NaN refused."""
    if not isinstance(value, dict):
        raise TypeError("value is a dict")
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def load_doc(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise StoreError("the state store holds a malformed document") from exc
    if not isinstance(value, dict):
        raise StoreError("the state store holds a malformed document")
    return value


def check_artifact(rec: ArtifactRecord) -> None:
    if rec.link_mode not in LINK_MODES:
        raise ValueError("link_mode is 'private' or 'public'")


def check_run(rec: RunRecord) -> None:
    if rec.status not in RUN_ACTIVE_STATUSES | RUN_FINISHED_STATUSES:
        raise ValueError(f"unknown run status {rec.status!r}")
    if rec.last_seq != 0:
        raise ValueError("a new run has no events yet (last_seq 0)")
    if not isinstance(rec.summary, dict):
        raise TypeError("summary is a dict")


def check_update_status(status: str | None) -> None:
    if status is not None and status not in RUN_ACTIVE_STATUSES:
        raise ValueError("update_run sets queued or running; finish_run ends a run")


def check_finish_status(status: str) -> None:
    if status not in RUN_FINISHED_STATUSES:
        raise ValueError(f"a finished run's status is one of {sorted(RUN_FINISHED_STATUSES)}")


def encode_events(events: Sequence[dict[str, Any]], last_seq: int) -> list[tuple[int, str]]:
    """``(seq, json)`` per event, checking ``seq`` runs on from ``last_seq`` without gaps."""
    out: list[tuple[int, str]] = []
    expected = last_seq + 1
    for event in events:
        if not isinstance(event, dict):
            raise TypeError("a run event is a dict")
        seq = event.get("seq")
        if isinstance(seq, bool) or not isinstance(seq, int):
            raise ValueError("a run event carries an int 'seq'")
        if seq != expected:
            raise ValueError(f"run event seq {seq} does not follow {expected - 1}")
        out.append((seq, dump_doc(event)))
        expected += 1
    return out


def interrupted_event(run_id: str, seq: int) -> dict[str, Any]:
    """The one terminal event of a run whose instance stopped."""
    return {"event": "run.failed", "seq": seq, "run_id": run_id, "error": dict(INTERRUPTED_ERROR)}


def b64e(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64d(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def check_signing_seed(keys: Sequence[SigningKey], salt: bytes) -> None:
    if not keys or sum(1 for k in keys if k.active) != 1:
        raise ValueError("seed exactly one active key")
    if len({k.kid for k in keys}) != len(keys):
        raise ValueError("duplicate kid")
    if len(salt) < 32:
        raise ValueError("the principal salt has at least 32 bytes")


def advisory_key(name: str) -> int:
    """A stable signed 64-bit advisory-lock key for ``name``."""
    import hashlib

    digest = hashlib.sha256(b"artifact-gateway:lock:" + name.encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def iter_chunks(seq: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(seq), size):
        yield seq[i : i + size]
