"""tests/unit/test_signing.py's backend cases (signing keys) on PostgreSQL (SQLite there)."""

from tests.unit.test_signing import *  # noqa: F403

BACKENDS = ("postgresql",)
