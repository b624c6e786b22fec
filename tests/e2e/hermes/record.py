"""Record the real Hermes agent's streams and turn them into harness cassettes.

    .venv/bin/python -m tests.e2e.hermes.record --out cassettes [--only NAME ...]

Starts a :class:`~harness.scripted_llm.ScriptedLLM` and a real Hermes API server
(``tests/e2e/hermes/install.py`` must have run) whose terminal folder is
``/tmp/hermes-recording/project`` (a fixed path, so the recorded bytes need no
editing), runs each scenario below against Hermes's own API (its streamed and
non-streamed chat, its ``/v1/responses`` and its ``/v1/runs``) and writes:

* ``OUT/NAME.yaml`` + ``OUT/NAME.expect.yaml`` for chat streams: the exact bytes
  Hermes sent, its project folder mounted onto the sandbox root, the files that
  existed before the request in ``files``, and a ``timeline`` op for every file a
  tool wrote, at the event where Hermes reports the tool ``completed`` (it sends
  ``running`` before the tool starts and ``completed`` after it returned; the event
  at which the recorder first saw the change on disk is noted beside each op);
* ``OUT/recorded/NAME.yaml`` (+ expectation) for what the gateway does not relay
  from an upstream today (Hermes's native Responses and runs streams, a
  non-streamed chat body): kept for the native relay, refused by ``replay``.

The expected texts are written from the scenario's own answer and the rewriting
rules (``docs/rewriting.md``): a file under the root that exists when the answer
ends is a link, anything else its bare name. Never from a gateway's output.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from harness import cassette as cassette_mod
from harness.scripted_llm import ScriptedLLM, ToolCall, Turn
from tests.e2e.hermes import install
from tests.e2e.hermes.agent import HERMES_MODEL, HermesAgent

BASE = Path("/tmp/hermes-recording")
PROJECT = BASE / "project"
OUTSIDE = BASE / "outside"
UPSTREAM = f"hermes-agent {install.HERMES_VERSION}"


def P(rel: str) -> str:
    """An absolute path in Hermes's project folder."""
    return str(PROJECT / rel)


def write(rel: str, content: str) -> ToolCall:
    return ToolCall("write_file", {"path": P(rel), "content": content})


@dataclass
class Scenario:
    name: str
    prompt: str
    turns: list[Turn]
    #: per tool call (in script order): the files it writes (absolute paths)
    writes: list[list[str]]
    #: the answer's text with each path mention already rendered by the rules
    expect_text: Callable[[], str] | None = None
    api: str = "chat"  # chat | chat-json | responses | runs
    front: str = "chat"  # the gateway front a chat cassette is replayed on
    comment: str = ""
    #: the previous scenario whose response this one continues (responses only)
    chain: str = ""
    names_only: list[str] = field(default_factory=list)
    #: remove the files it writes first (False: it rewrites what an earlier one wrote)
    fresh: bool = True


def link(rel: str) -> str:
    return f"[{Path(rel).name}](<link:root/{rel}>)"


REPORT_V1 = "# Q3 report\n\nRevenue up 4%.\n"
REPORT_V2 = "# Q3 report (revised)\n\nRevenue up 5%, costs down 2%.\n"

SCENARIOS = [
    Scenario(
        "hermes-chat-fresh-file",
        "Write the Q3 report (fresh file).",
        [
            Turn(tool_calls=[write("out/report.md", REPORT_V1)]),
            Turn(text=f"Done. I wrote the report to {P('out/report.md')}."),
        ],
        [[P("out/report.md")]],
        lambda: f"\n\nDone. I wrote the report to {link('out/report.md')}.",
        comment=(
            "Issue 32's incident, recorded from the real Hermes agent 0.19.0: it names the\n"
            "path in `hermes.tool.progress` (status running) before the file exists, its\n"
            "write_file tool then writes it (mode 0600), and only then does the answer name\n"
            "it. The answer's mention must be a link that downloads the file."
        ),
    ),
    Scenario(
        "hermes-chat-overwrite",
        "Revise the Q3 report (overwrite).",
        [
            Turn(tool_calls=[write("out/report.md", REPORT_V2)]),
            Turn(text=f"Updated {P('out/report.md')} with the revised figures."),
        ],
        [[P("out/report.md")]],
        lambda: f"\n\nUpdated {link('out/report.md')} with the revised figures.",
        fresh=False,
        comment=(
            "The second request in the same project: report.md exists (the first answer's\n"
            "version) when Hermes names it in tool progress; write_file then replaces it\n"
            "(a new inode). The answer's link must serve the revised bytes."
        ),
    ),
    Scenario(
        "hermes-chat-several-files",
        "Write the notes, the data and the chart at once.",
        [
            Turn(
                tool_calls=[
                    write("out/notes.md", "notes\n"),
                    write("out/data.csv", "x,y\n1,2\n"),
                    write("out/chart.svg", "<svg xmlns='http://www.w3.org/2000/svg'/>\n"),
                ]
            ),
            Turn(text=f"Wrote {P('out/notes.md')} and {P('out/data.csv')}, plus the chart."),
        ],
        [[P("out/notes.md")], [P("out/data.csv")], [P("out/chart.svg")]],
        lambda: f"\n\nWrote {link('out/notes.md')} and {link('out/data.csv')}, plus the chart.",
        comment=(
            "Three write_file calls in one model turn (Hermes runs them, reporting each in\n"
            "tool progress); the answer names two of them. The chart it forgot was still\n"
            "written by the agent: it belongs in the manifest."
        ),
    ),
    Scenario(
        "hermes-chat-space-folder",
        "Save the summary in My Reports.",
        [
            Turn(tool_calls=[write("My Reports/summary 2026.md", "summary\n")]),
            Turn(text=f"Saved it as `{P('My Reports/summary 2026.md')}`."),
        ],
        [[P("My Reports/summary 2026.md")]],
        lambda: "\n\nSaved it as [`summary 2026.md`](<link:root/My Reports/summary 2026.md>).",
        comment=(
            "A folder and a file name with spaces; the answer quotes the path in a code\n"
            "span, which the rules read whole (a filled code span becomes a link)."
        ),
    ),
    Scenario(
        "hermes-chat-terminal",
        "Make the table with the shell.",
        [
            Turn(
                tool_calls=[
                    ToolCall(
                        "terminal",
                        {"command": "mkdir -p out && printf 'a,b\\n1,2\\n' > out/table.csv"},
                    )
                ]
            ),
            Turn(text=f"The table is at {P('out/table.csv')}."),
        ],
        [[P("out/table.csv")]],
        lambda: f"\n\nThe table is at {link('out/table.csv')}.",
        comment=(
            "The terminal tool writes the file (a relative path in a shell command, run in\n"
            "Hermes's terminal folder): the progress label is the command, not the path;\n"
            "the answer names the absolute path."
        ),
    ),
    Scenario(
        "hermes-chat-outside-root",
        "Keep my notes outside the project.",
        [
            Turn(
                tool_calls=[
                    ToolCall(
                        "write_file", {"path": str(OUTSIDE / "notes.txt"), "content": "private\n"}
                    )
                ]
            ),
            Turn(text=f"Your notes are in {OUTSIDE / 'notes.txt'}."),
        ],
        [[str(OUTSIDE / "notes.txt")]],
        lambda: "\n\nYour notes are in notes.txt.",
        names_only=[str(OUTSIDE / "notes.txt")],
        comment=(
            "Hermes writes a file outside the artifact root (the project folder): it is a\n"
            "bare name everywhere, in the progress label and in the answer; no link."
        ),
    ),
    Scenario(
        "hermes-chat-long-run",
        "Do the long analysis.",
        [
            Turn(text="Starting.", tool_calls=[write("run/step1.txt", "one\n")], delay=0.05),
            Turn(
                tool_calls=[ToolCall("terminal", {"command": "printf 'two\\n' > run/step2.txt"})],
                delay=0.05,
            ),
            Turn(tool_calls=[write("run/final.md", "# Final\n")], delay=0.05),
            Turn(
                text=f"All done: {P('run/step2.txt')} and the summary {P('run/final.md')}.",
                delay=0.05,
                chunk_chars=5,
            ),
        ],
        [[P("run/step1.txt")], [P("run/step2.txt")], [P("run/final.md")]],
        lambda: (
            f"Starting.\n\nAll done: {link('run/step2.txt')} and the summary {link('run/final.md')}."
        ),
        comment=(
            "A longer run: three tool turns (write_file, terminal, write_file) with a slow\n"
            "model, text before the first tool; the answer names two of the three files."
        ),
    ),
    Scenario(
        "hermes-chat-fresh-file-via-responses",
        "Write the Q3 report (fresh file).",
        [
            Turn(tool_calls=[write("out/report.md", REPORT_V1)]),
            Turn(text=f"Done. I wrote the report to {P('out/report.md')}."),
        ],
        [[P("out/report.md")]],
        lambda: f"\n\nDone. I wrote the report to {link('out/report.md')}.",
        front="responses",
        comment=(
            "The incident through the gateway's Responses front, emulated over Hermes's\n"
            "chat stream (what the gateway calls today). Recorded as its own request."
        ),
    ),
    Scenario(
        "hermes-chat-fresh-file-via-runs",
        "Write the Q3 report (fresh file).",
        [
            Turn(tool_calls=[write("out/report.md", REPORT_V1)]),
            Turn(text=f"Done. I wrote the report to {P('out/report.md')}."),
        ],
        [[P("out/report.md")]],
        lambda: f"\n\nDone. I wrote the report to {link('out/report.md')}.",
        front="runs",
        comment=(
            "The incident through the gateway's runs front, emulated over Hermes's chat\n"
            "stream (what the gateway calls today). Recorded as its own request."
        ),
    ),
    Scenario(
        "hermes-chat-non-streamed",
        "Write the brief (not streamed).",
        [
            Turn(tool_calls=[write("out/brief.md", "brief\n")]),
            Turn(text=f"The brief is at {P('out/brief.md')}."),
        ],
        [[P("out/brief.md")]],
        api="chat-json",
        comment="Hermes's non-streamed chat answer (one JSON body) after a write_file.",
    ),
    Scenario(
        "hermes-responses-fresh-file",
        "Write the memo (responses).",
        [
            Turn(tool_calls=[write("out/memo.md", "memo v1\n")]),
            Turn(text=f"The memo is at {P('out/memo.md')}."),
        ],
        [[P("out/memo.md")]],
        api="responses",
        comment=(
            "Hermes's own /v1/responses, streamed: function_call items whose arguments hold\n"
            "the path, a function_call_output whose output holds resolved_path and\n"
            "files_modified, then the answer. Kept for the native relay (issue 34)."
        ),
    ),
    Scenario(
        "hermes-responses-chain-overwrite",
        "Now revise the memo.",
        [
            Turn(tool_calls=[write("out/memo.md", "memo v2\n")]),
            Turn(text=f"Revised {P('out/memo.md')}."),
        ],
        [[P("out/memo.md")]],
        api="responses",
        chain="hermes-responses-fresh-file",
        fresh=False,
        comment=(
            "The next turn of hermes-responses-fresh-file through previous_response_id\n"
            "(Hermes keeps the conversation): the memo is rewritten."
        ),
    ),
    Scenario(
        "hermes-runs-fresh-file",
        "Write the plan (runs).",
        [
            Turn(tool_calls=[write("out/plan.md", "plan\n")]),
            Turn(text=f"The plan is at {P('out/plan.md')}."),
        ],
        [[P("out/plan.md")]],
        api="runs",
        comment=(
            "Hermes's own /v1/runs: 202 {run_id, status}, then GET /v1/runs/{id}/events\n"
            "(data-only events: tool.started with the path in preview, tool.completed,\n"
            "message.delta, run.completed). Kept for the native relay (issue 34)."
        ),
    ),
]


# -- recording ---------------------------------------------------------------------------


@dataclass
class Recording:
    request: dict[str, Any]
    status: int
    headers: dict[str, str]
    body: bytes
    #: (event index, path) when the recorder first saw a watched file change
    observed: list[tuple[int, str]] = field(default_factory=list)
    uri: str = ""
    method: str = "POST"
    extra: list[dict[str, Any]] = field(default_factory=list)  # earlier interactions
    #: the ids the scripted model gave its tool calls, in script order
    call_ids: list[str] = field(default_factory=list)


def _state(paths: list[str]) -> dict[str, tuple[int, int, int] | None]:
    out: dict[str, tuple[int, int, int] | None] = {}
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            out[p] = None
        else:
            out[p] = (st.st_ino, st.st_size, st.st_mtime_ns)
    return out


def _stream(
    client: httpx.Client, method: str, url: str, body: dict[str, Any] | None, watch: list[str]
) -> Recording:
    before = _state(watch)
    rec = Recording(body or {}, 0, {}, b"", uri=url, method=method)
    raw = bytearray()
    events = 0
    with client.stream(method, url, json=body) as r:
        rec.status = r.status_code
        rec.headers = {k: v for k, v in r.headers.items() if k.lower().startswith("x-hermes")}
        rec.headers["Content-Type"] = r.headers.get("content-type", "")
        for chunk in r.iter_raw():
            raw += chunk
            done = raw.count(b"\n\n")
            while events < done:
                now = _state(watch)
                for p in watch:
                    if now[p] != before[p] and all(q != p for _, q in rec.observed):
                        rec.observed.append((events, p))
                events += 1
    rec.body = bytes(raw)
    return rec


def record(s: Scenario, agent: HermesAgent, llm: ScriptedLLM, ids: dict[str, str]) -> Recording:
    llm.script(s.turns)
    watch = [p for files in s.writes for p in files]
    with httpx.Client(
        base_url=agent.url,
        headers={"Authorization": f"Bearer {agent.key}", "Accept-Encoding": "identity"},
        timeout=httpx.Timeout(30, read=300),
    ) as client:
        messages = [{"role": "user", "content": s.prompt}]
        if s.api in ("chat", "chat-json"):
            stream = s.api == "chat"
            body = {"model": HERMES_MODEL, "stream": stream, "messages": messages}
            rec = _stream(client, "POST", "/v1/chat/completions", body, watch)
        elif s.api == "responses":
            body = {"model": HERMES_MODEL, "input": s.prompt, "stream": True}
            if s.chain:
                body["previous_response_id"] = ids[s.chain]
            rec = _stream(client, "POST", "/v1/responses", body, watch)
            for line in rec.body.decode().splitlines():
                if line.startswith("data:") and '"response.completed"' in line:
                    ids[s.name] = json.loads(line[5:])["response"]["id"]
        else:
            body = {"model": HERMES_MODEL, "input": s.prompt}
            started = client.post("/v1/runs", json=body)
            run_id = started.json()["run_id"]
            rec = _stream(client, "GET", f"/v1/runs/{run_id}/events", None, watch)
            rec.extra.append(
                {
                    "method": "POST",
                    "uri": "/v1/runs",
                    "request": body,
                    "status": started.status_code,
                    "body": started.text,
                }
            )
    if llm.turns_left:
        raise RuntimeError(f"{s.name}: Hermes asked for fewer turns than scripted")
    turns = iter(s.turns)
    for number, req in enumerate(llm.requests, start=1):  # ids: call_<request no>_<index>
        if req.get("tools"):
            rec.call_ids += [f"call_{number}_{i}" for i in range(len(next(turns).tool_calls))]
    return rec


# -- cassettes ---------------------------------------------------------------------------


def _rel(path: str) -> str | None:
    try:
        return "root/" + str(Path(path).relative_to(PROJECT))
    except ValueError:
        return None


def _done_event(events: list[str], call_id: str, order: int, api: str) -> int:
    """Index of the event that reports tool call ``call_id`` (the ``order``-th) done.

    Chat: ``hermes.tool.progress`` with its ``toolCallId`` and ``completed``;
    Responses: the first ``function_call_output`` item of the call; runs: its events
    carry no call id, so the ``order``-th ``tool.completed``.
    """
    done = 0
    for i, ev in enumerate(events):
        if api == "runs" and '"tool.completed"' in ev:
            if done == order:
                return i
            done += 1
        elif call_id in ev and (
            (api == "chat" and '"status": "completed"' in ev)
            or (api == "responses" and "function_call_output" in ev)
        ):
            return i
    raise RuntimeError(f"no completion event for {call_id}")


def timeline_for(
    s: Scenario, rec: Recording, before: dict[str, str], after: dict[str, str]
) -> list[dict[str, Any]]:
    events = cassette_mod.split_events(rec.body.decode())
    api = "chat" if s.api.startswith("chat") else s.api
    ops: list[dict[str, Any]] = []
    for order, (call_id, files) in enumerate(zip(rec.call_ids, s.writes, strict=True)):
        for path in files:
            rel = _rel(path)
            if rel is None or before.get(path) == after.get(path):
                continue
            at = _done_event(events, call_id, order, api) if s.api != "chat-json" else 0
            ops.append(
                {
                    "at_event": at,
                    "op": "replace",
                    "path": rel,
                    "content": after[path],
                    "mode": 0o600,
                }
            )
    return sorted(ops, key=lambda o: o["at_event"])


def _read(paths: list[str]) -> dict[str, str]:
    out = {}
    for p in paths:
        with contextlib.suppress(OSError):
            out[p] = Path(p).read_text()
    return out


def write_cassette(
    out: Path, s: Scenario, rec: Recording, before: dict[str, str], after: dict[str, str]
) -> Path:
    native = s.api != "chat"
    folder = out / "recorded" if native else out
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{s.name}.yaml"
    api = {"chat": "chat", "chat-json": "chat", "responses": "responses", "runs": "runs"}[s.api]
    origin = "http://127.0.0.1:8641"
    data: dict[str, Any] = {"version": 1, "source": {"api": api, "upstream": UPSTREAM}}
    inters = []
    for extra in rec.extra:
        inters.append(
            {
                "request": {
                    "method": extra["method"],
                    "uri": origin + extra["uri"],
                    "body": json.dumps(extra["request"]),
                    "headers": {"Content-Type": ["application/json"]},
                },
                "response": {
                    "status": {"code": extra["status"], "message": "Accepted"},
                    "headers": {"Content-Type": ["application/json"]},
                    "body": {"string": extra["body"]},
                },
            }
        )
    inters.append(
        {
            "request": {
                "method": rec.method,
                "uri": origin + rec.uri,
                "body": json.dumps(rec.request, ensure_ascii=False) if rec.request else "",
                "headers": {"Content-Type": ["application/json"]},
            },
            "response": {
                "status": {"code": rec.status, "message": "OK"},
                "headers": {k: [v] for k, v in rec.headers.items()},
                "body": {"string": rec.body.decode()},
            },
        }
    )
    if rec.extra:  # runs: the events are what a replay reads first
        inters.reverse()
    data["interactions"] = inters
    path.write_text(cassette_mod.SSEYamlSerializer.serialize(data), encoding="utf-8")
    ops = timeline_for(s, rec, before, after)
    exp: dict[str, Any] = {
        "front": s.front,
        "principal": "alice",
        "link_mode": None,
        "mode_via": "default",
        "default_link_mode": "private",
        "mounts": {str(PROJECT): "root"},
        "files": {r: before[p] for p in before if (r := _rel(p)) is not None},
    }
    if ops:
        exp["timeline"] = ops
    written = sorted({o["path"] for o in ops} | {r for p in after if (r := _rel(p))})
    expect: dict[str, Any] = {}
    if s.expect_text is not None:
        expect["text"] = s.expect_text()
    expect["artifacts"] = written
    if s.names_only:
        expect["names_only"] = s.names_only
    expect["never"] = [str(BASE)]
    if s.api == "chat":  # relayed on the chat front only (none on Responses and runs)
        expect["named_events"] = (
            []
            if s.front != "chat"
            else [
                "hermes.tool.progress"
                for ev in cassette_mod.split_events(rec.body.decode())
                if ev.startswith("event: hermes.tool.progress")
            ]
        )
    exp["expect"] = expect
    seen = ", ".join(f"{_rel(p) or Path(p).name} at event {i}" for i, p in rec.observed)
    header = "\n".join(f"# {line}" for line in s.comment.splitlines())
    note = (
        f"\n# Recorded from {UPSTREAM} by tests/e2e/hermes/record.py; the recorder first saw on"
        f"\n# disk: {seen or 'nothing'}."
    )
    if native:
        note += "\n# Not replayed: the gateway calls its upstream's chat completions only."
    exp_path = path.with_name(f"{s.name}.expect.yaml")
    text = cassette_mod.dump_yaml(exp)
    text = text.replace("mode: 384\n", "mode: 0600  # rw------- (as Hermes writes files)\n")
    exp_path.write_text(header + note + "\n" + text, encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--out", default="cassettes")
    ap.add_argument("--only", action="append", default=[])
    args = ap.parse_args(argv)
    if not install.hermes_installed():
        print("hermes-agent is not installed: python3 tests/e2e/hermes/install.py", file=sys.stderr)
        return 2
    shutil.rmtree(BASE, ignore_errors=True)
    OUTSIDE.mkdir(parents=True)
    llm = ScriptedLLM.start()
    agent = HermesAgent(BASE, llm.base_url)
    ids: dict[str, str] = {}
    try:
        print(f"Hermes started in {agent.start():.1f} s")
        for s in SCENARIOS:
            wanted = s.name in args.only or any(
                o.chain == s.name for o in SCENARIOS if o.name in args.only
            )
            if args.only and not wanted:
                continue
            watch = [p for files in s.writes for p in files]
            if s.fresh:
                for p in watch:
                    Path(p).unlink(missing_ok=True)
            before = _read(watch)
            t0 = time.monotonic()
            rec = record(s, agent, llm, ids)
            after = _read(watch)
            path = write_cassette(Path(args.out), s, rec, before, after)
            print(f"{s.name}: {time.monotonic() - t0:.1f} s, {len(rec.body)} bytes -> {path}")
    finally:
        agent.stop()
        llm.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
