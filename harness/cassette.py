"""Cassettes: vcrpy YAML with legible SSE bodies, plus an expectation file beside each.

A cassette is a normal vcrpy cassette (``interactions: [{request, response}]``)
written by the ``sse-yaml`` serializer registered here: an event-stream response
body is stored as ``body: {sse: [event, event, ...]}`` (one YAML block string per
SSE event) instead of one escaped string, so an incident's stream can be read and
edited in review. Loading joins the events back into the exact bytes.

``NAME.yaml`` holds the upstream interaction; ``NAME.expect.yaml`` beside it says
how to replay it and what the client must end up seeing::

    front: chat            # chat | responses | runs | proxy
    principal: alice       # alice | bob (keys of the replay config)
    link_mode: private     # private | public | null (config default)
    mode_via: body         # body | metadata | header | default (how the mode is asked)
    default_link_mode: private
    mounts:                # recorded host prefix -> sandbox (the artifact root)
      "/Users/alice/.agent/artifacts": root
    files:                 # created in the sandbox before the replay
      root/out/report.pdf: "%PDF-1.4 demo"
    expect:
      text: "See [report.pdf](<link:root/out/report.pdf>)."   # assembled text
      names_only: ["/Users/bob/Desktop/secret.txt"]             # paths shown as names
      never: ["/Users/alice", "C:\\\\Users"]                     # never in any output byte
      error_code: null     # code of the terminal error, when the stream fails
      http_status: 200
      tool_arguments: null # assembled tool-call arguments, in call order (placeholders too)
      named_events: null   # names of the upstream named events relayed (chat front), in order
    upstream_cut: false    # replay the body, then cut the connection (no clean EOF)
    timeline:              # files that appear / change / vanish mid-stream (harness/timeline.py)
    - {at_event: 3, op: replace, path: root/out/report.pdf, content: "%PDF-1.4 v2"}
    expect:
      artifacts: [root/out/report.pdf]   # exactly the files the terminal manifest links

The cassette itself may say where its stream came from (``harness capture`` and the
Hermes recorder write it; vcrpy ignores the key)::

    source: {api: chat, upstream: hermes-agent 0.19.0}   # api: chat | responses | runs

Only ``api: chat`` cassettes replay today (the gateway calls its upstream's chat
completions, also for its own Responses and runs fronts); a native Responses or
runs stream is kept for the native relay and refused by :func:`load` for replay.

Unknown keys are refused (a typo must not turn a check off silently). An
event-stream body framed entirely with CRLF is stored with LF events plus
``line_endings: crlf`` (YAML block strings cannot hold a CR) and loaded back
byte for byte.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.timeline import Op
from harness.timeline import parse as parse_timeline

SERIALIZER_NAME = "sse-yaml"


class _Dumper(yaml.SafeDumper):  # type: ignore[misc]
    pass


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    if (
        "\n" in data
        and not any(c in data for c in "\r\x85\u2028\u2029")
        and data == data.rstrip(" ")
    ):
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", data)


_Dumper.add_representer(str, _str_presenter)


def dump_yaml(data: Any) -> str:
    """YAML as the cassettes are written: multi-line strings as block strings, unicode kept."""
    out = io.StringIO()
    yaml.dump(data, out, Dumper=_Dumper, allow_unicode=True, sort_keys=False, width=100)
    return out.getvalue()


def split_events(body: str) -> list[str]:
    """Split an SSE body after each blank line, keeping every byte."""
    out: list[str] = []
    start = 0
    while True:
        i = body.find("\n\n", start)
        if i < 0:
            break
        out.append(body[start : i + 2])
        start = i + 2
    if start < len(body):
        out.append(body[start:])
    return out


def _crlf_only(body: str) -> bool:
    """True when every line ending of ``body`` is CRLF (and there is at least one)."""
    return "\r\n" in body and "\r" not in body.replace("\r\n", "\n")


def _headers_get(headers: dict[str, Any], name: str) -> str:
    for k, v in headers.items():
        if k.lower() == name:
            return str(v[0] if isinstance(v, list) and v else v)
    return ""


class SSEYamlSerializer:
    """vcrpy serializer: ``serialize(dict) -> str`` and ``deserialize(str) -> dict``."""

    @staticmethod
    def serialize(cassette: dict[str, Any]) -> str:
        data = yaml.safe_load(yaml.safe_dump(cassette))  # deep copy into plain types
        for inter in data.get("interactions", []):
            resp = inter.get("response", {})
            body = resp.get("body", {})
            content = body.get("string")
            if isinstance(content, bytes):
                content = content.decode("utf-8", "replace")
            if "event-stream" in _headers_get(
                resp.get("headers", {}), "content-type"
            ) and isinstance(content, str):
                if _crlf_only(content):
                    resp["body"] = {
                        "line_endings": "crlf",
                        "sse": split_events(content.replace("\r\n", "\n")),
                    }
                else:
                    resp["body"] = {"sse": split_events(content)}
            req = inter.get("request", {})
            if isinstance(req.get("body"), bytes):
                req["body"] = req["body"].decode("utf-8", "replace")
        out = io.StringIO()
        yaml.dump(data, out, Dumper=_Dumper, allow_unicode=True, sort_keys=False, width=100)
        return out.getvalue()

    @staticmethod
    def deserialize(text: str) -> dict[str, Any]:
        data: dict[str, Any] = yaml.safe_load(text) or {}
        for inter in data.get("interactions", []):
            body = inter.get("response", {}).get("body", {})
            if isinstance(body, dict) and "sse" in body:
                joined = "".join(body["sse"])
                if body.get("line_endings") == "crlf":
                    joined = joined.replace("\n", "\r\n")
                inter["response"]["body"] = {"string": joined}
        return data


_RUN_EVENTS = ("run.", "message.", "tool.", "reasoning.", "approval.")


def _api_of(obj: Any) -> str | None:
    if not isinstance(obj, dict):
        return None
    if obj.get("object") == "chat.completion.chunk" or "choices" in obj:
        return "chat"
    kind, event = obj.get("type"), obj.get("event")
    if isinstance(kind, str) and kind.startswith("response."):
        return "responses"
    if isinstance(event, str) and event.startswith(_RUN_EVENTS):
        return "runs"
    return None


def detect_api(body: bytes) -> str | None:
    """Which API an SSE body is a stream of: ``chat``, ``responses``, ``runs``,
    ``mixed`` (events of more than one), or None (nothing recognisable: an error
    body, comments only). Judged by each event's data, so a named event of another
    kind (``hermes.tool.progress``) counts for nothing."""
    import json

    from gateway.core.sse import SSEDecoder

    decoder = SSEDecoder()
    kinds: set[str] = set()
    for ev in decoder.feed(body + b"\n\n"):  # an unterminated last event counts too
        if ev.data == "[DONE]":
            continue
        try:
            kind = _api_of(json.loads(ev.data))
        except ValueError:
            continue
        if kind is not None:
            kinds.add(kind)
    if len(kinds) > 1:
        return "mixed"
    return next(iter(kinds), None)


def register(vcr: Any) -> None:
    """Register the serializer on a ``vcr.VCR`` instance."""
    vcr.register_serializer(SERIALIZER_NAME, SSEYamlSerializer)


#: recorded response headers that describe the recorded framing, not the body the
#: replay serves (decoded, re-chunked by each strategy): dropped on load
_FRAMING_HEADERS = frozenset(
    {"content-length", "content-encoding", "transfer-encoding", "connection", "keep-alive"}
)

EXPECTATION_TEMPLATE = """\
# What happened (one or two sentences: the incident, the upstream, why it matters).
# Field reference: docs/harness.md ("Expectation file"); walkthrough:
# docs/runbooks/incident-replay.md.
front: chat               # chat | responses | runs | proxy
principal: alice          # alice | bob (for proxy: the Open WebUI user)
link_mode: null           # private | public | null
mode_via: default         # body | metadata | header | default
default_link_mode: private
mounts: {}                # recorded host prefix -> sandbox dir, e.g. "/Users/alice/.agent/artifacts": root
files: {}                 # sandbox files to create, e.g. root/out/report.pdf: "%PDF-1.4"
expect:
  text: null              # the assembled text, links as <link:root/out/report.pdf>
  names_only: []          # paths that must show as their file name only
  never: []               # strings that must never reach the client
  error_code: null
  http_status: 200
"""


def write_expectation_template(cassette_path: Path) -> Path:
    """Write ``NAME.expect.yaml`` beside a new cassette unless one exists; return its path."""
    exp = cassette_path.with_name(cassette_path.stem + ".expect.yaml")
    if not exp.exists():
        exp.write_text(EXPECTATION_TEMPLATE, encoding="utf-8")
    return exp


@dataclass
class Expectation:
    front: str = "chat"
    principal: str = "alice"
    link_mode: str | None = None
    mode_via: str = "body"
    default_link_mode: str = "private"
    mounts: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    text: str | None = None
    names_only: list[str] = field(default_factory=list)
    never: list[str] = field(default_factory=list)
    error_code: str | None = None
    http_status: int = 200
    tool_arguments: list[str] | None = None
    named_events: list[str] | None = None
    upstream_cut: bool = False
    request: dict[str, Any] = field(default_factory=dict)
    #: raw timeline ops (checked by :func:`load` into ``Cassette.timeline``)
    timeline: list[Any] = field(default_factory=list)
    #: sandbox paths whose links the terminal manifest must hold, exactly (None: unchecked)
    artifacts: list[str] | None = None

    def asserts_something(self) -> bool:
        """Does this say anything about the output beyond "valid protocol"?"""
        return bool(
            self.text is not None
            or self.names_only
            or self.never
            or self.error_code
            or self.http_status != 200
            or self.tool_arguments is not None
            or self.named_events is not None
            or self.artifacts is not None
        )


@dataclass
class Cassette:
    name: str
    path: Path
    request_body: dict[str, Any]
    status: int
    headers: dict[str, str]
    body: bytes
    expect: Expectation
    #: the file-system timeline (empty: files stay as ``expect.files`` say)
    timeline: list[Op] = field(default_factory=list)
    #: which API the stream came from: chat | responses | runs
    api: str = "chat"
    #: what answered it when recorded ("" when unknown)
    upstream: str = ""


def load(path: Path, *, require_expectation: bool = True) -> Cassette:
    """Read a cassette and its expectation.

    Refused (``ValueError``): no expectation file, unknown keys, or an expectation
    that asserts nothing beyond the protocol (an untouched template). Pass
    ``require_expectation=False`` to read the interaction alone.
    """
    import json

    data = SSEYamlSerializer.deserialize(path.read_text(encoding="utf-8"))
    inters = data.get("interactions") or []
    if not inters:
        raise ValueError(f"{path.name}: no interactions")
    source = data.get("source") or {}
    api = str(source.get("api") or "chat") if isinstance(source, dict) else "chat"
    if require_expectation and api != "chat":
        raise ValueError(
            f"{path.name}: a native {api} stream (source.api); the gateway calls its upstream's "
            "chat completions only, so it is kept for the native relay, not replayed"
        )
    inter = inters[0]
    req_body = inter.get("request", {}).get("body") or "{}"
    try:
        request_body = json.loads(req_body) if isinstance(req_body, str) else dict(req_body)
    except ValueError:
        request_body = {}
    resp = inter["response"]
    content = resp.get("body", {}).get("string", "")
    body = content.encode("utf-8") if isinstance(content, str) else bytes(content)
    headers = {
        k.lower(): (v[0] if isinstance(v, list) else v)
        for k, v in resp.get("headers", {}).items()
        if k.lower() not in _FRAMING_HEADERS
    }
    exp_path = path.with_name(path.stem + ".expect.yaml")
    if exp_path.exists():
        raw = yaml.safe_load(exp_path.read_text(encoding="utf-8")) or {}
    elif require_expectation:
        raise ValueError(
            f"{path.name}: no {exp_path.name} beside it (record and capture write a template)"
        )
    else:
        raw = {}
    if not isinstance(raw, dict):
        raise ValueError(f"{exp_path.name}: not a mapping")
    expect_block = raw.pop("expect", {}) or {}
    known = set(Expectation.__dataclass_fields__)
    unknown = sorted((set(raw) | set(expect_block)) - known)
    if unknown:
        raise ValueError(f"{exp_path.name}: unknown key(s) {unknown}; known: {sorted(known)}")
    exp = Expectation(**raw, **expect_block)
    if require_expectation and not exp.asserts_something():
        raise ValueError(
            f"{exp_path.name}: asserts nothing (set expect.text, names_only, never or "
            "error_code; see docs/runbooks/incident-replay.md)"
        )
    n_events = len(split_events(body.decode("utf-8", "replace")))
    return Cassette(
        name=path.stem,
        path=path,
        request_body=request_body,
        status=int(resp.get("status", {}).get("code", 200)),
        headers={str(k): str(v) for k, v in headers.items()},
        body=body,
        expect=exp,
        timeline=parse_timeline(exp.timeline or None, n_events, exp_path.name),
        api=api,
        upstream=str(source.get("upstream") or "") if isinstance(source, dict) else "",
    )


def discover(paths: list[str]) -> list[Path]:
    found: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            found.extend(
                sorted(q for q in path.glob("*.yaml") if not q.name.endswith(".expect.yaml"))
            )
        elif path.exists():
            found.append(path)
    return found


def write(
    path: Path,
    *,
    request_body: dict[str, Any],
    body: str,
    status: int = 200,
    uri: str = "http://127.0.0.1:9000/v1/chat/completions",
    content_type: str = "text/event-stream",
    source: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
    method: str = "POST",
) -> None:
    """Write a one-interaction cassette (used by ``capture``, the Hermes recorder, tests).

    ``source``: where the stream came from (``{"api": ..., "upstream": ...}``);
    ``headers``: more recorded response headers (``Content-Type`` comes from
    ``content_type``)."""
    import json

    resp_headers = {"Content-Type": [content_type]}
    for k, v in (headers or {}).items():
        if k.lower() != "content-type":
            resp_headers[k] = [v]
    data: dict[str, Any] = {
        "version": 1,
        "interactions": [
            {
                "request": {
                    "method": method,
                    "uri": uri,
                    "body": json.dumps(request_body, ensure_ascii=False),
                    "headers": {"Content-Type": ["application/json"]},
                },
                "response": {
                    "status": {"code": status, "message": "OK" if status < 400 else "Error"},
                    "headers": resp_headers,
                    "body": {"string": body},
                },
            }
        ],
    }
    if source:
        data["source"] = dict(source)
    path.write_text(SSEYamlSerializer.serialize(data), encoding="utf-8")
