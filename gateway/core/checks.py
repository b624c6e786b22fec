"""Checks by shape for the structural values an upstream sends (sans-IO).

Nothing from upstream is trusted as path-free because of the key it sits under: an
``id`` must look like an id, a ``finish_reason`` must be a known word, an ``index``
a small integer. A value that fails its check is replaced (ids, names) or dropped;
free text goes through the rewriter instead. Also here: the JSON nesting bound that
protects every parser from deeply nested input.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = [
    "FINISH_REASONS",
    "ROLES",
    "JSONTooDeep",
    "check_created",
    "check_id",
    "check_index",
    "check_name",
    "check_usage",
    "event_name",
    "identifier",
    "json_depth",
    "loads_bounded",
]

FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call"})
ROLES = frozenset({"assistant", "user", "system", "tool", "developer", "function"})

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
_EVENT = re.compile(r"[A-Za-z][A-Za-z0-9_.:-]{0,63}")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
_TOKENS = re.compile(r"[a-z][a-z0-9_]{0,62}_tokens")
_TOKEN_DETAILS = re.compile(r"[a-z][a-z0-9_]{0,62}_tokens_details")
_BRACKETS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)
MAX_INT = 2**53


def check_id(value: object) -> str | None:
    """An id such as ``chatcmpl-abc`` or ``call_123`` (never a path: no ``/`` ``\\`` ``~``)."""
    return value if isinstance(value, str) and _ID.fullmatch(value) else None


def check_name(value: object) -> str | None:
    """A tool/function name (OpenAI's alphabet, at most 64 characters)."""
    return value if isinstance(value, str) and _NAME.fullmatch(value) else None


def event_name(value: str) -> str | None:
    """An SSE event name we may relay (``hermes.tool.progress``)."""
    return value if _EVENT.fullmatch(value) else None


def identifier(value: object) -> bool:
    """A JSON key we may relay from an unknown event (plain identifier)."""
    return isinstance(value, str) and _IDENT.fullmatch(value) is not None


def check_index(value: object, limit: int) -> int | None:
    """A small non-negative integer (choice or tool-call index)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < limit:
        return None
    return value


def check_created(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**40:
        return None
    return value


def _count(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and 0 <= value < MAX_INT


def check_usage(value: object) -> dict[str, Any] | None:
    """Token counts: ``*_tokens`` integers (``prompt_tokens``, ``total_tokens``...) and
    ``*_tokens_details`` objects of them (``prompt_tokens_details.cached_tokens``);
    any other key, and any other value, is dropped."""
    if not isinstance(value, dict):
        return None
    out: dict[str, Any] = {}
    for key, v in value.items():
        if not isinstance(key, str):
            continue  # pragma: no cover - JSON keys are strings
        if _TOKENS.fullmatch(key) and _count(v):
            out[key] = v
        elif _TOKEN_DETAILS.fullmatch(key) and isinstance(v, dict):
            inner = {k: n for k, n in v.items() if _TOKENS.fullmatch(k) and _count(n)}
            if inner:
                out[key] = inner
    return out or None


class JSONTooDeep(ValueError):
    """JSON text nested deeper than allowed."""


def json_depth(text: str | bytes) -> int:
    """The deepest nesting of arrays/objects in JSON text (strings skipped)."""
    s = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    depth = deepest = 0
    for m in _BRACKETS.finditer(s):
        ch = m.group()
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def loads_bounded(
    text: str | bytes, max_depth: int, decoder: json.JSONDecoder | None = None
) -> Any:
    """``json.loads`` refusing nesting deeper than ``max_depth`` (:class:`JSONTooDeep`);
    ``decoder``: one made once with the options wanted (``json.loads`` with options
    makes a decoder and its scanner per call).

    The exact depth is only computed when the text holds more brackets than the bound
    (rare), so ordinary chunks pay one ``count`` per bracket kind.
    """
    if isinstance(text, bytes):
        brackets = text.count(b"[") + text.count(b"{")
    else:
        brackets = text.count("[") + text.count("{")
    if brackets > max_depth and json_depth(text) > max_depth:
        raise JSONTooDeep(f"JSON nested deeper than {max_depth} levels")
    try:
        if decoder is None:
            return json.loads(text)
        if isinstance(text, bytes):  # as json.loads reads bytes
            text = text.decode(json.detect_encoding(text), "surrogatepass")
        if text.startswith("\ufeff"):  # as json.loads refuses it
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        return decoder.decode(text)
    except RecursionError:  # pragma: no cover - guarded by the depth check above
        raise JSONTooDeep(f"JSON nested deeper than {max_depth} levels") from None
