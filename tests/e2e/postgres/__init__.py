"""Tests on the throw-away PostgreSQL (tests/conftest.py), outside tests/unit: unit tests need no database server."""
