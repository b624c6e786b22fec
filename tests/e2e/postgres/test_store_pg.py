"""tests/unit/test_store.py's backend cases (the store) on PostgreSQL (SQLite there)."""

from tests.unit.test_store import *  # noqa: F403

BACKENDS = ("postgresql",)
