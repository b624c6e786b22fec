"""The proxy's Open WebUI JWT verification (PyJWT): tokens Open WebUI 0.12.4's own code
signed (recorded in tests/data/openwebui_jwt.json), and every way a token can be wrong.
"""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path
from typing import Any

import jwt
import pytest

from gateway.core.errors import AuthError
from gateway.proxy.identity import JWT_LEEWAY_SECONDS, verify_openwebui_jwt

RECORDED = json.loads((Path(__file__).parents[1] / "data" / "openwebui_jwt.json").read_text())
SECRET = RECORDED["secret"]


def claims(**changes: Any) -> dict[str, Any]:
    now = int(time.time())
    out = {"sub": "u-1", "email": "a@b.c", "name": "A", "role": "user"}
    out |= {"iss": "open-webui", "iat": now, "exp": now + 300}
    out.update(changes)
    return {k: v for k, v in out.items() if v is not None}


def token(payload: dict[str, Any], secret: str = SECRET, alg: str = "HS256") -> str:
    with warnings.catch_warnings():  # HS512 wants a 64-byte key: beside the point here
        warnings.simplefilter("ignore", jwt.InsecureKeyLengthWarning)
        return jwt.encode(payload, secret, algorithm=alg)


def why(tok: str, secret: str = SECRET) -> str:
    with pytest.raises(AuthError) as caught:
        verify_openwebui_jwt(tok, secret)
    assert caught.value.code == "invalid_user_jwt"
    assert secret not in caught.value.message
    assert not tok or tok not in caught.value.message
    return caught.value.message


@pytest.mark.parametrize("entry", RECORDED["long"], ids=lambda e: e["sub"][:8])
def test_tokens_open_webui_signed_are_accepted(entry: dict[str, str]) -> None:
    got = verify_openwebui_jwt(entry["token"], SECRET)
    assert got["sub"] == entry["sub"] and got["email"] == entry["email"]
    assert got["name"] == entry["name"] and got["iss"] == "open-webui"


def test_an_expired_open_webui_token_is_refused() -> None:
    """Minted with Open WebUI's default lifetime (300 s) when it was recorded."""
    assert "expired" in why(RECORDED["expired"][0]["token"])


def test_an_open_webui_token_checked_with_another_secret_is_refused() -> None:
    assert "signature" in why(RECORDED["long"][0]["token"], "another-secret-0123456789abcdef01")


def test_clock_skew_within_the_leeway_is_accepted() -> None:
    now = int(time.time())
    skew = JWT_LEEWAY_SECONDS - 5
    assert verify_openwebui_jwt(token(claims(exp=now - skew)), SECRET)["sub"] == "u-1"
    assert verify_openwebui_jwt(token(claims(iat=now + skew, nbf=now + skew)), SECRET)


@pytest.mark.parametrize(
    ("label", "payload", "reason"),
    [
        ("expired past the leeway", {"exp": -JWT_LEEWAY_SECONDS - 5}, "expired"),
        ("nbf in the future", {"nbf": JWT_LEEWAY_SECONDS + 60}, "not valid yet"),
        ("iat in the future", {"iat": JWT_LEEWAY_SECONDS + 60}, "not valid yet"),
        ("wrong iss", {"iss": "evil-webui"}, "not issued by open-webui"),
        ("no iss", {"iss": None}, "'iss'"),
        ("no exp", {"exp": None}, "'exp'"),
        ("no iat", {"iat": None}, "'iat'"),
        ("no sub", {"sub": None}, "'sub'"),
        ("empty sub", {"sub": ""}, "names no user"),
        ("exp not a number", {"exp": "soon"}, "cannot be decoded"),
    ],
)
def test_bad_claims_are_refused_saying_why(
    label: str, payload: dict[str, Any], reason: str
) -> None:
    now = int(time.time())
    changes = {k: (now + v if isinstance(v, int) and k != "sub" else v) for k, v in payload.items()}
    assert reason in why(token(claims(**changes))), label


def test_the_algorithm_is_pinned() -> None:
    unsigned = jwt.encode(claims(), key=None, algorithm="none")
    assert "HS256" in why(unsigned)
    assert "HS256" in why(token(claims(), alg="HS512"))
    # a none-header with an HS256 signature pasted on
    forged = unsigned.rstrip(".") + "." + token(claims()).rsplit(".", 1)[1]
    assert "HS256" in why(forged)


@pytest.mark.parametrize("garbage", ["", "not.a.jwt", "abc.def", "a.b.c.d", "\u00e9.\u00e9.\u00e9"])
def test_garbage_is_refused(garbage: str) -> None:
    why(garbage)


def test_tampered_claims_are_refused() -> None:
    good = token(claims()).split(".")
    other = token(claims(sub="u-2")).split(".")
    assert "signature" in why(".".join([good[0], other[1], good[2]]))


def test_a_short_secret_still_verifies_without_a_warning() -> None:
    """filterwarnings = error: PyJWT's InsecureKeyLengthWarning must not escape (the
    short secret is warned about once, at start and by config check)."""
    tok = token(claims(), "short-secret")
    assert verify_openwebui_jwt(tok, "short-secret")["sub"] == "u-1"
