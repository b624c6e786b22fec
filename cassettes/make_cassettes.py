"""Rebuild the harness cassettes: ``python cassettes/make_cassettes.py [NAME ...]``.

The YAML files beside this script are the committed source of truth (a recorded or
captured incident is committed as YAML and never regenerated); this script shows
the intent behind the hand-built ones and rebuilds them byte for byte. Each entry
says what upstream stream it imitates and why the expected text is what
``docs/rewriting.md`` says it must be (the expected text was derived from those
rules, not pasted from the gateway's output).

Conventions used below:

* upstream bodies are chat-completion SSE as an agent backend streams them
  (``chat.completion.chunk`` objects, one compact JSON ``data:`` line each);
* the agent's artifact directory ``/Users/alice/.agent/artifacts`` (or
  ``/workspace`` for a containerised agent, ``/home/bob/.hermes/artifacts`` for bob)
  is mounted onto the sandbox's artifact root ``root``; ``files`` are created there;
* in ``expect.text`` a link is written ``<link:FILE>`` (FILE relative to the sandbox);
* ``names_only`` lists paths that must show as their file name alone (their folder
  part is then checked never to reach the client); ``never`` lists further strings
  that must not appear in any byte sent to the client.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from gateway.sse import DONE, encode_json
from harness.cassette import write

HERE = Path(__file__).resolve().parent
ALICE_ARTS = "/Users/alice/.agent/artifacts"
PRIVATE_NOTE = (
    "\n\n_These download links open only for you. "
    "Ask for a public link if you want to share a file._"
)


# -- building blocks -------------------------------------------------------------------


class Stream:
    """Builds one upstream chat-completion SSE body."""

    def __init__(
        self,
        cid: str = "chatcmpl-9f2kQ7xLm3",
        model: str = "hermes-agent",
        created: int = 1767960000,
        *,
        newline: str = "\n",
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.base = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            **(extra or {}),
        }
        self.parts: list[str] = []
        self.newline = newline

    def raw(self, text: str) -> Stream:
        """Append raw SSE text (comments, named events, cut events)."""
        self.parts.append(text)
        return self

    def chunk(self, delta: dict[str, Any], finish: str | None = None, **top: Any) -> Stream:
        obj = {
            **self.base,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **top,
        }
        return self.raw(encode_json(obj).decode())

    def role(self, **delta: Any) -> Stream:
        return self.chunk({"role": "assistant", "content": "", **delta})

    def say(self, *texts: str) -> Stream:
        for t in texts:
            self.chunk({"content": t})
        return self

    def finish(self, reason: str = "stop", **top: Any) -> Stream:
        return self.chunk({}, reason, **top)

    def event(self, name: str, data: dict[str, Any]) -> Stream:
        return self.raw(encode_json(data, event=name).decode())

    def error(self, message: str, type_: str, code: str | None) -> Stream:
        return self.raw(
            encode_json({"error": {"message": message, "type": type_, "code": code}}).decode()
        )

    def done(self) -> Stream:
        return self.raw(DONE.decode())

    def body(self) -> str:
        text = "".join(self.parts)
        return text.replace("\n", "\r\n") if self.newline == "\r\n" else text


class _Dumper(yaml.SafeDumper):  # type: ignore[misc]
    pass


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    # one line each; single quotes keep backslashes and double quotes literal,
    # double quotes (with escapes) only for newlines and control characters
    if not _needs_quotes(data):
        style = None
    elif data.isprintable():
        style = "'"
    else:
        style = '"'
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


def _needs_quotes(s: str) -> bool:
    return any(c in s for c in "\\\n\"'`<>[]{}:#&*!|%@,") or s != s.strip() or s in ("", "null")


_Dumper.add_representer(str, _str)


def expectation(comment: str, fields: dict[str, Any], expect: dict[str, Any]) -> str:
    lines = ["# " + line if line else "#" for line in comment.strip().splitlines()]
    data = {**fields, "expect": expect}
    dumped: str = yaml.dump(data, Dumper=_Dumper, allow_unicode=True, sort_keys=False, width=1000)
    return "\n".join(lines) + "\n" + dumped


CASSETTES: dict[str, Callable[[], tuple[dict[str, Any], str, int, str, str]]] = {}


def cassette(fn: Callable[[], tuple[dict[str, Any], str, int, str, str]]) -> Callable[[], Any]:
    CASSETTES[fn.__name__.replace("_", "-")] = fn
    return fn


def req(content: str, model: str = "hermes-agent", **extra: Any) -> dict[str, Any]:
    return {
        "model": model,
        "stream": True,
        "messages": [{"role": "user", "content": content}],
        **extra,
    }


ALICE = {
    "front": "chat",
    "principal": "alice",
    "link_mode": None,
    "mode_via": "default",
    "default_link_mode": "private",
    "mounts": {ALICE_ARTS: "root"},
}

# Each builder returns (request body, SSE body, HTTP status, content type, expectation YAML).
Built = tuple[dict[str, Any], str, int, str, str]
SSE = "text/event-stream"


# -- the cassettes ---------------------------------------------------------------------


@cassette
def posix_windows_split() -> Built:
    s = Stream("chatcmpl-rec", "agent", 1790000000)
    s.role().say(
        "Your report is at /Users/alice/.agent/arti",
        "facts/out/report.pdf. The chart went to C:\\Users\\",
        "bob\\Desktop\\chart.png and ",
        "a draft at /Users/alice/Desktop/secret-draft.txt.",
    ).finish().done()
    exp = expectation(
        "A POSIX and a Windows path split across deltas; one file exists under the root.",
        {**ALICE, "files": {"root/out/report.pdf": "%PDF-1.4 quarterly report"}},
        {
            "text": "Your report is at [report.pdf](<link:root/out/report.pdf>). The chart went to chart.png and a draft at secret-draft.txt.",
            "names_only": [
                "C:\\Users\\bob\\Desktop\\chart.png",
                "/Users/alice/Desktop/secret-draft.txt",
            ],
            "never": ["/Users/alice", "C:\\Users", ".agent"],
        },
    )
    # the original cassette was written with the chunk helper's key order (content first)
    body = s.body().replace(
        '{"role":"assistant","content":""}', '{"content":"","role":"assistant"}'
    )
    return (
        {
            "model": "agent",
            "stream": True,
            "messages": [{"role": "user", "content": "make the report"}],
        },
        body,
        200,
        SSE,
        exp,
    )


@cassette
def url_drive_lookalikes() -> Built:
    s = Stream()
    s.role().say(
        "The upload docs live at https://example.com/C:/x and the mirror at ",
        "http://files.example.org/home/alice/x, so keep the ratio 3:1 and note ",
        "that drive C: is nearly full. Meetings at 10:30, the API at ",
        "http://[::1]:8080/v1/models and/or /v1/chat/completions, 1/2 of the time. ",
        "Your notes are in C",
        ":/Users/bob/Documents/notes.txt.",
    ).finish().done()
    exp = expectation(
        """
URLs and colon text next to drive-like letters must not be rewritten: `https://` is
never a drive path, `/C:/x` inside a URL follows a `/` (no boundary), `/home/alice/x`
inside a URL follows a letter, `ratio 3:1` and `10:30` have no drive letter,
`drive C: is` has no separator after the colon, `/v1/...`, `and/or` and `1/2` are not
host roots. The one real path (`C:/Users/bob/Documents/notes.txt`, cut between `C`
and `:/Users`, which forces the gateway to hold the lone `C`) becomes its name, and
the full stop goes back to the sentence.
""",
        {**ALICE, "files": {}},
        {
            "text": (
                "The upload docs live at https://example.com/C:/x and the mirror at "
                "http://files.example.org/home/alice/x, so keep the ratio 3:1 and note "
                "that drive C: is nearly full. Meetings at 10:30, the API at "
                "http://[::1]:8080/v1/models and/or /v1/chat/completions, 1/2 of the time. "
                "Your notes are in notes.txt."
            ),
            "names_only": ["C:/Users/bob/Documents/notes.txt"],
            "never": ["C:/Users", "Documents"],
        },
    )
    return req("where are the docs and my notes?"), s.body(), 200, SSE, exp


@cassette
def null_tool_call_sentinel() -> Built:
    s = Stream("chatcmpl-vllm-5c1e", "hermes-3-70b")
    nulls = {"content": None, "tool_calls": None, "function_call": None, "refusal": None}
    s.chunk({"role": "assistant", **nulls})
    s.chunk({"content": "Done. The cleaned data is at ", "tool_calls": None})
    s.chunk({"content": "/Users/alice/.agent/arti", "tool_calls": None})
    s.chunk({"content": None, "tool_calls": None})  # the None sentinel while a path is held
    s.chunk(
        {
            "content": "facts/out/clean.parquet and the run log at /tmp/agent-run/run.log.",
            "tool_calls": None,
        }
    )
    s.chunk({"content": None, "tool_calls": None}, "stop")
    s.done()
    exp = expectation(
        """
vLLM/LiteLLM-style chunks that carry `tool_calls: null`, `content: null`,
`function_call: null` and `refusal: null` (the None sentinel), one of them arriving
while a path is held. Nulls must pass through untouched (no crash, no flush of the
held path, no empty string invented); the path continues in the next delta and
becomes a link; `/tmp/agent-run/run.log` (outside the root) becomes `run.log`.
""",
        {**ALICE, "files": {"root/out/clean.parquet": "PAR1 cleaned rows PAR1"}},
        {
            "text": "Done. The cleaned data is at [clean.parquet](<link:root/out/clean.parquet>) and the run log at run.log.",
            "names_only": ["/tmp/agent-run/run.log"],
            "never": ["/Users/alice", ".agent"],
        },
    )
    return req("clean the data"), s.body(), 200, SSE, exp


@cassette
def tool_progress_events() -> Built:
    fig = f"{ALICE_ARTS}/out/figures.zip"
    s = Stream()
    s.role().say("Let me export the figures.")
    s.event(
        "hermes.tool.progress",
        {
            "tool_call_id": "call_8Xk2",
            "name": "terminal",
            "status": "started",
            "emoji": "💻",
            "label": f"cd /Users/alice/projects/q3 && zip -r {fig} figures/",
        },
    )
    s.event(
        "hermes.tool.progress",
        {
            "tool_call_id": "call_8Xk2",
            "name": "terminal",
            "status": "completed",
            "emoji": "✅",
            "label": f"wrote {fig} (48 KB); temp dir C:\\Users\\bob\\AppData\\Local\\Temp\\hermes-7f3a removed",
            "bytes": 48213,
        },
    )
    s.say(" The figures are in ", f"{fig}.").finish().done()
    exp = expectation(
        """
Hermes tool-progress named events (`event: hermes.tool.progress`, Hermes' shape:
tool_call_id, name, status, emoji, label) whose `label` holds a command line and a
result with host paths. On the chat front they are relayed (same event name, in
order) with their strings scrubbed: the root file becomes its link (the same link as
in the text: one path, one link), the project folder and the Windows temp folder
become their last segment. They carry no text; the text's own mention of the file is
a link.
""",
        {**ALICE, "files": {"root/out/figures.zip": "PK fake zip"}},
        {
            "text": "Let me export the figures. The figures are in [figures.zip](<link:root/out/figures.zip>).",
            "named_events": ["hermes.tool.progress", "hermes.tool.progress"],
            "never": ["/Users/alice", ".agent", "projects/q3", "C:\\Users", "AppData"],
        },
    )
    return req("export the figures"), s.body(), 200, SSE, exp


@cassette
def tool_call_arguments_path() -> Built:
    s = Stream("chatcmpl-tools-77aa")
    s.role().say("Saving the chart now.")
    call = {
        "index": 0,
        "id": "call_Qm3xR8",
        "type": "function",
        "function": {"name": "write_file", "arguments": ""},
    }
    s.chunk({"tool_calls": [call]})
    for piece in (
        '{"path": "/Users/ali',
        'ce/.agent/artifacts/out/chart.png", "over',
        'write": true, "backup": "C:\\\\Users\\\\bob\\\\',
        'Backups\\\\chart.bak.png"}',
    ):
        s.chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
    s.finish("tool_calls").done()
    exp = expectation(
        """
A streamed tool call whose JSON arguments contain paths, cut inside the path and
inside a JSON escape (`\\\\`). Each tool call's arguments are their own text channel:
a path right after `"` is quoted, so the root file becomes the bare URL (the JSON
stays valid), and the JSON-escaped Windows path (collapsed to `C:\\Users\\...`, not
a file here) becomes its name. The link in the arguments is in the manifest although
the text never names the file.
""",
        {**ALICE, "files": {"root/out/chart.png": "\x89PNG fake chart"}},
        {
            "text": "Saving the chart now.",
            "tool_arguments": [
                '{"path": "<link:root/out/chart.png>", "overwrite": true, "backup": "chart.bak.png"}'
            ],
            "never": ["/Users/alice", ".agent", "C:\\Users", "Backups"],
        },
    )
    return req("plot it and save it"), s.body(), 200, SSE, exp


@cassette
def path_at_stream_end() -> Built:
    s = Stream()
    s.role().say(
        "All set. Final report: ", f"{ALICE_ARTS}/out/final", "-report.pdf"
    ).finish().done()
    exp = expectation(
        """
The last delta ends inside a path: no trailing text, no punctuation. The stream then
ends normally (finish_reason, [DONE]), which ends the path (docs/rewriting.md: a path
ends at the end of the stream); it is a regular file under the root, so it is
flushed into the finishing chunk as a link.
""",
        {**ALICE, "files": {"root/out/final-report.pdf": "%PDF-1.4 final"}},
        {
            "text": "All set. Final report: [final-report.pdf](<link:root/out/final-report.pdf>)",
            "never": ["/Users/alice", ".agent"],
        },
    )
    return req("finish the report"), s.body(), 200, SSE, exp


@cassette
def path_at_eof() -> Built:
    s = Stream()
    s.role().say("Scratch copy left in ", "/tmp/hermes/scratch/notes-2.md")
    exp = expectation(
        """
The body ends right after a delta that ends inside a path: no finish chunk, no
[DONE]. A body that simply ends is a normal end of stream (EOF), so the gateway
closes the chat stream itself (finish_reason "stop", manifest, [DONE]) and the held
path (outside the root) is flushed as its name.
""",
        {**ALICE, "files": {}},
        {
            "text": "Scratch copy left in notes-2.md",
            "names_only": ["/tmp/hermes/scratch/notes-2.md"],
            "never": ["hermes/scratch"],
        },
    )
    return req("where is the scratch copy?"), s.body(), 200, SSE, exp


@cassette
def upstream_error_mid_path() -> Built:
    s = Stream()
    s.role().say("Exporting the ledger to ", f"{ALICE_ARTS}/out/led")
    s.error(
        "Internal error while generating; see /var/log/hermes/worker-3.log",
        "server_error",
        "internal_error",
    )
    exp = expectation(
        """
An in-band error event (`data: {"error": {...}}`) arrives while a path is held
(`.../out/led`, the model was writing `ledger.xlsx`). The chat stream ends with a
final chunk `finish_reason: "error"` and `error.code: upstream_error`; the held
partial path is flushed as a file name only, never resolved: `root/out/led` exists
on purpose, and still gets no link after a failure. The error message is scrubbed
too (`/var/log/hermes/worker-3.log` -> `worker-3.log`).
""",
        {
            **ALICE,
            "files": {
                "root/out/led": "a file that happens to match the partial path",
                "root/out/ledger.xlsx": "PK ledger",
            },
        },
        {
            "text": "Exporting the ledger to led",
            "names_only": [f"{ALICE_ARTS}/out/led"],
            "never": ["/Users/alice", ".agent", "/var/log"],
            "error_code": "upstream_error",
        },
    )
    return req("export the ledger"), s.body(), 200, SSE, exp


@cassette
def upstream_cut_mid_path() -> Built:
    s = Stream("chatcmpl-litellm-0c3d", "hermes-3-70b")
    s.role().say("Writing the backup to C:\\Users\\bob\\Back")
    s.error(
        "litellm.APIConnectionError: upstream connection closed before the response completed",
        "api_connection_error",
        None,
    )
    exp = expectation(
        """
The upstream connection was cut in the middle of a path. A cassette cannot hold a
cut: vcrpy reads the whole body while recording (a cut recording raises and writes
nothing) and replays a body that simply ends, which is a normal EOF (see
path-at-eof). So the cut is expressed the way a relaying layer (LiteLLM here) reports
it in band: an error event right after the partial path. Expected: the terminal
error (`upstream_error`), the partial Windows path flushed as its name only (`Back`).
The harness can also cut the connection itself after the body (`upstream_cut: true`,
see upstream-cut-eof), which covers the gateway's read-error path.
""",
        {**ALICE, "files": {}},
        {
            "text": "Writing the backup to Back",
            "names_only": ["C:\\Users\\bob\\Back"],
            "never": ["C:\\Users"],
            "error_code": "upstream_error",
        },
    )
    return req("back it up"), s.body(), 200, SSE, exp


@cassette
def upstream_cut_eof() -> Built:
    s = Stream()
    s.role().say("The summary goes to /home/bob/exports/2026-q1/summ")
    # half of the next event was on the wire when the connection died
    s.raw(
        'data: {"id":"chatcmpl-9f2kQ7xLm3","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"ary.csv'
    )
    exp = expectation(
        """
A real connection cut, replayed by the harness: the body below ends in the middle
of an event (half a `data:` line, no blank line) and `upstream_cut: true` makes the
scripted transport raise a protocol error after the last byte instead of a clean
EOF, as httpx does when the peer closes mid-body. The half event is discarded (an
incomplete event is never dispatched), the held path is flushed as its name only,
and the stream ends with `error.code: upstream_disconnected`.
""",
        {**ALICE, "principal": "bob", "mounts": {}, "files": {}, "upstream_cut": True},
        {
            "text": "The summary goes to summ",
            "names_only": ["/home/bob/exports/2026-q1/summ"],
            "never": ["/home/bob", "ary.csv"],
            "error_code": "upstream_disconnected",
        },
    )
    return req("summarise Q1"), s.body(), 200, SSE, exp


@cassette
def unicode_names() -> Built:
    s = Stream()
    s.role().say(
        "Here is your CV: `/Users/alice/.agent/artifacts/out/résu",
        "mé 2026.pdf`.\n",
        "报告已保存到/Users/alice/.agent/artifacts/out/季度",
        "报告.xlsx。请查收。\n",
        "Party pic 🎉 /Users/alice/.agent/artifacts/out/🎉launch.png and the Japanese draft at ",
        "/Users/alice/Desktop/下書き/メモ.txt, done ✅ 📎/tmp/scratch/naïve.txt",
    ).finish().done()
    exp = expectation(
        """
Non-ASCII file names: an accented name with a space (in a code span, so the space is
part of the path and the link is the bare URL), a CJK name right after CJK text
(no space; a path may start after a letter of a script written without spaces) and
ended by the CJK full stop `。`, an emoji name, a missing Japanese path (name only,
ended by the comma), and a path glued to an emoji (not a letter, so a boundary).
The deltas cut inside `résumé` and inside `季度报告`; the utf8 strategy also cuts
inside every multi-byte character.
""",
        {
            **ALICE,
            "files": {
                "root/out/résumé 2026.pdf": "%PDF-1.4 cv",
                "root/out/季度报告.xlsx": "PK quarterly",
                "root/out/🎉launch.png": "\x89PNG party",
            },
        },
        {
            "text": (
                "Here is your CV: `<link:root/out/résumé 2026.pdf>`.\n"
                "报告已保存到[季度报告.xlsx](<link:root/out/季度报告.xlsx>)。请查收。\n"
                "Party pic 🎉 [🎉launch.png](<link:root/out/🎉launch.png>) and the Japanese draft at "
                "メモ.txt, done ✅ 📎naïve.txt"
            ),
            "names_only": ["/Users/alice/Desktop/下書き/メモ.txt", "/tmp/scratch/naïve.txt"],
            "never": ["/Users/alice", ".agent", "下書き", "/scratch"],
        },
    )
    return req("where are my files?"), s.body(), 200, SSE, exp


@cassette
def crlf_framed() -> Built:
    s = Stream(newline="\r\n")
    s.raw(": ping - 2026-01-09 12:00:00.000000\n\n")
    s.role().say(
        "Build finished. Artifacts:\n- /Users/alice/.agent/artifacts/build/app-1.4.2.tar.gz\n",
        "- /Users/alice/.agent/artifacts/build/check",
        "sums.txt\nLogs stayed in /var/tmp/ci/build.log.",
    ).finish().done()
    exp = expectation(
        """
An upstream that frames SSE with CRLF (sse-starlette's default, ping comment
included): the cassette body itself uses CRLF line ends (stored as LF events plus
`line_endings: crlf`, loaded back byte for byte). The crlf strategy cuts inside
every CRLF. Newlines inside the text are JSON `\\n` escapes and end paths as
whitespace does.
""",
        {
            **ALICE,
            "files": {
                "root/build/app-1.4.2.tar.gz": "gz app",
                "root/build/checksums.txt": "sha256 app",
            },
        },
        {
            "text": (
                "Build finished. Artifacts:\n- [app-1.4.2.tar.gz](<link:root/build/app-1.4.2.tar.gz>)\n"
                "- [checksums.txt](<link:root/build/checksums.txt>)\nLogs stayed in build.log."
            ),
            "names_only": ["/var/tmp/ci/build.log"],
            "never": ["/Users/alice", ".agent", "/var/tmp"],
        },
    )
    return req("build it"), s.body(), 200, SSE, exp


@cassette
def keepalive_comments() -> Built:
    s = Stream("gen-1767960000-Xb2Lw9", "nousresearch/hermes-4-70b")
    s.raw(": OPENROUTER PROCESSING\n\n")
    s.role()
    s.raw(": ping\n\n")
    s.say("Here are the slides: /Users/alice/.agent/artifacts/out/deck/")
    s.raw(":ping\n\n")  # while the path is held; no space after the colon
    s.raw(": ping\n")  # a comment line inside the next event
    s.say("slides-final.pdf — and the speaker notes are at ~/Desktop/notes.md.")
    s.raw(": ping\n\n")
    s.finish().done()
    exp = expectation(
        """
Keep-alive comment lines from the upstream (`: OPENROUTER PROCESSING`, `: ping`,
`:ping`, and one comment line inside an event), one of them while a path is held.
Comments are not events: they neither flush the held path nor reach the client as
data. `~/Desktop/notes.md` (the gateway's own home, not the root) becomes its name.
""",
        {**ALICE, "files": {"root/out/deck/slides-final.pdf": "%PDF-1.4 slides"}},
        {
            "text": "Here are the slides: [slides-final.pdf](<link:root/out/deck/slides-final.pdf>) — and the speaker notes are at notes.md.",
            "names_only": ["~/Desktop/notes.md"],
            "never": ["/Users/alice", ".agent", "OPENROUTER", "~/Desktop"],
        },
    )
    return req("where are the slides?"), s.body(), 200, SSE, exp


@cassette
def usage_chunk() -> Built:
    s = Stream("chatcmpl-usage-41b0", extra={"system_fingerprint": "fp_hermes_2026"})
    s.chunk({"role": "assistant", "content": ""}, usage=None)
    s.chunk({"content": "Summary saved to "}, usage=None)
    s.chunk({"content": f"{ALICE_ARTS}/out/summary.md"}, usage=None)
    s.chunk({}, "stop", usage=None)
    s.raw(
        encode_json(
            {
                "id": "chatcmpl-usage-41b0",
                "object": "chat.completion.chunk",
                "created": 1767960000,
                "model": "hermes-agent",
                "system_fingerprint": "fp_hermes_2026",
                "choices": [],
                "usage": {"prompt_tokens": 812, "completion_tokens": 27, "total_tokens": 839},
            }
        ).decode()
    )
    s.done()
    exp = expectation(
        """
`stream_options.include_usage`: every chunk has `usage: null` and, after the finish
chunk, one chunk with `choices: []` and the usage carries no text. The path held at
the end is flushed into the finishing chunk as a link; the manifest rides on the
last JSON chunk (the usage chunk); exactly one chunk has a finish_reason.
""",
        {**ALICE, "files": {"root/out/summary.md": "# Summary"}},
        {
            "text": "Summary saved to [summary.md](<link:root/out/summary.md>)",
            "never": ["/Users/alice", ".agent"],
        },
    )
    return req("summarise", stream_options={"include_usage": True}), s.body(), 200, SSE, exp


@cassette
def responses_front() -> Built:
    s = Stream()
    s.role().say(
        "I generated two files:\n1. /Users/alice/.agent/artifacts/out/forecast.csv\n",
        "2. /Users/alice/.agent/artifacts/out/forecast-chart.s",
        "vg\nThe raw dump at /Users/alice/scratch/dump.bin was too big to keep.",
    ).finish().done()
    exp = expectation(
        """
The same upstream chat stream served on the Responses front (`POST /v1/responses`,
`download_link_mode: public` in the body): text arrives as
`response.output_text.delta`, `response.output_text.done` and `response.completed`
carry the same rewritten text, and `response.completed.response.gateway` is the
manifest. Links are public (signed, expiring; downloadable without auth, 404 when
tampered).
""",
        {
            **ALICE,
            "front": "responses",
            "link_mode": "public",
            "mode_via": "body",
            "files": {
                "root/out/forecast.csv": "month,value\n1,2\n",
                "root/out/forecast-chart.svg": "<svg/>",
            },
        },
        {
            "text": (
                "I generated two files:\n1. [forecast.csv](<link:root/out/forecast.csv>)\n"
                "2. [forecast-chart.svg](<link:root/out/forecast-chart.svg>)\n"
                "The raw dump at dump.bin was too big to keep."
            ),
            "names_only": ["/Users/alice/scratch/dump.bin"],
            "never": ["/Users/alice", ".agent"],
        },
    )
    return req("forecast next quarter"), s.body(), 200, SSE, exp


@cassette
def runs_front() -> Built:
    s = Stream("chatcmpl-run-2b9e")
    s.role().say("Running the analysis in the container.")
    call = {
        "index": 0,
        "id": "call_run_py_1",
        "type": "function",
        "function": {"name": "run_python", "arguments": ""},
    }
    s.chunk({"tool_calls": [call]})
    for piece in (
        '{"script": "/workspace/scripts/anal',
        'yse.py", "out": "/workspace/out/analysis.html"}',
    ):
        s.chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
    s.say(
        " Done: /workspace/out/analysis.html (inputs were read from /workspace/data/raw/)."
    ).finish().done()
    exp = expectation(
        """
A background run (`POST /v1/runs`, then `GET /v1/runs/{id}/events`) over the same
pipeline, from a containerised agent that sees `/workspace` (mounted onto the root;
`/workspace` is not a default host root, it counts because it is a mount prefix).
Events: run.started, message.delta, tool.started, tool.completed (arguments
rewritten: quoted paths become bare URLs), run.completed whose `output` equals the
deltas and whose `gateway` is the manifest. The same file in the arguments and in
the text maps to one link. `/workspace/data/raw/` is a directory: its last segment.
""",
        {
            **ALICE,
            "front": "runs",
            "link_mode": "private",
            "mode_via": "body",
            "mounts": {"/workspace": "root"},
            "files": {
                "root/scripts/analyse.py": "print('hi')\n",
                "root/out/analysis.html": "<h1>analysis</h1>",
            },
        },
        {
            "text": "Running the analysis in the container. Done: [analysis.html](<link:root/out/analysis.html>) (inputs were read from raw).",
            "tool_arguments": [
                '{"script": "<link:root/scripts/analyse.py>", "out": "<link:root/out/analysis.html>"}'
            ],
            "names_only": ["/workspace/data/raw/"],
            "never": ["/workspace"],
        },
    )
    return req("analyse the survey"), s.body(), 200, SSE, exp


def _proxy_stream(text_pieces: list[str]) -> str:
    s = Stream("chatcmpl-owui-5a7d")
    s.role().say(*text_pieces).finish().done()
    return s.body()


@cassette
def proxy_mode_body_public() -> Built:
    body = _proxy_stream(
        [
            "Your invoice is ready: /Users/alice/.agent/artifacts/invoices/INV-2026-0042.pdf ",
            "(and a copy in C:\\Users\\alice\\Downloads\\INV-2026-0042.pdf).",
        ]
    )
    exp = expectation(
        """
Open WebUI -> runs proxy -> gateway, link mode asked top-level
(`download_link_mode: public`, how Open WebUI passes a per-model custom param). The
principal is the Open WebUI user (`openwebui:u-alice-0001`, from the
X-OpenWebUI-User-* headers). Public links, no private-mode note. The Windows copy
ends at the unbalanced `)` and becomes its name.
""",
        {
            **ALICE,
            "front": "proxy",
            "link_mode": "public",
            "mode_via": "body",
            "files": {"root/invoices/INV-2026-0042.pdf": "%PDF-1.4 invoice"},
        },
        {
            "text": (
                "Your invoice is ready: [INV-2026-0042.pdf](<link:root/invoices/INV-2026-0042.pdf>) "
                "(and a copy in INV-2026-0042.pdf)."
            ),
            "names_only": ["C:\\Users\\alice\\Downloads\\INV-2026-0042.pdf"],
            "never": ["/Users/alice", ".agent", "C:\\Users"],
        },
    )
    return req("send me the invoice"), body, 200, SSE, exp


@cassette
def proxy_mode_metadata() -> Built:
    body = _proxy_stream(
        [
            "Shared dataset: /Users/alice/.agent/artifacts/data/survey-2026.csv; ",
            "codebook: /Users/alice/.agent/artifacts/data/codebook.md.",
        ]
    )
    exp = expectation(
        """
Runs proxy with the link mode under `metadata.hermes.download_link_mode: public`
(how direct API clients and pipes ask; Open WebUI itself strips `metadata`). Both
files get public links; `;` and `.` after a path go back to the sentence.
""",
        {
            **ALICE,
            "front": "proxy",
            "link_mode": "public",
            "mode_via": "metadata",
            "files": {
                "root/data/survey-2026.csv": "id,answer\n1,yes\n",
                "root/data/codebook.md": "# Codebook",
            },
        },
        {
            "text": (
                "Shared dataset: [survey-2026.csv](<link:root/data/survey-2026.csv>); "
                "codebook: [codebook.md](<link:root/data/codebook.md>)."
            ),
            "never": ["/Users/alice", ".agent"],
        },
    )
    return req("share the survey"), body, 200, SSE, exp


@cassette
def proxy_mode_default() -> Built:
    body = _proxy_stream(
        ["Here is the transcript: /home/bob/.hermes/artifacts/meetings/meeting-notes.txt"]
    )
    exp = expectation(
        """
Runs proxy without any link mode: the configured default (private) applies. The
principal is Open WebUI user bob (`openwebui:u-bob-0002`); the link opens only for
him (alice's Open WebUI identity gets 404), and because the answer has private links
the proxy appends its short note saying so.
""",
        {
            **ALICE,
            "front": "proxy",
            "principal": "bob",
            "mounts": {"/home/bob/.hermes/artifacts": "root"},
            "files": {"root/meetings/meeting-notes.txt": "standup notes"},
        },
        {
            "text": "Here is the transcript: [meeting-notes.txt](<link:root/meetings/meeting-notes.txt>)"
            + PRIVATE_NOTE,
            "never": ["/home/bob", ".hermes"],
        },
    )
    return req("transcript please"), body, 200, SSE, exp


@cassette
def file_uri_percent() -> Built:
    s = Stream()
    s.role().say(
        "Open fi",
        "le:///Users/alice/.agent/artifacts/out/Q3%20summary%20%28final%29.pdf to review it. ",
        "The Windows copy is file:",
        "///C:/Users/bob/Documents/plan%20v2.docx and the share is ",
        "file://localhost/Users/alice/Desktop/%E2%9C%93done.txt. Trace: FILE:///tmp/agent/trace%231.log",
    ).finish().done()
    exp = expectation(
        """
`file://` URIs are paths, percent-decoded before they are resolved and named:
`%20`, `%28`/`%29`, UTF-8 `%E2%9C%93` (✓), `%23` (#); `file:///C:/...` is the Windows
drive path `C:/...`; `localhost` is dropped; the scheme matches in any case. The
deltas cut after `fi` and after `file:` (both must be held). Only the root file
gets a link; its link text is the decoded name.
""",
        {**ALICE, "files": {"root/out/Q3 summary (final).pdf": "%PDF-1.4 q3"}},
        {
            "text": (
                "Open [Q3 summary (final).pdf](<link:root/out/Q3 summary (final).pdf>) to review it. "
                "The Windows copy is plan v2.docx and the share is ✓done.txt. Trace: trace#1.log"
            ),
            "names_only": [
                "C:/Users/bob/Documents/plan v2.docx",
                "/Users/alice/Desktop/✓done.txt",
                "/tmp/agent/trace#1.log",
            ],
            "never": ["file:", "FILE:", "/Users/alice", "%20", "%E2"],
        },
    )
    return req("where is the Q3 summary?"), s.body(), 200, SSE, exp


@cassette
def quoted_paths_with_spaces() -> Built:
    s = Stream()
    s.role().say(
        "Open `/Users/alice/.agent/artifacts/out/Board Deck v3.pptx` in Keynote. ",
        'Your notes are in "/Users/alice/Desktop/My Notes/todo list.txt" and the budget in ',
        "'C:\\Users\\bob\\My Documents\\budget 2026.xlsx'. Run `/tmp/in.txt /tmp/out.txt` ",
        "through diff, and see <~/Library/Application Support/Hermes/config.json>.",
    ).finish().done()
    exp = expectation(
        """
Delimited paths may contain spaces: right after a backtick, a double or single
quote or `<`, the path runs to the matching closer on the same line. A root file
there becomes the bare URL (the quotes stay); other paths their name with its
spaces. A code span holding two paths (`/tmp/in.txt /tmp/out.txt`) is read as prose,
each path separately.
""",
        {**ALICE, "files": {"root/out/Board Deck v3.pptx": "PK deck"}},
        {
            "text": (
                "Open `<link:root/out/Board Deck v3.pptx>` in Keynote. "
                'Your notes are in "todo list.txt" and the budget in '
                "'budget 2026.xlsx'. Run `in.txt out.txt` "
                "through diff, and see <config.json>."
            ),
            "names_only": [
                "/Users/alice/Desktop/My Notes/todo list.txt",
                "C:\\Users\\bob\\My Documents\\budget 2026.xlsx",
                "/tmp/in.txt",
                "/tmp/out.txt",
                "~/Library/Application Support/Hermes/config.json",
            ],
            "never": [
                "/Users/alice",
                ".agent",
                "C:\\Users",
                "My Documents",
                "My Notes",
                "Application Support",
            ],
        },
    )
    return req("where is everything?"), s.body(), 200, SSE, exp


@cassette
def markdown_link_target() -> Built:
    s = Stream()
    s.role().say(
        "Download [the quarterly report](/Users/alice/.agent/artifacts/out/report final.pdf) or ",
        "[/Users/alice/Desktop/old/report.pdf](/Users/alice/Desktop/old/report.pdf). ",
        "Inline image: ![chart](C:\\Users\\bob\\out\\chart.png). Bare: <https://example.com/home/x> stays.",
    ).finish().done()
    exp = expectation(
        """
Paths as markdown link targets (`](...)`, spaces allowed up to the `)`): a root file
becomes the bare URL, so the model's own link keeps its text and now points at the
download. A link whose target gets no link (a missing file) loses the link and keeps
its text, with the file's name after it unless the text holds it: a relative link
to the bare name would open the chat front's own origin (Open WebUI: an empty "New
Chat" tab). A path as link text (`[...]`) becomes the name alone. An image target
works the same way (its `!` has gone out before the `[`). A URL in angle brackets is
not a path.
""",
        {**ALICE, "files": {"root/out/report final.pdf": "%PDF-1.4 quarterly"}},
        {
            "text": (
                "Download [the quarterly report](<link:root/out/report final.pdf>) or "
                "report.pdf. "
                "Inline image: !chart (chart.png). Bare: <https://example.com/home/x> stays."
            ),
            "names_only": ["/Users/alice/Desktop/old/report.pdf", "C:\\Users\\bob\\out\\chart.png"],
            "never": ["/Users/alice", ".agent", "C:\\Users"],
        },
    )
    return req("give me the report"), s.body(), 200, SSE, exp


@cassette
def unc_and_home_dirs() -> Built:
    s = Stream()
    s.role().say(
        "The finance share is \\\\file",
        "server\\finance\\Q3\\budget.xlsx; I copied it to /Users/alice/.agent/artifacts/out/ (a folder), ",
        "next to your home /Users/alice and bob's C:\\Users\\bob. The share root \\",
        "\\fileserver\\finance is read-only.",
    ).finish().done()
    exp = expectation(
        """
UNC paths (`\\\\server\\share\\...`, cut inside the server name and between the two
leading backslashes, so both must be held), a directory under the root (no link: not
a regular file; its last segment `out`), and home directories themselves, which
become `~` (their last segment would be the user name): `/Users/alice`,
`C:\\Users\\bob`. The UNC share root gives its share name.
""",
        {**ALICE, "files": {"root/out/budget-copy.xlsx": "PK copy"}},
        {
            "text": (
                "The finance share is budget.xlsx; I copied it to out (a folder), "
                "next to your home ~ and bob's ~. The share root finance is read-only."
            ),
            "names_only": ["\\\\fileserver\\finance\\Q3\\budget.xlsx", f"{ALICE_ARTS}/out/"],
            "never": ["fileserver\\", "/Users/alice", "C:\\Users", "Q3"],
        },
    )
    return req("where is the budget?"), s.body(), 200, SSE, exp


@cassette
def markdown_emphasis() -> Built:
    s = Stream()
    s.role().say(
        "Saved **/Users/alice/.agent/artifacts/out/brief.pdf** and the draft ",
        "_/Users/alice/Desktop/draft.txt_, plus *~/notes/todo.md*.",
    ).finish().done()
    exp = expectation(
        """
Paths wrapped in markdown emphasis, as models write them: `**...**`, `_..._`,
`*...*`. DESIGN.md: a path may begin right after whitespace or punctuation, and `_`
is punctuation; invariant 1: no raw host path ever reaches the client. Expected: the
root file becomes its link inside the bold markers, the others their names inside
the emphasis markers. (This cassette caught a leak: the detector used to treat `_`
as a character a path never follows, so `_/Users/alice/Desktop/draft.txt_` went out raw.)
""",
        {**ALICE, "files": {"root/out/brief.pdf": "%PDF-1.4 brief"}},
        {
            "text": "Saved **[brief.pdf](<link:root/out/brief.pdf>)** and the draft _draft.txt_, plus *todo.md*.",
            "names_only": ["/Users/alice/Desktop/draft.txt", "~/notes/todo.md"],
            "never": ["/Users/alice", ".agent", "~/notes"],
        },
    )
    return req("save the brief"), s.body(), 200, SSE, exp


@cassette
def windows_mount_header_mode() -> Built:
    s = Stream("chatcmpl-win-3d1f")
    s.role().say(
        "Deck: C:\\Users\\bob\\her",
        "mes\\artifacts\\out\\deck.pptx and notes C:/Users/bob/hermes/artifacts/notes/summary.txt; ",
        "scratch C:\\Users\\bob\\AppData\\Local\\Temp\\x.tmp.",
    ).finish().done()
    exp = expectation(
        """
An agent running on Windows whose artifact folder `C:\\Users\\bob\\hermes\\artifacts` is
mounted onto the gateway's root: Windows paths under the mount (backslashes or
forward slashes) resolve to files and get links; other Windows paths stay names.
The link mode is asked the operator's way: a role=proxy key asserting the owner
(`X-Gateway-Owner: bob`) and `X-Gateway-Link-Mode: public` on the chat front.
""",
        {
            **ALICE,
            "principal": "bob",
            "link_mode": "public",
            "mode_via": "header",
            "mounts": {"C:\\Users\\bob\\hermes\\artifacts": "root"},
            "files": {"root/out/deck.pptx": "PK deck", "root/notes/summary.txt": "summary"},
        },
        {
            "text": (
                "Deck: [deck.pptx](<link:root/out/deck.pptx>) and notes "
                "[summary.txt](<link:root/notes/summary.txt>); scratch x.tmp."
            ),
            "names_only": ["C:\\Users\\bob\\AppData\\Local\\Temp\\x.tmp"],
            "never": ["C:\\Users", "C:/Users", "hermes\\artifacts", "hermes/artifacts", "AppData"],
        },
    )
    return req("where is the deck?"), s.body(), 200, SSE, exp


@cassette
def denied_under_root() -> Built:
    s = Stream()
    s.role().say(
        "I found the deploy key at /Users/alice/.agent/artifacts/.ssh/id_rsa ",
        "(public half: /Users/alice/.agent/artifacts/.ssh/id_rsa.pub). The environment file ",
        "/Users/alice/.agent/artifacts/project/.env was left alone; the deploy log is ",
        "/Users/alice/.agent/artifacts/out/deploy.log.",
    ).finish().done()
    exp = expectation(
        """
Denied locations inside the artifact root: the files exist and are regular, but
`.ssh` (and everything in it) and `.env` are in the default deny list, so they show
as their names only and are not in the manifest. The ordinary file next to them
still gets its link. (Symlinks are not covered: the harness creates regular files
only.)
""",
        {
            **ALICE,
            "files": {
                "root/.ssh/id_rsa": "-----BEGIN OPENSSH PRIVATE KEY-----\nharness-fake\n-----END OPENSSH PRIVATE KEY-----\n",
                "root/.ssh/id_rsa.pub": "ssh-ed25519 AAAAharnessfake alice@host\n",
                "root/project/.env": "API_TOKEN=harness-fake\n",
                "root/out/deploy.log": "deployed\n",
            },
        },
        {
            "text": (
                "I found the deploy key at id_rsa (public half: id_rsa.pub). The environment file "
                ".env was left alone; the deploy log is [deploy.log](<link:root/out/deploy.log>)."
            ),
            "names_only": [
                f"{ALICE_ARTS}/.ssh/id_rsa",
                f"{ALICE_ARTS}/.ssh/id_rsa.pub",
                f"{ALICE_ARTS}/project/.env",
            ],
            "never": ["/Users/alice", ".ssh/", "project/", "BEGIN OPENSSH", "harness-fake"],
        },
    )
    return req("what did you find?"), s.body(), 200, SSE, exp


@cassette
def upstream_404_model_not_found() -> Built:
    body = json.dumps(
        {
            "error": {
                "message": "The model `hermes-9` does not exist. Available models are listed in /etc/hermes/models.yaml.",
                "type": "invalid_request_error",
                "param": "model",
                "code": "model_not_found",
            }
        }
    )
    exp = expectation(
        """
The upstream refuses the request: HTTP 404 with an OpenAI error body
(`code: model_not_found`). The gateway answers before any streaming with the same
status and code, as a JSON error body, its message scrubbed
(`/etc/hermes/models.yaml` -> `models.yaml`). No text, no links.
""",
        {**ALICE, "files": {}},
        {
            "names_only": [],
            "never": ["/etc/hermes"],
            "error_code": "model_not_found",
            "http_status": 404,
        },
    )
    return req("hello", model="hermes-9"), body, 404, "application/json", exp


# -- main ------------------------------------------------------------------------------


def build(name: str) -> None:
    request_body, body, status, ctype, exp = CASSETTES[name]()
    path = HERE / f"{name}.yaml"
    write(path, request_body=request_body, body=body, status=status, content_type=ctype)
    (HERE / f"{name}.expect.yaml").write_text(exp, encoding="utf-8")


def main(argv: list[str]) -> int:
    names = argv or list(CASSETTES)
    unknown = [n for n in names if n not in CASSETTES]
    if unknown:
        print(f"unknown cassette(s) {unknown}; known: {', '.join(CASSETTES)}", file=sys.stderr)
        return 2
    for name in names:
        build(name)
        print(f"wrote cassettes/{name}.yaml and .expect.yaml")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
