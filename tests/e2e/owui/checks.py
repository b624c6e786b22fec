"""What the browser tests check again and again (no fixtures here; plain helpers)."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import trio

from gateway.cli.demo_upstream import DemoFiles, is_task_request
from tests.conftest import PROXY_KEY
from tests.e2e.owui.conftest import OwuiChain

T = TypeVar("T")

PROMPT = "Make me a report"
#: the demo answer's links by their text, and the file each one names
LINK_FILES = {
    "report.pdf": "report_pdf",
    "results.csv": "results_csv",
    "the chart": "plot_png",
    "résumé 2026.txt": "resume_txt",
}
PRIVATE_NOTE = "open only for you"


def public_link_re(origin: str) -> re.Pattern[str]:
    return re.compile(re.escape(origin) + r"/v1/artifacts/[\w-]+\?exp=\d+&sig=[\w.-]+$")


def private_link_re(origin: str) -> re.Pattern[str]:
    return re.compile(re.escape(origin) + r"/v1/artifacts/([\w-]+)$")


def file_for(files: DemoFiles, link_text: str) -> Path:
    path: Path = getattr(files, LINK_FILES[link_text])
    return path


def ask(page: Any, user: Any, model: str, prompt: str = PROMPT) -> Any:
    """Sign in, pick ``model``, send the prompt, wait for the answer (browser thread)."""
    page.login(user.email, user.password)
    page.new_chat(model)
    page.send(prompt)
    answer = page.wait_answer()
    page.screenshot(f"{model}-answer")
    return answer


async def eventually(
    probe: Callable[[], Awaitable[T]], what: str, within: float = 60.0, every: float = 0.2
) -> T:
    """``await probe()`` until it gives something truthy; fail with ``what`` after
    ``within`` seconds (a condition polled with a deadline, not a sleep that hopes)."""
    deadline = trio.current_time() + within
    while True:
        value = await probe()
        if value:
            return value
        if trio.current_time() > deadline:
            raise AssertionError(f"not within {within:.0f} s: {what} (last: {value!r})")
        await trio.sleep(every)


async def owned_artifacts(chain: OwuiChain, owner: str) -> list[dict[str, Any]]:
    """The gateway's artifact list for ``owner`` (the proxy key asserting that owner)."""
    async with httpx.AsyncClient(base_url=chain.gateway.url, timeout=10) as c:
        r = await c.get(
            "/v1/artifacts",
            headers={"Authorization": f"Bearer {PROXY_KEY}", "X-Gateway-Owner": owner},
        )
    r.raise_for_status()
    data: list[dict[str, Any]] = r.json()["data"]
    return data


def upstream_posts(chain: OwuiChain) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The chat bodies the demo upstream received: (chat turns, background tasks)."""
    bodies = [e["body"] for e in chain.upstream.app.demo_log if e["method"] == "POST"]
    tasks = [b for b in bodies if is_task_request(b)]
    return [b for b in bodies if not is_task_request(b)], tasks


def assistant_files(stored_chat: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """``files`` of each assistant message of a chat as Open WebUI stored it."""
    history = stored_chat["chat"]["history"]["messages"]
    return [m.get("files") or [] for m in history.values() if m.get("role") == "assistant"]


def assistant_messages(stored_chat: dict[str, Any]) -> list[dict[str, Any]]:
    history = stored_chat["chat"]["history"]["messages"]
    return [m for m in history.values() if m.get("role") == "assistant"]


async def check_stored_files(
    owui: Any, owner: Any, other: Any, entries: list[dict[str, Any]], files: DemoFiles
) -> None:
    """Each stored file is the file on disk for its owner, and nothing for ``other``."""
    by_name = {p.name: p for p in files.in_root}
    assert sorted(e["name"] for e in entries) == sorted(by_name), entries
    assert len({e["id"] for e in entries}) == len(entries), entries
    for entry in entries:
        assert entry["url"] == f"/api/v1/files/{entry['id']}/content", entry
        mine = await owui.file_content(owner, entry["id"])
        assert mine.status_code == 200, (entry, mine.status_code)
        assert mine.content == by_name[entry["name"]].read_bytes(), entry["name"]
        theirs = await owui.file_content(other, entry["id"])
        assert theirs.status_code in (403, 404), (entry, theirs.status_code)
        assert theirs.content != mine.content
