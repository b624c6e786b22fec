"""A cassette's file-system timeline: files that appear, change or vanish mid-stream.

Agents write files while they answer: Hermes names a path in a tool-progress event,
then its tool writes the file, then the answer names it again. A cassette says
when, in its expectation::

    timeline:
    - at_event: 3            # index into the cassette's ``sse`` list (0 = before any byte)
      op: replace            # write | replace | delete
      path: root/out/report.md
      content: "# Report\\n"
      mode: 0o600            # optional (Hermes writes 0600)

The op happens **after every byte of events ``0 .. N-1`` was handed to the gateway
and before any byte of event ``N`` is**, whatever the chunking: a chunk that
straddles that boundary is cut there (:func:`refine`), and the transport runs the op
before it hands over the piece that starts event ``N`` (``at_event`` equal to the
number of events: after the last byte, before the end of the body). The gateway
reads its next chunk only after it has fed the previous one through its pipeline,
so "the path was named before the file existed" and "the file was rewritten after
its link was made" replay the same way under every strategy.

``write`` truncates the file in place (same inode), ``replace`` writes a temporary
file beside it and renames it over the path (a new inode: what Hermes's
``write_file`` does), ``delete`` removes it. Before each replay the sandbox is reset
to the expectation's ``files`` (and a path only the timeline creates is removed).

Pure functions except :func:`apply` and :func:`reset`, which touch only the sandbox.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

__all__ = ["Op", "apply", "event_offsets", "parse", "refine", "reset"]

OPS = ("write", "replace", "delete")
_KEYS = {"at_event", "op", "path", "content", "mode"}
#: where an SSE event ends (as the per-event strategy cuts): a blank line
_EVENT_END = re.compile(rb"\r?\n\r?\n|\r\r")


@dataclass(frozen=True)
class Op:
    at_event: int
    op: str
    path: str  #: relative to the sandbox (``root/...``)
    content: str = ""
    mode: int | None = None


def parse(raw: object, n_events: int, where: str) -> list[Op]:
    """The timeline of an expectation, checked; ``ValueError`` names what is wrong."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ValueError(f"{where}: timeline must be a list of ops")
    ops: list[Op] = []
    for i, item in enumerate(raw):
        ops.append(_parse_one(item, n_events, f"{where}: timeline[{i}]"))
    if [o.at_event for o in ops] != sorted(o.at_event for o in ops):
        raise ValueError(f"{where}: timeline ops must be in at_event order")
    return ops


def _parse_one(item: Any, n_events: int, where: str) -> Op:
    if not isinstance(item, dict):
        raise ValueError(f"{where}: an op is a mapping (at_event, op, path, content, mode)")
    unknown = sorted(set(item) - _KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; known: {sorted(_KEYS)}")
    at, op, path = item.get("at_event"), item.get("op"), item.get("path")
    if not isinstance(at, int) or isinstance(at, bool) or not 0 <= at <= n_events:
        raise ValueError(f"{where}: at_event must be an event index 0..{n_events}, got {at!r}")
    if op not in OPS:
        raise ValueError(f"{where}: op must be one of {', '.join(OPS)}, got {op!r}")
    pure = PurePosixPath(path) if isinstance(path, str) else None
    if pure is None or pure.is_absolute() or ".." in pure.parts or not pure.parts:
        raise ValueError(f"{where}: path must be relative to the sandbox (root/...), got {path!r}")
    content = item.get("content", "")
    if op != "delete" and not isinstance(content, str):
        raise ValueError(f"{where}: content must be text")
    mode = item.get("mode")
    if mode is not None and (not isinstance(mode, int) or not 0 <= mode <= 0o777):
        raise ValueError(f"{where}: mode must be a permission number such as 0o600")
    return Op(at, str(op), str(pure), content if op != "delete" else "", mode)


def event_offsets(body: bytes) -> list[int]:
    """Byte offset where each event starts, plus the body's length at the end.

    ``event_offsets(body)[n]`` is where event ``n`` starts; the last entry is where
    the (possibly unterminated) last event ends. Events end at a blank line, the
    way :func:`harness.cassette.split_events` stores them (in any line-end framing).
    """
    starts = [0, *(m.end() for m in _EVENT_END.finditer(body))]
    if starts[-1] < len(body):
        starts.append(len(body))
    return starts


def refine(chunking: Sequence[bytes], ops: Sequence[Op]) -> tuple[list[bytes], dict[int, list[Op]]]:
    """Cut ``chunking`` at each op's event boundary; which ops run before which chunk.

    Returns the new chunking and ``{chunk index: ops to run before handing it over}``;
    index ``len(chunks)`` means after the last chunk (before the end of the body).
    """
    body = b"".join(chunking)
    offsets = event_offsets(body)
    bounds: dict[int, list[Op]] = {}
    for op in ops:
        at = offsets[op.at_event] if op.at_event < len(offsets) else len(body)
        bounds.setdefault(at, []).append(op)
    cuts = sorted(b for b in bounds if 0 < b < len(body))
    chunks: list[bytes] = []
    pos = 0
    for chunk in chunking:
        end = pos + len(chunk)
        start = pos
        for cut in cuts:
            if start < cut < end:
                chunks.append(body[start:cut])
                start = cut
        if end > start:
            chunks.append(body[start:end])
        pos = end
    before: dict[int, list[Op]] = {}
    starts = [0]
    for c in chunks:
        starts.append(starts[-1] + len(c))
    index_of = {s: i for i, s in enumerate(starts[:-1])}
    for at, at_ops in bounds.items():
        i = len(chunks) if at >= len(body) else index_of[at]
        before.setdefault(i, []).extend(at_ops)
    return chunks, before


def apply(op: Op, base: Path) -> None:
    """Carry out one op in the sandbox ``base``."""
    target = base / op.path
    if op.op == "delete":
        target.unlink(missing_ok=True)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    data = op.content.encode("utf-8")
    if op.op == "write":
        with target.open("r+b" if target.exists() else "wb") as fh:
            fh.write(data)
            fh.truncate()
    else:
        tmp = target.with_name(f".{target.name}.timeline-tmp")
        tmp.write_bytes(data)
        if op.mode is not None:
            tmp.chmod(op.mode)
        os.replace(tmp, target)
    if op.mode is not None:
        target.chmod(op.mode)


def reset(base: Path, files: Mapping[str, str], ops: Sequence[Op]) -> None:
    """The sandbox as before the stream: ``files`` as given, timeline-only paths gone."""
    for op in ops:
        if op.path not in files:
            (base / op.path).unlink(missing_ok=True)
    for rel, content in files.items():
        p = base / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.unlink(missing_ok=True)  # a fresh file each replay, like the first one
        p.write_bytes(content.encode("utf-8") if isinstance(content, str) else bytes(content))
