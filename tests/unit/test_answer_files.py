"""The files of one answer, through the real pipeline and link service (no HTTP).

What the real Hermes agent does (../shared/STACK-NOTES.md): it names the file in a
``hermes.tool.progress`` event before its ``write_file`` tool writes it (atomically:
a temporary file renamed over the target), then the answer names it again. Each case
is played with file-system steps between upstream events, the events fed one per read
and all at once between two steps; the client must get a link at the mention after the
file appeared, the download must serve the bytes the answer left, and the manifest must
list every file the agent wrote, even one the text never names.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.core.errors import StoreError
from gateway.core.events import Named, Text
from gateway.core.sse import SSEEvent
from gateway.links.artifacts import ArtifactService
from gateway.links.signing import Signer
from gateway.store import SQLiteStore
from gateway.stream.pipeline import ChatPipeline
from tests.conftest import make_config

Step = SSEEvent | Callable[[], None]


def delta(text: str) -> SSEEvent:
    return SSEEvent(
        json.dumps(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "created": 1_700_000_000,
                "model": "hermes-agent",
                "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
            }
        )
    )


def progress(tool: str, label: str, status: str = "running") -> SSEEvent:
    data = {"tool": tool, "emoji": "✍️", "label": label, "toolCallId": "call_1", "status": status}
    return SSEEvent(json.dumps(data), event="hermes.tool.progress")


def write_atomically(path: Path, data: str) -> Callable[[], None]:
    """What Hermes's write_file does: a temporary file in the folder, renamed over."""

    def op() -> None:
        tmp = path.parent / ".hermes-tmp.x1"
        tmp.write_text(data)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)

    return op


@pytest.fixture
def svc(tmp_path: Path) -> ArtifactService:
    config = make_config(tmp_path, "http://upstream.invalid/v1")
    store = SQLiteStore(tmp_path / "state" / "gateway.sqlite3")
    return ArtifactService(config, store, Signer.generate())


async def play(svc: ArtifactService, steps: list[Step], *, per_read: bool) -> dict[str, Any]:
    """Feed the events (one per read, or all between two file steps in one), run the
    file steps in their places; the text, the named events and the manifest."""
    pipeline = ChatPipeline(svc.for_response("alice", "private"))
    text: list[str] = []
    named: list[dict[str, Any]] = []
    pending: list[SSEEvent] = []

    async def feed() -> None:
        groups = [[e] for e in pending] if per_read else [pending[:]]
        for group in groups:
            step = await pipeline.feed(group)
            assert step.error is None
            for ev in step.events:
                if isinstance(ev, Text):
                    text.append(ev.text)
                elif isinstance(ev, Named):
                    named.append(ev.data)
        pending.clear()

    for s in steps:
        if isinstance(s, SSEEvent):
            pending.append(s)
        else:
            await feed()
            s()
    await feed()
    for ev in await pipeline.finish():
        if isinstance(ev, Text):
            text.append(ev.text)
    return {"text": "".join(text), "named": named, "manifest": pipeline.manifest()}


async def download(svc: ArtifactService, url: str) -> bytes:
    rec = await svc.authorize_owner(url.rsplit("/", 1)[1], "alice")
    fd = await svc.open_verified(rec)
    try:
        return os.pread(fd, rec.size + 1, 0)
    finally:
        os.close(fd)


@pytest.mark.parametrize("per_read", [True, False])
async def test_a_file_named_before_it_is_written_reaches_its_owner(
    svc: ArtifactService, tmp_path: Path, per_read: bool
) -> None:
    root = tmp_path / "artifacts"
    report = root / "project" / "report.md"
    report.parent.mkdir()
    steps: list[Step] = [
        progress("write_file", str(report)),
        write_atomically(report, "# Q3\n"),
        progress("write_file", str(report), "completed"),
        delta("\n\nDone. I wrote the report to "),
        delta(f"{report}."),
    ]
    out = await play(svc, steps, per_read=per_read)
    (entry,) = out["manifest"]["artifacts"]
    assert out["text"] == f"\n\nDone. I wrote the report to [report.md]({entry['url']})."
    assert out["named"][0]["label"] == "report.md"  # named before it existed: its name
    assert await download(svc, entry["url"]) == b"# Q3\n"
    assert str(tmp_path) not in json.dumps(out)


@pytest.mark.parametrize("per_read", [True, False])
async def test_an_overwritten_file_serves_the_bytes_the_answer_left(
    svc: ArtifactService, tmp_path: Path, per_read: bool
) -> None:
    """The second request in the same project: the file exists when the tool starts
    (its link goes out then), the tool rewrites it, the answer names it again."""
    report = tmp_path / "artifacts" / "report.md"
    report.write_text("first version")
    steps: list[Step] = [
        progress("write_file", str(report)),
        write_atomically(report, "second, longer version"),
        delta(f"Updated {report} as asked."),
    ]
    out = await play(svc, steps, per_read=per_read)
    (entry,) = out["manifest"]["artifacts"]
    assert out["named"][0]["label"] == entry["url"]  # the same link at both mentions
    assert out["text"] == f"Updated [report.md]({entry['url']}) as asked."
    assert entry["bytes"] == len("second, longer version")
    assert await download(svc, entry["url"]) == b"second, longer version"


async def test_files_the_agent_wrote_join_the_manifest_without_a_mention(
    svc: ArtifactService, tmp_path: Path
) -> None:
    """The text forgets them: the tool events' files are linked when the answer ends
    (only servable files in the owner's roots). A read tool's label mentions its file
    like any text: one that exists by the end is linked too (a mention is enough)."""
    root = tmp_path / "artifacts"
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("not in a root")
    steps: list[Step] = [
        progress("write_file", str(root / "a.csv")),
        progress("patch", str(root / "b.py")),
        progress("read_file", str(root / "read.txt")),  # mentioned, appears later
        progress("write_file", str(outside)),
        progress("write_file", str(root / "never-written.txt")),
        write_atomically(root / "a.csv", "x,y\n"),
        write_atomically(root / "b.py", "print(1)\n"),
        write_atomically(root / "read.txt", "appeared later"),
        delta("All done."),
    ]
    out = await play(svc, steps, per_read=True)
    assert out["text"] == "All done."
    files = {a["filename"]: a for a in out["manifest"]["artifacts"]}
    assert sorted(files) == ["a.csv", "b.py", "read.txt"]
    assert await download(svc, files["b.py"]["url"]) == b"print(1)\n"


async def test_a_store_failure_mid_stream_flushes_the_held_text_as_names(
    svc: ArtifactService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store locked while a path waits for its link: the text still arrives (all
    that came in the read), the path as its name, then the stream ends with the error."""
    report = tmp_path / "artifacts" / "report.md"
    report.write_text("r")

    def down(*args: Any) -> None:
        raise StoreError("The state store is unavailable.", code="store_unavailable")

    monkeypatch.setattr(svc.store, "save_artifacts", down)
    pipeline = ChatPipeline(svc.for_response("alice", "private"))
    step = await pipeline.feed([delta("Report: "), delta(f"{report} done"), delta(" and more")])
    assert step.error is not None and step.error.code == "store_unavailable"
    events = step.events + await pipeline.finish(failed=True)
    text = "".join(e.text for e in events if isinstance(e, Text))
    assert text == "Report: report.md done and more"
    assert pipeline.manifest()["artifacts"] == []


@pytest.mark.parametrize("per_read", [True, False])
async def test_a_file_named_only_before_it_exists_joins_the_manifest(
    svc: ArtifactService, tmp_path: Path, per_read: bool
) -> None:
    """ "I'll save the table to <path>", then a tool writes it, and the text never names
    it again (a model's usual answer): the mention keeps the name, the manifest gets
    the file (red team: no link anywhere)."""
    table = tmp_path / "artifacts" / "table.csv"
    steps: list[Step] = [
        delta(f"I'll save the table to {table} now."),
        write_atomically(table, "a,b\n"),
        delta(" Done."),
    ]
    out = await play(svc, steps, per_read=per_read)
    assert out["text"] == "I'll save the table to table.csv now. Done."
    (entry,) = out["manifest"]["artifacts"]
    assert entry["filename"] == "table.csv"
    assert await download(svc, entry["url"]) == b"a,b\n"


async def test_a_link_revoked_mid_answer_is_left_out_of_the_manifest(
    svc: ArtifactService, tmp_path: Path
) -> None:
    report = tmp_path / "artifacts" / "report.md"
    report.write_text("r")
    keep = tmp_path / "artifacts" / "keep.md"
    keep.write_text("k")
    pipeline = ChatPipeline(svc.for_response("alice", "private"))
    step = await pipeline.feed([delta(f"See {report} and {keep} here.")])
    urls = [e.text for e in step.events if isinstance(e, Text)]
    first = pipeline.manifest()["artifacts"][0]
    assert first["filename"] == "report.md" and first["url"] in "".join(urls)
    assert svc.store.revoke_artifact(first["url"].rsplit("/", 1)[1], "alice")
    await pipeline.finish()
    assert [a["filename"] for a in pipeline.manifest()["artifacts"]] == ["keep.md"]


async def test_an_adopted_answer_keeps_the_links_its_client_has(
    svc: ArtifactService, tmp_path: Path
) -> None:
    """Another instance takes the answer over (a run adopted after its instance
    stopped): a file linked before keeps that link, bound to the file as the answer
    leaves it, even when the rest of the answer never names it."""
    doc = tmp_path / "artifacts" / "doc.md"
    doc.write_text("v1")
    first = ChatPipeline(svc.for_response("alice", "private"))
    await first.feed([delta(f"Draft at {doc} now.")])
    (before,) = first.manifest()["artifacts"]  # the instance stops here: no seal
    doc.write_text("v2, the final one")
    links = svc.for_response("alice", "private")
    rid = before["url"].rsplit("/", 1)[1]
    links.adopt([r for r in [svc.store.get_artifact(rid)] if r is not None])
    again = ChatPipeline(links)
    step = await again.feed([delta(f"Final: {doc}."), delta(" The end.")])
    text = "".join(e.text for e in step.events + await again.finish() if isinstance(e, Text))
    assert text == f"Final: [doc.md]({before['url']}). The end."
    assert [a["url"] for a in again.manifest()["artifacts"]] == [before["url"]]
    assert await download(svc, before["url"]) == b"v2, the final one"
    quiet = svc.for_response("alice", "private")  # adopted and never named again
    quiet.adopt([r for r in [svc.store.get_artifact(rid)] if r is not None])
    doc.write_text("v3")
    await quiet.seal()
    assert await download(svc, before["url"]) == b"v3"
    bob = svc.for_response("bob", "private")  # another owner's record is never adopted
    bob.adopt([r for r in [svc.store.get_artifact(rid)] if r is not None])
    assert bob.manifest()["artifacts"] == []
