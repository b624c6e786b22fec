"""A real Open WebUI 0.12.4 in a real headless Chromium, in front of the whole chain.

Browser -> Open WebUI -> runs proxy -> gateway -> demo upstream, every hop a real
server on 127.0.0.1. A normal (non-admin) user signs in on Open WebUI's login page,
picks a preset of the demo model in the selector, asks for a report and reads the
answer as rendered; the links are clicked like a person would. Screenshots land in
the folder the terminal summary names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from gateway.fronts.openwebui import NOTE_START
from tests.e2e.owui.checks import (
    LINK_FILES,
    PRIVATE_NOTE,
    ask,
    assistant_messages,
    eventually,
    file_for,
    owned_artifacts,
    private_link_re,
    public_link_re,
    upstream_posts,
)
from tests.e2e.owui.conftest import OwuiChain, start_owui_chain
from tests.helpers import HOST_PATH_RE

pytestmark = pytest.mark.openwebui


async def test_public_links_open_in_the_browser(
    nursery: trio.Nursery, tmp_path: Path, openwebui: Any, browser: Any, chat_page: Any
) -> None:
    chain: OwuiChain = await start_owui_chain(nursery, tmp_path, openwebui)
    files = chain.files
    user = openwebui.user

    def scenario() -> tuple[Any, Any]:
        answer = ask(chat_page, user, "demo-public")
        return answer, chat_page.click_link("report.pdf")

    answer, opened = await browser.run(scenario)

    # the rendered answer: clickable links, every href a signed public link
    link_re = public_link_re(chain.gateway.url)
    by_text = {link.text: link for link in answer.links}
    assert {"report.pdf", "results.csv", "the chart"} <= set(by_text), answer.links
    for link in answer.links:
        assert link_re.match(link.href), link.href
        assert link.target == "_blank", link
    # a path inside a code span becomes a clickable link whose text is the file name
    # shown as code
    assert "résumé 2026.txt" in by_text, answer.links
    assert "résumé 2026.txt" in answer.code_spans, answer.code_spans
    assert "draft-notes.txt" in answer.text and "plot.png" in answer.text
    assert HOST_PATH_RE.search(answer.text) is None, answer.text
    assert HOST_PATH_RE.search(answer.html) is None
    assert "open only for you" not in answer.text  # the private-mode note

    # clicking the link downloads exactly the file on disk
    assert opened.download is not None, (
        f"no download: HTTP {opened.status} {opened.body_text[:300]}"
    )
    assert opened.download == files.report_pdf.read_bytes()
    assert opened.filename == "report.pdf"

    # and every other link, fetched without any credentials, is byte-identical too
    by_name = {p.name: p for p in files.in_root}
    expected = {"report.pdf": "report.pdf", "results.csv": "results.csv", "the chart": "plot.png"}
    async with httpx.AsyncClient(timeout=10) as client:
        for text, name in expected.items():
            r = await client.get(by_text[text].href)
            assert r.status_code == 200, (text, r.status_code, r.text[:200])
            assert r.content == by_name[name].read_bytes(), text


async def test_private_links_open_for_their_owner_only(
    nursery: trio.Nursery,
    tmp_path: Path,
    openwebui: Any,
    browser: Any,
    chat_page: Any,
    open_page: Any,
) -> None:
    """Private mode, identity from forwarded headers, ``proxy.openwebui_url`` set (the
    gateway verifies the browser's Open WebUI session): every link opens for its owner
    and for nobody else, and the note's share links make a working public link."""
    chain = await start_owui_chain(
        nursery, tmp_path, openwebui, proxy={"openwebui_url": openwebui.url}
    )
    files = chain.files
    user, other = openwebui.user, openwebui.other

    def owner_clicks() -> tuple[Any, dict[str, Any]]:
        answer = ask(chat_page, user, "demo-private")
        return answer, {text: chat_page.click_link(text) for text in LINK_FILES}

    answer, opened = await browser.run(owner_clicks)

    link_re = private_link_re(chain.gateway.url)
    shares = [link for link in answer.links if link.href.endswith("/share")]
    links = {link.text: link.href for link in answer.links if link not in shares}
    assert set(links) == set(LINK_FILES), answer.links
    for link in answer.links:
        assert link_re.match(link.href.removesuffix("/share")), link.href
    assert HOST_PATH_RE.search(answer.text) is None, answer.text
    # the owner gets each file by clicking its link, byte for byte the file on disk
    for text, got in opened.items():
        assert got.download is not None, (
            f"the owner clicked {text!r} and got HTTP {got.status}: {got.body_text[:300]}"
        )
        assert got.download == file_for(files, text).read_bytes(), text
        assert got.filename == file_for(files, text).name

    # the note is there, and true: only for this user, in this browser, and shareable
    assert PRIVATE_NOTE in answer.text and "signed in to Open WebUI" in answer.text
    assert {s.text for s in shares} == {p.name for p in files.in_root}

    def other_user_opens() -> dict[str, Any]:
        page = open_page(openwebui.url, "other-user")
        page.login(other.email, other.password)
        return {text: page.open_url(href, f"other-{text}") for text, href in links.items()}

    def share_and_open() -> tuple[str, str, Any, Any]:
        public, said = chat_page.share("report.pdf")
        fresh = open_page(openwebui.url, "no-session")  # no cookie, no key
        opened = fresh.open_url(public, "public")
        return public, said, opened, fresh.open_url(links["report.pdf"], "private")

    # a second Open WebUI user, signed in in another browser: nothing, the 404 page
    for text, got in (await browser.run(other_user_opens)).items():
        assert got.download is None, f"{other.email} downloaded {text!r}"
        assert got.status == 404, (text, got.status, got.body_text[:200])
        assert "No such file" in got.body_text, got.body_text

    public, said, public_opened, private_opened = await browser.run(share_and_open)
    assert "report.pdf" in said and "opens for anyone who has it" in said, said
    assert public_link_re(chain.gateway.url).match(public), public
    assert public_opened.download == files.report_pdf.read_bytes(), public_opened
    # while the private link still needs the session
    assert private_opened.download is None and private_opened.status == 401, private_opened
    assert "Sign in to open this file" in private_opened.body_text


async def test_private_image_renders_for_its_owner(
    nursery: trio.Nursery, tmp_path: Path, openwebui: Any, browser: Any, chat_page: Any
) -> None:
    """``![the chart](private link)``: the browser loads the ``<img>`` from the gateway
    with the Open WebUI session cookie, so the owner sees the picture, not "Image
    unavailable"."""
    chain = await start_owui_chain(
        nursery, tmp_path, openwebui, proxy={"openwebui_url": openwebui.url}
    )

    def scenario() -> tuple[Any, list[dict[str, Any]]]:
        ask(chat_page, openwebui.user, "demo-image", "Show me the chart")
        images = chat_page.content_images()
        chat_page.screenshot("image-loaded")
        return chat_page.read_answer(), images

    answer, images = await browser.run(scenario)
    assert len(images) == 1, (images, answer.html)
    assert private_link_re(chain.gateway.url).match(images[0]["src"]), images
    assert images[0]["loaded"] and images[0]["width"] == 4, images  # the demo's 4x4 PNG
    assert "Image unavailable" not in answer.text, answer.text
    assert HOST_PATH_RE.search(answer.html) is None, answer.html


async def test_background_tasks_get_file_names_only(
    nursery: trio.Nursery, tmp_path: Path, openwebui: Any, browser: Any, chat_page: Any
) -> None:
    """Open WebUI's title, tags and follow-ups (``stream: false``, a ``### Task:``
    prompt) go through the proxy too: their answers name the files, with no link, no
    markdown link syntax and no note, and nothing is minted for them."""
    chain = await start_owui_chain(nursery, tmp_path, openwebui)
    user = openwebui.user
    owner = "openwebui:" + user.id

    def scenario() -> tuple[Any, str]:
        answer = ask(chat_page, user, "demo-private")
        return answer, chat_page.chat_id()

    answer, chat_id = await browser.run(scenario)

    # tags are the last task Open WebUI runs (follow-ups, title, tags): once they are
    # stored, every task has been answered
    async def tags() -> list[str]:
        return list(await openwebui.chat_tags(user, chat_id))

    tag_names = await eventually(tags, "Open WebUI stored the chat's tags")
    title = await browser.run(chat_page.sidebar_title, chat_id)
    await browser.run(chat_page.screenshot, "title-in-sidebar")
    stored = await openwebui.chat(user, chat_id)
    follow_ups = [f for m in assistant_messages(stored) for f in m.get("followUps") or []]

    assert title == "Report in report.pdf", title  # the demo's title, the path made a name
    assert stored["chat"]["title"] == title, stored["chat"]["title"]
    shown = [title, *tag_names, *follow_ups]
    assert any("results.csv" in t for t in tag_names), tag_names
    assert any("résumé 2026.txt" in f for f in follow_ups), follow_ups
    for text in shown:
        assert "http" not in text and "](" not in text and "/v1/artifacts" not in text, text
        assert PRIVATE_NOTE not in text and "_These links" not in text, text
        assert HOST_PATH_RE.search(text) is None, text

    chats, tasks = upstream_posts(chain)
    assert len(chats) == 1, chats
    assert len(tasks) >= 3, tasks  # title, tags, follow-ups
    for body in tasks:
        assert body["stream"] is False, body
        assert body["messages"][-1]["content"].startswith("### Task:")
    # the owner's artifacts are exactly the chat answer's links: none for the tasks
    answer_ids = {
        m.group(1)
        for link in answer.links
        if (m := private_link_re(chain.gateway.url).match(link.href))
    }
    assert len(answer_ids) == len(chain.files.in_root), answer.links
    assert {a["id"] for a in await owned_artifacts(chain, owner)} == answer_ids


async def test_next_turn_gives_the_agent_its_paths_back(
    nursery: trio.Nursery, tmp_path: Path, openwebui: Any, browser: Any, chat_page: Any
) -> None:
    """Open WebUI sends the whole history again, our links and note verbatim (seen here);
    the agent must get the host paths it wrote, not links it cannot open."""
    chain = await start_owui_chain(nursery, tmp_path, openwebui)
    files = chain.files
    user = openwebui.user

    def scenario() -> None:
        ask(chat_page, user, "demo-private")
        chat_page.send("Thanks! Change the chart colours, please.")
        chat_page.wait_answer()
        chat_page.screenshot("second-turn")

    await browser.run(scenario)

    # the upstream's view of the second turn; background tasks (title, tags, follow-ups)
    # reach it too, as one user message holding Open WebUI's "### Task:" prompt
    chats, _tasks = upstream_posts(chain)
    assert len(chats) == 2, chats
    history = chats[1]["messages"]
    assert [m["role"] for m in history][-3:] == ["user", "assistant", "user"], history
    previous = history[-2]["content"]
    assert chain.gateway.url + "/v1/artifacts/" not in previous, previous
    assert NOTE_START.strip() not in previous
    assert str(files.report_pdf) in previous
