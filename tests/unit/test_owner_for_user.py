"""Open WebUI user ids become owners: plain ASCII ids as they are, the rest hashed."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.clients.openwebui import owner_for_user
from gateway.principals.auth import _PRINCIPAL_RE


@given(st.text(max_size=200))
def test_every_id_becomes_a_valid_principal(user_id: str) -> None:
    owner = owner_for_user(user_id)
    assert owner.isascii() and _PRINCIPAL_RE.fullmatch(owner), owner


@given(st.text(max_size=40), st.text(max_size=40))
def test_two_ids_never_share_an_owner(a: str, b: str) -> None:
    if a != b:
        assert owner_for_user(a) != owner_for_user(b)


def test_examples() -> None:
    assert owner_for_user("4f2a-b7") == "openwebui:4f2a-b7"
    assert owner_for_user("ü").startswith("openwebui:h-")
    assert owner_for_user("²").startswith("openwebui:h-")  # isalnum, not ASCII
    hashed = owner_for_user("ü").removeprefix("openwebui:")
    assert owner_for_user(hashed) != owner_for_user("ü")  # spelled like a hash: hashed again
    assert owner_for_user("\ud800").startswith("openwebui:h-")  # a lone surrogate
    assert owner_for_user("anonymous") != "openwebui:anonymous"  # the no-user owner
