"""The API server's routes, one Quart blueprint per resource (see :func:`blueprints`)."""

from __future__ import annotations

from quart import Blueprint


def blueprints() -> list[Blueprint]:
    from gateway.api.routes import (
        artifacts,
        chat,
        health,
        openapi,
        responses,
        runs,
        selftest,
        sessions,
    )

    modules = (health, chat, responses, runs, sessions, artifacts, selftest, openapi)
    return [m.bp for m in modules]
