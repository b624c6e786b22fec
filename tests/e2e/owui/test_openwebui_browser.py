"""A real Open WebUI 0.12.4 in a real headless Chromium, in front of the whole chain.

Browser -> Open WebUI -> runs proxy -> gateway -> demo upstream, every hop a real
server on 127.0.0.1. A normal (non-admin) user signs in on Open WebUI's login page,
picks a preset of the demo model in the selector, asks for a report and reads the
answer as rendered; the links are clicked like a person would. Screenshots land in
the folder the terminal summary names.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from gateway.fronts.openwebui import NOTE_START
from tests.e2e.owui.conftest import OwuiChain, start_owui_chain
from tests.helpers import HOST_PATH_RE

pytestmark = pytest.mark.openwebui

PROMPT = "Make me a report"


def public_link_re(origin: str) -> re.Pattern[str]:
    return re.compile(re.escape(origin) + r"/v1/artifacts/[\w-]+\?exp=\d+&sig=[\w.-]+$")


def private_link_re(origin: str) -> re.Pattern[str]:
    return re.compile(re.escape(origin) + r"/v1/artifacts/[\w-]+$")


def ask(page: Any, user: Any, model: str) -> Any:
    """Sign in, pick ``model``, send the prompt, wait for the answer (browser thread)."""
    page.login(user.email, user.password)
    page.new_chat(model)
    page.send(PROMPT)
    answer = page.wait_answer()
    page.screenshot(f"{model}-answer")
    return answer


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


async def test_private_link_opens_for_its_owner(
    nursery: trio.Nursery, tmp_path: Path, openwebui: Any, browser: Any, chat_page: Any
) -> None:
    # the gateway verifies the browser's Open WebUI session against this origin
    chain = await start_owui_chain(
        nursery, tmp_path, openwebui, proxy={"openwebui_url": openwebui.url}
    )
    files = chain.files
    user = openwebui.user

    def scenario() -> tuple[Any, Any]:
        answer = ask(chat_page, user, "demo-private")
        return answer, chat_page.click_link("report.pdf")

    answer, opened = await browser.run(scenario)

    link_re = private_link_re(chain.gateway.url)
    assert answer.links, answer.text
    shares = [link for link in answer.links if link.href.endswith("/share")]
    for link in answer.links:
        assert link_re.match(link.href.removesuffix("/share")), link.href
    # the note is true and its share links are the way to make a public one
    assert "open only for you" in answer.text and "signed in to Open WebUI" in answer.text
    assert {s.text for s in shares} == {"report.pdf", "results.csv", "plot.png", "résumé 2026.txt"}
    # what the owner sees when clicking the link in Open WebUI: the file
    assert opened.download is not None, (
        f"the owner clicked a private link and got HTTP {opened.status}: {opened.body_text[:300]}"
    )
    assert opened.download == files.report_pdf.read_bytes()


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
    bodies = [e["body"] for e in chain.upstream.app.demo_log if e["method"] == "POST"]
    chats = [b for b in bodies if not str(b["messages"][-1]["content"]).startswith("### Task:")]
    assert len(chats) == 2, bodies
    history = chats[1]["messages"]
    assert [m["role"] for m in history][-3:] == ["user", "assistant", "user"], history
    previous = history[-2]["content"]
    assert chain.gateway.url + "/v1/artifacts/" not in previous, previous
    assert NOTE_START.strip() not in previous
    assert str(files.report_pdf) in previous
