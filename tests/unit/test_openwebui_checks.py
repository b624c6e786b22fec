"""Open WebUI session checks are throttled per client address (red team: a flood of
forged tokens from one address locked every new Open WebUI user out)."""

from __future__ import annotations

import base64
import json

import httpx
import pytest

from gateway.clients.openwebui import CHECK_BURST, OpenWebUI
from gateway.core.errors import GatewayError


def jwt_shaped(i: int) -> str:
    part = base64.urlsafe_b64encode(json.dumps({"id": i}).encode()).decode().rstrip("=")
    return f"{part}.{part}.{part}"


@pytest.fixture
def owui() -> OpenWebUI:
    def answer(request: httpx.Request) -> httpx.Response:
        token = request.headers["Authorization"].split()[1]
        if token == jwt_shaped(42):
            return httpx.Response(200, json={"id": "u42", "email": "u@x", "name": "U"})
        return httpx.Response(401, json={"detail": "not authenticated"})

    client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    return OpenWebUI("http://owui.test", client, checks_per_second=2.0, clock=lambda: 0.0)


async def test_a_flood_from_one_address_does_not_lock_out_another(owui: OpenWebUI) -> None:
    refused = 0
    for i in range(CHECK_BURST * 3):
        try:
            assert await owui.verify(jwt_shaped(1000 + i), "203.0.113.9") is None
        except GatewayError as exc:
            assert exc.code == "too_many_session_checks"
            refused += 1
    assert refused == CHECK_BURST * 2 and owui.checks == CHECK_BURST
    user = await owui.verify(jwt_shaped(42), "198.51.100.7")  # a real user elsewhere
    assert user is not None and user.id == "u42"
