"""``dev.py test PATH`` installs only what the selected tests need (tests/needs.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.needs import static_needs

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("args", "needs"),
    [
        (["tests/unit"], set()),
        (["tests/unit/test_config.py", "-k", "bind"], set()),
        # (the whole story with the real agent lies there too: it needs Hermes)
        (["tests/e2e/owui"], {"openwebui", "hermes"}),
        (["tests/e2e/owui/test_openwebui_jwt.py::test_x"], {"openwebui"}),
        (["tests/e2e/postgres"], {"postgres"}),
        (["tests/e2e/test_multi_instance.py"], {"postgres"}),
        (["tests/e2e/test_bench.py"], {"valgrind"}),
    ],
)
def test_the_file_level_scan(args: list[str], needs: set[str]) -> None:
    assert static_needs(args) == needs


def test_the_whole_suite_needs_everything() -> None:
    assert {"openwebui", "postgres", "valgrind"} <= static_needs([])
    assert {"openwebui", "postgres", "valgrind"} <= static_needs(["-x", "tests"])


def _exact(tmp_path: Path, *args: str) -> set[str]:
    report = tmp_path / "needs.json"
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-p", "tests.needs", "--collect-only", "-q"),
            *("-p", "no:cacheprovider", "--needs-report", str(report), *args),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return set(json.loads(report.read_text())["needs"])


def test_a_selection_is_collected_exactly(tmp_path: Path) -> None:
    """``-m``/``-k`` select tests inside files: pytest collects them and says."""
    assert _exact(tmp_path, "tests/e2e/test_shared_store.py", "-k", "sqlite") == set()
    assert _exact(tmp_path, "tests/e2e/test_shared_store.py", "-m", "postgres") == {"postgres"}
    assert _exact(tmp_path, "tests/e2e/owui", "-m", "openwebui", "-k", "jwt") == {"openwebui"}


def test_a_benchmark_selection_needs_valgrind(tmp_path: Path) -> None:
    assert _exact(tmp_path, "tests/e2e/test_bench.py", "-k", "instructions") == {"valgrind"}
