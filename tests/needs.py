"""What the selected tests need besides the project's venv (read by ``dev.py test``).

Standard library only at import (``dev.py`` imports it before any venv exists); it is
also a pytest plugin (``-p tests.needs --needs-report FILE --collect-only``) that
writes the exact needs of the tests a selection (``-k``, ``-m``, node ids) collects.

A need is the name of an install step of ``dev.py``: ``openwebui`` (Open WebUI in a
cached venv and Debian's Chromium), ``hermes`` (the Hermes agent, when its installer
exists), ``postgres`` (PostgreSQL's server binaries) and ``valgrind``. A test needs one
when it carries its marker, lies in its folder, or uses one of its fixtures; the
static scan (:func:`static_needs`) over-approximates from the files' text, instantly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["NEEDS", "Need", "static_needs"]

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Need:
    marker: str
    folders: tuple[str, ...] = ()
    #: fixtures (exact) and words of a test file's text (static) that imply it
    fixtures: tuple[str, ...] = ()
    words: tuple[str, ...] = ()
    #: the words decide for a collected test too (no marker or fixture tells)
    by_file: bool = False


NEEDS = {
    "openwebui": Need("openwebui", folders=("tests/e2e/owui",), words=("mark.openwebui",)),
    "hermes": Need("hermes", folders=("tests/e2e/hermes",), words=("mark.hermes",)),
    "postgres": Need(
        "postgres",
        fixtures=("pg_cluster", "pg_url", "pg_empty_url"),
        words=(
            "pg_cluster",
            "pg_url",
            "pg_empty_url",
            "PgCluster",
            "mark.postgres",
            'BACKENDS = ("postgresql"',
        ),
    ),
    # the instruction-count benchmark's test (tests/e2e/test_bench.py)
    "valgrind": Need("valgrind", words=("instructions.available()",), by_file=True),
}


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def static_needs(args: list[str], root: Path = ROOT) -> set[str]:
    """The needs of every test file the path arguments of ``args`` name (all of
    ``tests/`` when none does): a superset of what a ``-k``/``-m`` selection needs."""
    paths = []
    for arg in args:
        if arg.startswith("-"):
            continue
        candidate = (root / arg.split("::", 1)[0]).resolve()
        if candidate.exists():
            paths.append(candidate)
    paths = paths or [root / "tests"]
    out: set[str] = set()
    for path in paths:
        for name, need in NEEDS.items():
            # a folder argument above a need's folder holds its tests
            if any(_inside(root / f, path) or _inside(path, root / f) for f in need.folders):
                out.add(name)
        files = [path] if path.is_file() else sorted(path.rglob("test_*.py"))
        for file in files:
            text = file.read_text(encoding="utf-8", errors="replace")
            out.update(n for n, need in NEEDS.items() if any(w in text for w in need.words))
    return out


def needs_of_items(items: list[Any], root: Path = ROOT) -> set[str]:
    """The exact needs of collected pytest items."""
    out: set[str] = set()
    texts: dict[Path, str] = {}
    for item in items:
        path = Path(str(item.path)).resolve()
        fixtures = set(getattr(item, "fixturenames", ()))
        for name, need in NEEDS.items():
            if (
                item.get_closest_marker(need.marker) is not None
                or any(_inside(path, root / f) for f in need.folders)
                or fixtures & set(need.fixtures)
            ):
                out.add(name)
            elif need.by_file:
                if path not in texts:
                    texts[path] = path.read_text(encoding="utf-8", errors="replace")
                if any(w in texts[path] for w in need.words):
                    out.add(name)
    return out


def pytest_addoption(parser: Any) -> None:
    parser.addoption(
        "--needs-report",
        metavar="FILE",
        help="write the install steps the collected tests need to FILE (JSON; dev.py)",
    )


def pytest_collection_finish(session: Any) -> None:
    target = session.config.getoption("--needs-report")
    if target:
        report = {"needs": sorted(needs_of_items(session.items)), "tests": len(session.items)}
        Path(target).write_text(json.dumps(report) + "\n", encoding="utf-8")
