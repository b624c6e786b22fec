"""Bearer-key lookup (gateway.principals.auth.Authenticator): a key once found is remembered by
its text, and nothing else is."""

from __future__ import annotations

import pytest

from gateway.core.errors import AuthError
from gateway.ops.config import KeyEntry
from gateway.principals.auth import Authenticator

ALICE = "alice-key-0123456789abcdef"
PROXY = "proxy-key-0123456789abcdef"


def _auth() -> Authenticator:
    return Authenticator(
        (
            KeyEntry(key=ALICE, principal="alice"),
            KeyEntry(key=PROXY, principal="owui", role="proxy"),
        )
    )


class Headers(dict[str, str]):
    def getlist(self, key: str) -> list[str]:
        return [self[key]] if key in self else []


def test_a_key_is_remembered_once_and_wrong_ones_never() -> None:
    auth = _auth()
    for _ in range(3):
        for spelling in (ALICE, f" {ALICE} ", f"{ALICE}\t"):
            caller = auth.authenticate(Headers(Authorization=f"Bearer {spelling}"))
            assert (caller.key_principal, caller.owner) == ("alice", "alice")
    for i in range(500):  # wrong keys, near ones included: refused, and not kept
        for wrong in (f"{ALICE[:-1]}{i % 10}x", ALICE + "x", ALICE[:-1], f"key-{i}"):
            with pytest.raises(AuthError) as err:
                auth.authenticate(Headers(Authorization=f"Bearer {wrong}"))
            assert err.value.code == "invalid_api_key"
    caller = auth.authenticate(
        Headers(Authorization=f"Bearer {PROXY}", **{"X-Gateway-Owner": "openwebui:u1"})
    )
    assert (caller.key_principal, caller.owner) == ("owui", "openwebui:u1")
    assert sorted(auth._known) == sorted([ALICE, PROXY])  # one entry per key, at most


def test_a_remembered_key_keeps_its_rules() -> None:
    """The user key found before still may not assert an owner."""
    auth = _auth()
    auth.authenticate(Headers(Authorization=f"Bearer {ALICE}"))
    with pytest.raises(AuthError) as err:
        auth.authenticate(
            Headers(Authorization=f"Bearer {ALICE}", **{"X-Gateway-Owner": "openwebui:u1"})
        )
    assert err.value.code == "forbidden_assertion"
