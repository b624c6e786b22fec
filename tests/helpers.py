"""Assertions shared by the end-to-end tests (leak checks over the demo's files)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from gateway.cli.demo_upstream import WINDOWS_PATH, DemoFiles

# openai-python 3.x (on httpx2) stops at [DONE] with `break`, or raises APIError on an
# error chunk, without closing its inner async generators (_iter_events, the SSE
# decoder, httpx2/httpcore2 byte iterators); trio warns when they are collected. That
# is the SDK's business, not the gateway's: ignore exactly those warnings, and collect
# garbage inside the test while the filter still applies.
SDK_WARNINGS = pytest.mark.filterwarnings(
    r"ignore:Async generator '(openai|httpx2|httpcore2)\.[\w.]+' was garbage collected"
    ":ResourceWarning"
)

#: a host-local path start, as a leak check independent of the gateway's detector
HOST_PATH_RE = re.compile(
    r"(/Users/|/home/|/root/|/tmp/|/private/|/var/|/Volumes/|/mnt/|/opt/|/srv/|/etc/"
    r"|[A-Za-z]:\\|[A-Za-z]:/(?!/)|\\\\[\w.-]+\\|file://)"
)


def json_strings(value: Any) -> Iterator[str]:
    """Every key and string inside a JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for v in value:
            yield from json_strings(v)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from json_strings(v)


def folder_parts(files: DemoFiles) -> list[str]:
    """Folder parts of every demo path that must never reach a client."""
    parts = {str(p.parent) for p in (*files.in_root, files.outside_txt)}
    # the per-test tmp folder name, and the Windows path's folders
    parts |= {files.root.parent.name, WINDOWS_PATH.rsplit("\\", 1)[0], "Desktop"}
    return sorted(parts)


def assert_no_demo_folders(text: str, files: DemoFiles) -> None:
    for part in folder_parts(files):
        assert part not in text, part
    assert HOST_PATH_RE.search(text) is None, HOST_PATH_RE.search(text)


@dataclass(frozen=True)
class RunView:
    """A journaled run as the tests look at it (read from the store)."""

    id: str
    owner: str
    link_mode: str
    status: str
    events: list[dict[str, Any]]

    @property
    def output(self) -> list[str]:
        return [e["delta"] for e in self.events if e.get("event") == "message.delta"]


def journaled_runs(store: Any) -> list[RunView]:
    """Every run in an SQLite store, oldest first (test-only: reads the table itself)."""
    with store._lock:
        rows = store._conn.execute("SELECT id, owner FROM runs ORDER BY created, rowid").fetchall()
    views = []
    for run_id, owner in rows:
        rec = store.get_run(run_id, owner)
        events = store.read_run_events(run_id, 0, 100_000)
        views.append(RunView(run_id, owner, rec.link_mode, rec.status, events))
    return views


def paths_for_links(text: str, manifest: dict[str, Any], files: DemoFiles) -> str:
    """``text`` as the gateway sends it upstream on the next turn: every link of the
    requester's own artifacts (markdown ``[name](url)`` or bare) back to its path."""
    by_name = {p.name: str(p) for p in files.in_root}
    for art in manifest["artifacts"]:
        path = by_name[art["filename"]]
        link = re.compile(r"\[[^\]\n]*\]\(" + re.escape(art["url"]) + r"\)")
        text = link.sub(lambda m, path=path: path, text)
        text = text.replace(art["url"], path)
    return text


async def tick_forever(log: list[str]) -> None:
    """Append ``"."`` to ``log`` each time the scheduler runs this task (a probe of how
    long another task goes without yielding)."""
    import trio

    while True:
        log.append(".")
        await trio.lowlevel.checkpoint()
