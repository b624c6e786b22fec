"""First end-to-end checks of the API server over real hypercorn + the demo upstream."""

from __future__ import annotations

import json

from gateway.core.sse import SSEDecoder
from tests.conftest import Gateway, Upstream


async def test_stream_relays_and_rewrites(gateway: Gateway, upstream: Upstream) -> None:
    files = upstream.app.demo_files
    async with gateway.client() as c:
        body = {"model": "demo", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        async with c.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            raw = b"".join([chunk async for chunk in r.aiter_bytes()])
    events = SSEDecoder().feed(raw)
    assert events[-1].data == "[DONE]"
    text = raw.decode()
    for path in (files.report_pdf, files.plot_png, files.outside_txt):
        assert str(path.parent) not in text
    final = json.loads(events[-2].data)
    assert final["choices"][0]["finish_reason"] == "stop"
    assert final["gateway"]["download_link_mode"] == "private"
