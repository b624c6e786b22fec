"""``POST /v1/selftest``: the real relay, pipeline and minting on a scripted upstream body.

Used by ``gateway smoke`` (see :mod:`gateway.api.smoke` for the script and the client half).
"""

from __future__ import annotations

from pathlib import Path

import trio
from quart import Blueprint, Response

from gateway.api.routes._common import authenticate, body, relay_response
from gateway.api.smoke import (
    SELFTEST_ROUTE,
    scripted_chunks,
    selftest_script,
    valid_nonce,
    write_selftest_file,
)
from gateway.api.state import current
from gateway.clients.sources import SSESource
from gateway.core.errors import GatewayError, RequestError
from gateway.fronts.chat import ChatEncoder
from gateway.principals.auth import effective_link_mode
from gateway.stream.relay import Relay

bp = Blueprint("selftest", __name__)


@bp.post(SELFTEST_ROUTE)
async def selftest() -> Response:
    st = current()
    caller = authenticate()
    b = await body()
    nonce = valid_nonce(b.get("nonce"))
    if nonce is None:
        raise RequestError(
            "'nonce' must be 16 to 64 lowercase hex characters.", code="invalid_nonce"
        )
    mode = effective_link_mode(caller, b, st.config.artifacts.default_link_mode)
    await st.quotas.take_selftest(caller.owner)  # each writes a file
    scope = st.artifacts.scope(caller.owner)
    try:
        if not scope:
            raise FileNotFoundError("no artifact root for this principal")
        path = await trio.to_thread.run_sync(write_selftest_file, Path(scope[0]), nonce)
    except OSError:
        raise GatewayError(
            "The self-test could not write its file under the caller's first artifact root.",
            code="selftest_unavailable",
            status=503,
        ) from None
    pipeline = st.pipeline(st.resolver(caller.owner, mode))
    source = SSESource(scripted_chunks(selftest_script(str(path), nonce)))
    front = ChatEncoder(keep_text=False)
    relay: Relay[object, object, bytes] = Relay(source, pipeline, front, st.relay_options())  # type: ignore[arg-type]
    return relay_response(st, SELFTEST_ROUTE, relay, on_close=lambda: st.count_rewrites(pipeline))
