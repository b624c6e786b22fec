"""The self-test's file is written without following a link (a red-team finding: the
agent can make links in a principal's folder, and the self-test wrote through them)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gateway.api.smoke import (
    SELFTEST_DIR,
    selftest_content,
    selftest_file_name,
    write_selftest_file,
)

NONCE = "ab" * 8


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    v = tmp_path / "alice" / "plan.txt"
    v.parent.mkdir()
    v.write_text("alice's plan")
    return v


def test_a_link_named_like_the_test_file_is_replaced_not_written(
    tmp_path: Path, victim: Path
) -> None:
    root = tmp_path / "bob"
    (root / SELFTEST_DIR).mkdir(parents=True)
    os.symlink(victim, root / SELFTEST_DIR / selftest_file_name(NONCE))
    path = write_selftest_file(root, NONCE)
    assert victim.read_text() == "alice's plan"
    assert not path.is_symlink() and path.read_bytes() == selftest_content(NONCE)


def test_a_test_folder_that_is_a_link_is_refused(tmp_path: Path, victim: Path) -> None:
    root = tmp_path / "bob"
    root.mkdir()
    os.symlink(victim.parent, root / SELFTEST_DIR)
    old = victim.parent / "artifact-gateway-selftest-old.txt"
    old.write_text("x")
    os.utime(old, (0, 0))
    with pytest.raises(OSError):
        write_selftest_file(root, NONCE)
    assert sorted(p.name for p in victim.parent.iterdir()) == [old.name, "plan.txt"]


def test_a_root_reached_through_a_link_is_refused(tmp_path: Path, victim: Path) -> None:
    os.symlink(victim.parent, tmp_path / "bob")
    with pytest.raises(OSError):
        write_selftest_file(tmp_path / "bob", NONCE)
    assert [p.name for p in victim.parent.iterdir()] == ["plan.txt"]


def test_old_test_files_are_pruned_and_links_removed_as_links(tmp_path: Path, victim: Path) -> None:
    root = tmp_path / "bob"
    folder = root / SELFTEST_DIR
    folder.mkdir(parents=True)
    stale = folder / "artifact-gateway-selftest-0000.txt"
    stale.write_text("old")
    os.utime(stale, (0, 0))
    link = folder / "artifact-gateway-selftest-link.txt"
    os.symlink(victim, link)
    os.utime(link, (0, 0), follow_symlinks=False)
    write_selftest_file(root, NONCE)
    assert not stale.exists() and not link.is_symlink() and victim.exists()
