"""What an agent says it writes (sans-IO).

An agent backend reports its tools as it runs them: the Hermes agent names the file a
tool writes before the tool runs (its chat stream's ``event: hermes.tool.progress``
``label``, its runs' ``tool.started`` ``preview``, its Responses' ``function_call``
``arguments``) and after (a ``function_call_output`` whose ``output`` holds
``files_modified`` or ``resolved_path``). The functions below pick, from one such
event, the strings that name files written; :func:`paths_in` reads the host paths in
them with the path detector. The answer's links take them as *reported* paths
(:meth:`gateway.links.artifacts.ResponseLinks.report`): when the answer ends each one that is
a servable file in the requester's scope joins the manifest, even if the text never
names it.

Only tools known to write files are believed (``write_file``, ``patch``): a
``read_file`` names a file the agent read, a ``terminal`` command names whatever its
words name. Everything here is a hint from upstream, never trusted further than that:
a reported path goes through the same checks as a path in the text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from gateway.core.paths import PathDetector, PathMatch
from gateway.core.rewrite import StreamRewriter

__all__ = [
    "WRITING_TOOLS",
    "paths_in",
    "response_item_texts",
    "run_event_texts",
    "tool_progress_texts",
]

#: the tools whose main argument is a file they write (Hermes's file-mutating tools)
WRITING_TOOLS = frozenset({"write_file", "patch"})
#: strings read from one event at most, and characters of one string
MAX_TEXTS = 64
MAX_TEXT_CHARS = 16_384
#: the file headers of a V4A patch (``*** Update File: <path>``)
_PATCH_FILE = re.compile(r"^\*\*\*\s+(?:Update|Add)\s+File:\s*(.+)$", re.MULTILINE)


def tool_progress_texts(data: Mapping[str, Any]) -> list[str]:
    """A chat stream's ``hermes.tool.progress`` data: its ``label`` when the tool
    writes files."""
    if _writes(data.get("tool")):
        return _strings([data.get("label")])
    return []


def run_event_texts(data: Mapping[str, Any]) -> list[str]:
    """A run event: the ``preview`` of a ``tool.started`` of a writing tool."""
    if data.get("event") == "tool.started" and _writes(data.get("tool")):
        return _strings([data.get("preview")])
    return []


def response_item_texts(item: Mapping[str, Any]) -> list[str]:
    """A Responses output item: a writing tool's ``function_call`` arguments (its
    ``path``, a patch's file headers), or a ``function_call_output``'s
    ``files_modified`` and ``resolved_path``."""
    kind = item.get("type")
    if kind == "function_call" and _writes(item.get("name")):
        args = _json_object(item.get("arguments"))
        found = [args.get("path")]
        patch = args.get("patch")
        if isinstance(patch, str):
            found += _PATCH_FILE.findall(patch[:MAX_TEXT_CHARS])
        return _strings(found)
    if kind == "function_call_output":
        out = _json_object(item.get("output"))
        files = out.get("files_modified")
        return _strings([*(files if isinstance(files, list) else ()), out.get("resolved_path")])
    return []


def paths_in(texts: Iterable[str], detector: PathDetector) -> list[str]:
    """The host paths (the detector's normal form) named in ``texts``, in order. Each
    text is a tool's argument, read as a quoted string: a path in it may hold spaces
    (``/srv/out/Q3 plan/report.md``), as the detector reads one between quotes."""
    found: list[str] = []
    for text in texts:
        rw = StreamRewriter(detector=detector)
        quoted = f'"{text}"' if '"' not in text else text
        for piece in (*rw.feed_pieces(quoted), *rw.flush_pieces()):
            if isinstance(piece, PathMatch) and not piece.overlong:
                found.append(piece.path)
    return found


def _writes(tool: object) -> bool:
    """Is ``tool`` (any JSON value from upstream) the name of a writing tool?"""
    return isinstance(tool, str) and tool in WRITING_TOOLS


def _strings(values: Iterable[object]) -> list[str]:
    return [v for v in values if isinstance(v, str) and 0 < len(v) <= MAX_TEXT_CHARS][:MAX_TEXTS]


def _json_object(value: object) -> dict[str, Any]:
    """``value`` (JSON text, or already an object) as a dict; {} when it is not one."""
    if isinstance(value, dict):
        return value
    if not isinstance(value, str) or len(value) > 4 * MAX_TEXT_CHARS:
        return {}
    try:
        obj = json.loads(value)
    except (ValueError, RecursionError):
        return {}
    return obj if isinstance(obj, dict) else {}
