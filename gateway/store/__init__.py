"""The gateway's state store, behind one small interface (:class:`Store`).

``open_store`` picks the backend: an empty ``database_url`` is the embedded SQLite file
under ``state_dir`` (one instance; migrates on open), a ``postgresql://`` URL is the
shared PostgreSQL store (several instances; ``gateway db upgrade`` migrates it). The
contract is in :mod:`gateway.store.base`, the schema policy in
:mod:`gateway.store.migrations`. Callers only ever see :class:`Store`, the records and
:class:`StoreError`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.core.errors import ConfigError
from gateway.store.base import (
    INTERRUPTED_ERROR,
    LINK_MODES,
    LINK_RECORD_BYTES,
    RUN_ACTIVE_STATUSES,
    RUN_FINISHED_STATUSES,
    RUNS_CHANNEL,
    ArtifactRecord,
    InterruptedRun,
    LeaseLost,
    Notification,
    NotificationSource,
    QuotaTake,
    RunRecord,
    SigningKey,
    Store,
    StoreCheck,
    StoredUsage,
    StoreError,
)
from gateway.store.migrations import EXPECTED_VERSION, MIGRATIONS, Migration
from gateway.store.sqlite import DB_FILE_NAME, SQLiteStore

__all__ = [
    "DB_FILE_NAME",
    "EXPECTED_VERSION",
    "INTERRUPTED_ERROR",
    "LINK_MODES",
    "LINK_RECORD_BYTES",
    "MIGRATIONS",
    "RUNS_CHANNEL",
    "RUN_ACTIVE_STATUSES",
    "RUN_FINISHED_STATUSES",
    "ArtifactRecord",
    "InterruptedRun",
    "LeaseLost",
    "Migration",
    "Notification",
    "NotificationSource",
    "QuotaTake",
    "RunRecord",
    "SQLiteStore",
    "SigningKey",
    "Store",
    "StoreCheck",
    "StoreError",
    "StoreSettings",
    "StoredUsage",
    "open_configured_store",
    "open_store",
    "store_settings",
]

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def open_store(
    state_dir: Path,
    database_url: str = "",
    *,
    pool_size: int = 8,
    connect_timeout: float = 5.0,
    migrate: bool | None = None,
) -> Store:
    """The configured store.

    ``migrate``: None (what ``gateway run`` uses) -- SQLite applies missing migrations,
    PostgreSQL refuses an older schema naming ``gateway db upgrade``; both refuse a
    newer one (:class:`ConfigError`). True applies missing migrations on either backend
    (``gateway db upgrade``); False opens as is (``gateway db check``).
    """
    url = database_url.strip()
    if not url:
        return SQLiteStore(Path(state_dir) / DB_FILE_NAME, migrate=migrate)
    if url.startswith(_POSTGRES_SCHEMES):
        from gateway.store.postgres import PostgresStore

        return PostgresStore(
            url, pool_size=pool_size, connect_timeout=connect_timeout, migrate=migrate
        )
    raise ConfigError(
        "database_url", "must be empty (SQLite under state_dir) or a postgresql:// URL"
    )


@dataclass(frozen=True, slots=True)
class StoreSettings:
    state_dir: Path
    database_url: str
    pool_size: int = 8
    connect_timeout: float = 5.0


def store_settings(config: Any) -> StoreSettings:
    """The store's settings from a :class:`~gateway.ops.config.Config`.

    Reads ``database_url`` and ``[database] pool_size`` / ``connect_timeout_seconds``
    when the config has them; without a ``database_url`` attribute,
    ``$GATEWAY_DATABASE_URL`` stands in for it.
    """
    if hasattr(config, "database_url"):
        url = str(config.database_url or "")
    else:
        url = os.environ.get("GATEWAY_DATABASE_URL", "")
    db = getattr(config, "database", None)
    return StoreSettings(
        state_dir=Path(config.state_dir),
        database_url=url,
        pool_size=int(getattr(db, "pool_size", 8)),
        connect_timeout=float(getattr(db, "connect_timeout_seconds", 5.0)),
    )


def open_configured_store(config: Any, *, migrate: bool | None = None) -> Store:
    """:func:`open_store` with :func:`store_settings` of ``config``."""
    s = store_settings(config)
    return open_store(
        s.state_dir,
        s.database_url,
        pool_size=s.pool_size,
        connect_timeout=s.connect_timeout,
        migrate=migrate,
    )
