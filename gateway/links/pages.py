"""Small HTML pages for people who open a download link in a browser (sans-IO).

API clients get JSON errors; a browser that navigates to a link (``Accept: text/html``)
gets one readable page saying what happened and what to do instead: sign in to Open
WebUI in this browser (401), the link is not yours or does not exist (404), the link
expired, was revoked or its file changed (410). Also the owner's share page, which turns
one private artifact into a public link. Every value is HTML-escaped; the pages load
nothing from anywhere.
"""

from __future__ import annotations

import html
import re
import shlex
from typing import Any

from gateway.core.errors import GatewayError

__all__ = [
    "curl_hint",
    "download_link",
    "error_page",
    "share_done_page",
    "share_page",
    "wants_html",
]

_STYLE = (
    "body{font:16px/1.5 system-ui,sans-serif;max-width:36em;margin:4em auto;padding:0 1em;"
    "color:#222}h1{font-size:1.3em}code,input{font:14px ui-monospace,monospace}"
    "input{width:100%;padding:.4em}button{font-size:1em;padding:.4em 1em}p.small{color:#666}"
)


def wants_html(headers: Any) -> bool:
    """A browser navigating here (not an API client, which asks for JSON or anything)."""
    accept = (headers.get("Accept") or "").lower()
    if "text/html" not in accept:
        return False
    return accept.find("text/html") < accept.find("application/json") or (
        "application/json" not in accept
    )


def _page(title: str, body: str) -> str:
    return (
        "<!doctype html><html lang=en><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width,initial-scale=1">'
        f"<meta name=robots content=noindex><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style><body><h1>{html.escape(title)}</h1>{body}</body></html>"
    )


#: what an artifact id looks like (ASCII only: ``str.isalnum`` would take any script)
_ARTIFACT_ID = re.compile(r"[A-Za-z0-9_-]{16,64}")


def download_link(base_url: str, artifact_id: object) -> str | None:
    """The private download link of ``artifact_id`` under ``base_url``, or None when the
    id is not one the gateway makes. Built from the id alone (never from the request's
    path, which a crafted link fills with quotes, ``;`` or U+202E)."""
    if not isinstance(artifact_id, str) or not _ARTIFACT_ID.fullmatch(artifact_id):
        return None
    return f"{base_url.rstrip('/')}/v1/artifacts/{artifact_id}"


def curl_hint(link: str) -> str:
    """A shell command that downloads ``link`` with a key; every word quoted for the shell."""
    return f"curl -OJ -H 'Authorization: Bearer <your key>' {shlex.quote(link)}"


def error_page(error: GatewayError, openwebui_url: str = "", link: str | None = None) -> str:
    """The page for a refused download (401, 403, 404, 410, ...); ``link`` is the file's
    download link (:func:`download_link`), shown in the 401 page's ``curl`` hint."""
    if error.status == 401:
        title = "Sign in to open this file"
        with_key = (
            f"<p class=small>With an API key of this gateway: <code>"
            f"{html.escape(curl_hint(link))}</code></p>"
            if link
            else "<p class=small>With an API key of this gateway, send it as "
            "<code>Authorization: Bearer &lt;your key&gt;</code>.</p>"
        )
        if not openwebui_url:  # no Open WebUI sessions here: keys only
            body = (
                "<p>This download link opens only for the person it was made for, with "
                "their API key.</p>" + with_key
            )
        else:
            where = f'<a href="{html.escape(openwebui_url, quote=True)}">Open WebUI</a>'
            body = (
                f"<p>This download link opens only for the person it was made for. Sign in "
                f"to {where} in this browser, then open the link again.</p>"
                "<p class=small>The link works in the browser where you use Open WebUI, when "
                "Open WebUI and this gateway share a host name (or one reverse proxy).</p>"
                + with_key
            )
    elif error.status == 404:
        title = "No such file"
        body = (
            "<p>This link does not exist, or it belongs to someone else. If it is yours, "
            "sign in to Open WebUI as yourself in this browser and open it again.</p>"
        )
    elif error.status == 410:
        title = "This link no longer works"
        body = f"<p>{html.escape(error.message)} Ask the assistant for the file again.</p>"
    else:
        title = "This file cannot be opened"
        body = f"<p>{html.escape(error.message)}</p>"
    code = f"<p class=small>Error code: <code>{html.escape(error.code)}</code></p>"
    return _page(title, body + code)


def share_page(filename: str, size: int, action: str, token: str, ttl_days: float) -> str:
    """The owner's page: make a public link for one private file."""
    days = f"{ttl_days:g} day" + ("" if ttl_days == 1 else "s")
    return _page(
        f"Share {filename}",
        f"<p><b>{html.escape(filename)}</b> ({size:,} bytes) opens only for you. A public "
        f"link opens for anyone who has it, for {days} (only the gateway's operator can "
        "revoke it sooner).</p>"
        f'<form method=post action="{html.escape(action, quote=True)}">'
        f'<input type=hidden name=token value="{html.escape(token, quote=True)}">'
        "<button type=submit>Create a public link</button></form>",
    )


def share_done_page(filename: str, url: str, expires: str) -> str:
    """The new public link, ready to copy."""
    return _page(
        f"Public link for {filename}",
        f"<p>Anyone with this link can download <b>{html.escape(filename)}</b> until "
        f"{html.escape(expires)}:</p>"
        f'<p><input readonly value="{html.escape(url, quote=True)}"></p>'
        f'<p><a href="{html.escape(url, quote=True)}">Open the public link</a></p>',
    )
