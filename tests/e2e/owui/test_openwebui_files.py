"""The answer's files as Open WebUI's own file tiles, both ways this project offers.

* **Native delivery** (the runs proxy): Open WebUI's connection forwards the user's own
  session (auth type "session"); once the run completed, the proxy fetches each
  artifact from the gateway and uploads it into Open WebUI as that user, then sends one
  ``files`` event.
* **The companion Function** (``integrations/openwebui/artifact_gateway_files.py``):
  for deployments that forward only user headers; it fetches the artifacts server to
  server with a proxy key and stores them under the user inside Open WebUI.

Either way the tiles' files are the owner's Open WebUI files: byte-identical to the
files on disk for the owner, 403/404 for anyone else, and stored once (a reload shows
the same tiles, no duplicates).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from gateway.fronts.openwebui import NOTE_START
from tests.conftest import PROXY_KEY
from tests.e2e.owui.checks import (
    PRIVATE_NOTE,
    ask,
    assistant_files,
    check_stored_files,
    upstream_posts,
)
from tests.e2e.owui.conftest import OwuiChain, start_owui_chain

pytestmark = pytest.mark.openwebui

FUNCTION_ID = "artifact_gateway_files"
FUNCTION_SOURCE = (
    Path(__file__).resolve().parents[3] / "integrations" / "openwebui" / f"{FUNCTION_ID}.py"
)
#: three file tiles and one image (plot.png is shown as a picture)
TILE_NAMES = {"report.pdf", "results.csv", "résumé 2026.txt"}


def check_tiles(answer: Any) -> None:
    assert len(answer.file_tiles) == len(TILE_NAMES), answer.file_tiles
    for name in TILE_NAMES:
        assert any(name in tile for tile in answer.file_tiles), (name, answer.file_tiles)
    assert len(answer.tile_images) == 1, answer.tile_images
    assert "/api/v1/files/" in answer.tile_images[0], answer.tile_images


def chat_with_tiles(page: Any, user: Any) -> tuple[Any, str, Any]:
    """Ask, wait for the four tiles, then reload the chat (browser thread)."""
    ask(page, user, "demo-private")
    answer = page.wait_tiles(4)
    page.screenshot("tiles")
    chat_id = page.chat_id()
    page.reload_chat()
    page.wait_tiles(4)
    page.screenshot("tiles-after-reload")
    return answer, chat_id, page.read_answer()


async def test_native_delivery_as_file_tiles(
    nursery: trio.Nursery, tmp_path: Path, openwebui: Any, browser: Any, chat_page: Any
) -> None:
    chain: OwuiChain = await start_owui_chain(
        nursery,
        tmp_path,
        openwebui,
        proxy={"openwebui_url": openwebui.url},
        connection={"auth_type": "session"},
    )
    files = chain.files
    user, other = openwebui.user, openwebui.other

    # the model list still works with the session forwarded: Open WebUI asks the proxy
    # with this user's own token (its cache was cleared by the connection change)
    assert {"demo", "demo-private"} <= set(await openwebui.model_ids(user))
    async with chain.proxy.client(key="not-a-session") as c:
        assert (await c.get("/v1/models")).status_code == 401

    answer, chat_id, reloaded = await browser.run(chat_with_tiles, chat_page, user)

    check_tiles(answer)
    check_tiles(reloaded)  # the same tiles after a reload: stored once
    # the text still names the files (as links, which open for the owner too); no note,
    # since the files were delivered
    for p in files.in_root:
        assert p.name in answer.text, (p.name, answer.text)
    assert PRIVATE_NOTE not in answer.text, answer.text
    stored = await openwebui.chat(user, chat_id)
    (entries,) = [f for f in assistant_files(stored) if f]  # one message has files
    await check_stored_files(openwebui, user, other, entries, files)

    # the next turn: Open WebUI sends the text back (the tiles are not sent); the agent
    # gets its paths again
    def next_turn() -> None:
        chat_page.send("Thanks! Change the chart colours, please.")
        chat_page.wait_answer()
        chat_page.screenshot("second-turn")

    await browser.run(next_turn)
    chats, _tasks = upstream_posts(chain)
    assert len(chats) == 2, chats
    previous = chats[1]["messages"][-2]["content"]
    assert chain.gateway.url + "/v1/artifacts/" not in previous, previous
    assert NOTE_START.strip() not in previous
    assert str(files.report_pdf) in previous, previous


async def test_companion_function_stores_the_files(
    nursery: trio.Nursery, tmp_path: Path, openwebui: Any, browser: Any, chat_page: Any
) -> None:
    """Headers mode (no session forwarded): the Function fetches the answer's artifacts
    from the gateway with a proxy key asserting the user, and stores them as theirs."""
    chain = await start_owui_chain(nursery, tmp_path, openwebui)
    files = chain.files
    user, other = openwebui.user, openwebui.other
    valves = {"gateway_url": chain.gateway.url, "proxy_key": PROXY_KEY}
    await openwebui.install_function(
        FUNCTION_ID, FUNCTION_SOURCE.read_text(encoding="utf-8"), valves, name="Gateway files"
    )
    try:
        answer, chat_id, reloaded = await browser.run(chat_with_tiles, chat_page, user)
        stored = await openwebui.chat(user, chat_id)
    finally:
        with trio.CancelScope(shield=True):  # the Open WebUI is shared: global filter off
            await openwebui.delete_function(FUNCTION_ID)

    check_tiles(answer)
    check_tiles(reloaded)
    (entries,) = [f for f in assistant_files(stored) if f]
    await check_stored_files(openwebui, user, other, entries, files)
    # the Function asked as this user: the gateway refuses the same key for someone else
    art = answer.links[0].href.rsplit("/", 1)[1]
    async with httpx.AsyncClient(base_url=chain.gateway.url, timeout=10) as c:
        r = await c.get(
            f"/v1/artifacts/{art}",
            headers={"Authorization": f"Bearer {PROXY_KEY}", "X-Gateway-Owner": "openwebui:x"},
        )
    assert r.status_code == 404, r.status_code
