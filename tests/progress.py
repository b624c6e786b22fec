"""pytest plugin: one summary line per test folder as soon as that folder is done.

``python3 dev.py test`` loads it (``-p tests.progress``), so the whole suite reports
``tests/e2e: 405 passed, 1 skipped in 141.2 s`` and then ``tests/unit: ...`` instead of
one total at the very end. Any pytest arguments still work (``dev.py test tests/unit
-k config``); a folder's line counts only the tests selected.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Generator
from typing import Any

import pytest

_ORDER = ("failed", "passed", "skipped", "xfailed", "xpassed", "error")


def _folder(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else (parts[0] if len(parts) > 1 else ".")


def _outcome(report: pytest.TestReport) -> str | None:
    """What the terminal summary would count this report as (None: not counted)."""
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else ("xpassed" if report.passed else None)
    if report.when == "call":
        return str(report.outcome)
    if report.failed:
        return "error"
    if report.skipped:
        return "skipped"
    return None


class FolderProgress:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.last: dict[str, str] = {}  # folder -> nodeid of its last selected test
        self.counts: dict[str, Counter[str]] = {}
        self.started: dict[str, float] = {}
        self.final: str | None = None  # the last test of the run
        self.finished: set[str] = set()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for item in session.items:
            self.last[_folder(item.nodeid)] = item.nodeid
        self.final = session.items[-1].nodeid if session.items else None

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.started.setdefault(_folder(nodeid), time.monotonic())

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.finished.add(report.nodeid)
        outcome = _outcome(report)
        if outcome is not None:
            self.counts.setdefault(_folder(report.nodeid), Counter())[outcome] += 1

    @pytest.hookimpl(trylast=True)  # after the terminal reporter's own dots
    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        folder = _folder(nodeid)
        if self.last.get(folder) == nodeid and nodeid != self.final:
            self._report(folder, end_line=True)

    @pytest.hookimpl(wrapper=True, tryfirst=True)  # outermost: after the final "[100%]"
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        result = yield
        if self.final is not None and self.final in self.finished:
            self._report(_folder(self.final), end_line=False)
        return result

    def _report(self, folder: str, *, end_line: bool) -> None:
        counts = self.counts.get(folder, Counter())
        summary = ", ".join(f"{counts[k]} {k}" for k in _ORDER if counts[k]) or "no tests"
        seconds = time.monotonic() - self.started.get(folder, time.monotonic())
        reporter: Any = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        if end_line and reporter._tw.width_of_current_line:
            # finish the reporter's line of dots with its percentage, as it would
            if getattr(reporter, "_show_progress_info", False):
                reporter._write_progress_information_filling_space()
            reporter.currentfspath = None  # the next file starts on a fresh line
        reporter.ensure_newline()
        reporter._tw.line()
        reporter.write_line(f"{folder}: {summary} in {seconds:.1f} s", bold=True)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(FolderProgress(config), "folder-progress")
