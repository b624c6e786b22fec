"""``GET /openapi.json``: the API server's OpenAPI 3.1 document (:mod:`gateway.api.openapi`)."""

from __future__ import annotations

import functools
import json

from quart import Blueprint, Response

from gateway.api.openapi import api_document

bp = Blueprint("openapi", __name__)


@functools.cache
def _document_bytes() -> bytes:
    return json.dumps(api_document(), separators=(",", ":")).encode()


@bp.get("/openapi.json")
async def openapi() -> Response:
    return Response(_document_bytes(), content_type="application/json")
