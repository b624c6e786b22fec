"""The API server's routes, one Quart blueprint per resource (see :func:`blueprints`)."""

from __future__ import annotations

from quart import Blueprint


def blueprints() -> list[Blueprint]:
    from gateway.routes import artifacts, chat, health, responses, runs, selftest, sessions

    return [m.bp for m in (health, chat, responses, runs, sessions, artifacts, selftest)]
