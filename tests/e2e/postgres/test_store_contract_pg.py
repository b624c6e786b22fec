"""tests/unit/test_store_contract.py's backend cases (the store contract) on PostgreSQL (SQLite there)."""

from tests.unit.test_store_contract import *  # noqa: F403

BACKENDS = ("postgresql",)
