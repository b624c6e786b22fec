"""pytest plugin (``addopts`` in pyproject.toml): a stop signal stops the whole run.

SIGTERM (what ``dev.py`` sends, and ``timeout``, an IDE's stop button, a supervisor)
stops the session after the test it interrupts, its fixtures torn down: the test is
interrupted as Ctrl-C would (SIGINT: trio raises it at a safe point). Before, SIGTERM
killed pytest on the spot and left the servers its fixtures started running. A Ctrl-C
that a trio test reports as its own failure (wrapped in an exception group) stops the
session too, as a bare KeyboardInterrupt does, instead of the rest of the file running
against servers that are already gone.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Generator

import pytest


def pytest_sessionstart(session: pytest.Session) -> None:
    if threading.current_thread() is not threading.main_thread():
        return

    def on_sigterm(signum: int, frame: object) -> None:
        session.shouldstop = "stopped by SIGTERM"
        os.kill(os.getpid(), signal.SIGINT)

    signal.signal(signal.SIGTERM, on_sigterm)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if call.excinfo is not None and _interrupted(call.excinfo.value):
        item.session.shouldstop = item.session.shouldstop or "interrupted (SIGINT)"
    return report


def _interrupted(exc: BaseException) -> bool:
    if isinstance(exc, KeyboardInterrupt):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(_interrupted(e) for e in exc.exceptions)
    return isinstance(exc.__cause__ or exc.__context__, KeyboardInterrupt)
