"""Log lines an operator can read, in one format for every serving command.

:func:`configure_logging` installs one handler on the root logger (stderr). Every line
names the process that wrote it: ``gateway`` (the API server), ``proxy`` (the runs
proxy), ``upstream`` (the demo upstream). ``gateway demo`` serves all three apps in one
OS process, so the name is not the process's: :func:`gateway.http.serve.serve_app` runs
each app inside :func:`tagged` with :func:`app_tag`, a context variable that every task
of that server inherits; a line written outside any server (signals, start-up) carries
the name given to :func:`configure_logging`.

Text lines (``fmt="text"``), local time::

    2026-01-05 14:03:07.412 gateway  INFO  access: method=GET path=/health ... principal=-

JSON lines (``fmt="json"``), one object per line, for log shippers; the field names
are stable: ``ts`` (UTC, RFC 3339, milliseconds), ``level`` (``debug`` ... ``critical``),
``process``, ``logger``, ``msg``, ``pid``, ``exc`` (a traceback, when there is one),
and on access lines ``method``, ``path``, ``route``, ``status``, ``bytes``,
``duration_ms``, ``principal``.

httpx and httpcore log every request at INFO; they are held at WARNING unless the
level is ``debug``. hypercorn's error log (``hypercorn.error``: "Running on ...",
protocol errors) is kept.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Any, Literal, NamedTuple, TextIO

__all__ = [
    "AccessEntry",
    "JsonFormatter",
    "TextFormatter",
    "access_message",
    "app_tag",
    "configure_logging",
    "format_access_line",
    "log_access",
    "tagged",
]

Format = Literal["text", "json"]

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
_TEXT_LEVEL = {"WARNING": "WARN", "CRITICAL": "CRIT"}
#: quart app names -> the tag of their lines
_APP_TAGS = {
    "gateway": "gateway",
    "gateway-proxy": "proxy",
    "gateway.cli.demo_upstream": "upstream",
}
#: loggers too chatty at INFO: one line per outgoing request
_QUIET = ("httpx", "httpcore")

_tag: contextvars.ContextVar[str | None] = contextvars.ContextVar("gateway_log_tag", default=None)


@contextmanager
def tagged(tag: str) -> Iterator[None]:
    """Lines logged in this context (and in tasks started from it) carry ``tag``."""
    token = _tag.set(tag)
    try:
        yield
    finally:
        _tag.reset(token)


def app_tag(app: Any) -> str:
    """The tag of an app's lines: its ``log_tag`` attribute, else from its name."""
    explicit = getattr(app, "log_tag", None)
    if isinstance(explicit, str) and explicit:
        return explicit
    name = str(getattr(app, "name", "") or "app")
    return _APP_TAGS.get(name, name)


# --------------------------------------------------------------------------- access lines


@dataclass(frozen=True, slots=True)
class AccessEntry:
    """One request, as the access log shows it. ``principal`` is ``"-"`` before auth."""

    method: str
    path: str
    route: str
    status: int
    bytes: int
    duration_ms: float
    principal: str


#: the access entry's fields in order (``asdict`` deep-copies: slow, once per request)
_ACCESS_FIELDS = tuple(f.name for f in fields(AccessEntry))


#: this process's id for access lines (``os.getpid`` is a system call per request);
#: a forked child sets its own
_pid = os.getpid()


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)


#: a value that goes out bare: printable ASCII but space, double quote, equals, backslash
_BARE = re.compile(r"[!#-<>-\[\]-~]+")


def _logfmt_value(value: object) -> str:
    text = f"{value:.1f}" if isinstance(value, float) else str(value)
    if _BARE.fullmatch(text):
        return text
    return json.dumps(text)  # quoted, control characters escaped: one line, always


def access_message(entry: AccessEntry) -> str:
    """``method=GET path=/health route=/health status=200 bytes=54 duration_ms=1.2 principal=-``.

    ``key=value`` pairs (logfmt): a value with spaces, quotes, ``=`` or control
    characters is JSON-quoted, so a crafted path cannot forge a second line.
    """
    if type(entry.status) is int and type(entry.bytes) is int:  # numbers need no quotes
        quoted = _logfmt_value
        return (
            f"method={quoted(entry.method)} path={quoted(entry.path)}"
            f" route={quoted(entry.route)} status={entry.status} bytes={entry.bytes}"
            f" duration_ms={quoted(entry.duration_ms)} principal={quoted(entry.principal)}"
        )
    return " ".join(f"{k}={_logfmt_value(getattr(entry, k))}" for k in _ACCESS_FIELDS)


def log_access(
    logger: logging.Logger,
    principal: str,
    method: str,
    path: str,
    route: str,
    status: int,
    nbytes: int,
    duration_ms: float,
) -> None:
    """Write one access line (INFO) on ``logger``; the fields also go to JSON lines.

    The arguments come in the order the connection class has them; never pass a key.
    """
    entry = AccessEntry(method, path, route, status, nbytes, duration_ms, principal)
    handler = _direct_handler(logger)
    if handler is not None:
        handler.write_access(logger.name, entry)
        return
    logger.info("%s", access_message(entry), extra={"access": entry})


def _direct_handler(logger: logging.Logger) -> _GatewayHandler | None:
    """The handler of :func:`configure_logging` when it alone would write an INFO line
    of ``logger`` unchanged (no other handler, filter or level on the way), so the line
    may be written without building a ``LogRecord`` (an access line per request)."""
    handler = _installed
    root = logging.root
    if handler is None or root.handlers != [handler] or root.manager.disable >= logging.INFO:
        return None
    if logger.filters or not logger.isEnabledFor(logging.INFO):
        return None
    node: Any = logger
    while node is not root:
        if node.handlers or not node.propagate:
            return None
        node = node.parent
    if handler.level > logging.INFO or handler.filters != handler.own_filters:
        return None
    if handler.formatter is not handler.own_formatter:
        return None
    return handler


def format_access_line(
    entry: AccessEntry,
    fmt: Format,
    *,
    process: str = "gateway",
    logger: str = "gateway.access",
    when: float | None = None,
) -> str:
    """One complete access-log line in ``fmt``, exactly as :func:`configure_logging` writes it."""
    record = logging.LogRecord(
        logger, logging.INFO, __file__, 0, "%s", (access_message(entry),), None
    )
    record.access = entry
    record.gateway_process = process
    if when is not None:
        record.created = when
        record.msecs = (when - int(when)) * 1000
    formatter: logging.Formatter = JsonFormatter() if fmt == "json" else TextFormatter()
    return formatter.format(record)


# --------------------------------------------------------------------------- formatters


def _component(name: str) -> str:
    """``gateway.access`` -> ``access``; ``hypercorn.error`` -> ``hypercorn``; ``gateway`` -> ``""``."""
    if name in ("gateway", "root"):
        return ""
    if name.startswith("gateway."):
        return name[len("gateway.") :]
    return name.split(".", 1)[0]


class LineParts(NamedTuple):
    """What a line is made of (a record's fields, or an access entry's)."""

    created: float
    msecs: float
    levelname: str
    name: str
    process: str
    message: str
    pid: int | None
    access: object

    @classmethod
    def of(cls, record: logging.LogRecord) -> LineParts:
        return cls(
            record.created,
            record.msecs,
            record.levelname,
            record.name,
            getattr(record, "gateway_process", "gateway"),
            record.getMessage(),
            record.process,
            getattr(record, "access", None),
        )


class TextFormatter(logging.Formatter):
    """``<local time> <process> <LEVEL> <component>: <message>``, traceback lines after."""

    def format(self, record: logging.LogRecord) -> str:
        line = self.plain_line(LineParts.of(record))
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        elif record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line

    @staticmethod
    def plain_line(parts: LineParts) -> str:
        """A line without a traceback (what :meth:`format` writes for such a record)."""
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(parts.created))
        level = _TEXT_LEVEL.get(parts.levelname, parts.levelname)
        component = _component(parts.name)
        message = parts.message
        return f"{when}.{int(parts.msecs):03d} {parts.process:<8} {level:<5} " + (
            f"{component}: {message}" if component else message
        )


class JsonFormatter(logging.Formatter):
    """One JSON object per line with the stable field names of the module docstring."""

    def format(self, record: logging.LogRecord) -> str:
        out = self.fields(LineParts.of(record))
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        elif record.stack_info:
            out["exc"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False, default=str)

    @staticmethod
    def fields(parts: LineParts) -> dict[str, Any]:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(parts.created))
        out: dict[str, Any] = {
            "ts": f"{stamp}.{int(parts.msecs):03d}Z",
            "level": parts.levelname.lower(),
            "process": parts.process,
            "logger": parts.name,
            "msg": parts.message,
            "pid": parts.pid,
        }
        access = parts.access
        if isinstance(access, AccessEntry):
            out.update((k, getattr(access, k)) for k in _ACCESS_FIELDS)
            out["duration_ms"] = round(access.duration_ms, 1)
        return out

    @classmethod
    def plain_line(cls, parts: LineParts) -> str:
        """A line without a traceback (what :meth:`format` writes for such a record)."""
        return json.dumps(cls.fields(parts), ensure_ascii=False, default=str)


class _TagFilter(logging.Filter):
    """Stamps each record with the tag of the context that logged it."""

    def __init__(self, default: str) -> None:
        super().__init__()
        self.default = default

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "gateway_process"):
            record.gateway_process = _tag.get() or self.default
        return True


class _GatewayHandler(logging.StreamHandler[TextIO]):
    """The handler :func:`configure_logging` owns (a second call replaces it); it also
    writes access lines without a ``LogRecord`` (:func:`log_access`)."""

    own_filters: list[Any]
    own_formatter: logging.Formatter
    tag: _TagFilter
    line: Callable[[LineParts], str]

    def write_access(self, name: str, entry: AccessEntry) -> None:
        """Write ``entry``'s line exactly as a record would be written (a failing stream
        is reported as ``StreamHandler.emit`` reports it)."""
        created = time.time()
        msecs = int((created - int(created)) * 1000) + 0.0  # as LogRecord computes it
        process = _tag.get() or self.tag.default
        pid = _pid if logging.logProcesses else None
        line = self.line(
            LineParts(created, msecs, "INFO", name, process, access_message(entry), pid, entry)
        )
        with self.lock:  # type: ignore[union-attr]
            try:
                self.stream.write(line + self.terminator)
                self.stream.flush()
            except RecursionError:
                raise
            except Exception:  # reported as logging reports it, the line not written again
                record = logging.LogRecord(name, logging.INFO, __file__, 0, line, None, None)
                self.handleError(record)


#: the handler installed by :func:`configure_logging`, if any
_installed: _GatewayHandler | None = None


def configure_logging(
    process: str, fmt: Format = "text", level: str = "info", *, stream: TextIO | None = None
) -> logging.Handler:
    """Send every log line to ``stream`` (stderr) in ``fmt``, tagged ``process`` by default.

    Idempotent: a second call replaces the handler of the first. Other handlers on
    the root logger (pytest's capture, for one) are left alone.
    """
    if fmt not in ("text", "json"):
        raise ValueError(f"unknown log format {fmt!r}")
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _GatewayHandler)]:
        root.removeHandler(old)
    global _installed
    handler = _GatewayHandler(stream if stream is not None else sys.stderr)
    handler.tag = _TagFilter(process)
    handler.addFilter(handler.tag)
    handler.own_filters = list(handler.filters)
    formatter = JsonFormatter() if fmt == "json" else TextFormatter()
    handler.setFormatter(formatter)
    handler.own_formatter = formatter
    handler.line = formatter.plain_line
    root.addHandler(handler)
    _installed = handler
    root.setLevel(_LEVELS.get(level, logging.INFO))
    for name in _QUIET:
        logging.getLogger(name).setLevel(logging.DEBUG if level == "debug" else logging.WARNING)
    return handler
