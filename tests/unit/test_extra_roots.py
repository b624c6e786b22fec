"""The folders that hold a configured root are host folders too (for the scrubbers)."""

from __future__ import annotations

from pathlib import Path

from gateway.api.state import extra_roots
from gateway.core.rewrite import rewrite
from gateway.ops.config import config_from_dict


def roots_of(tmp_path: Path, *roots: str, mounts: tuple[str, ...] = ()) -> tuple[str, ...]:
    arts = {
        "roots": list(roots),
        "mounts": [{"agent_prefix": m, "host_dir": str(tmp_path)} for m in mounts],
    }
    return extra_roots(config_from_dict({"state_dir": str(tmp_path), "artifacts": arts}))


def test_the_folders_above_a_root_two_levels_deep(tmp_path: Path) -> None:
    got = roots_of(tmp_path, "/data/zqacme/artifacts", "/workspace", mounts=("/mnt/zqm/out",))
    assert got == (
        "/data/zqacme/artifacts",
        "/workspace",
        "/mnt/zqm/out",
        "/data/zqacme",
        "/mnt/zqm",
    )
    deep = roots_of(tmp_path, "/srv/a/b/c")
    assert deep == ("/srv/a/b/c", "/srv/a/b", "/srv/a")


def test_siblings_and_the_parent_of_a_root_are_paths(tmp_path: Path) -> None:
    roots = roots_of(tmp_path, "/data/zqacme/artifacts")
    for text, name in [
        ("see /data/zqacme/logs/run.log now", "see run.log now"),
        ("cd /data/zqacme/artifacts.bak/x && ls", "cd x && ls"),
        ("in /data/zqacme/artifacts/out.pdf", "in out.pdf"),
    ]:
        assert rewrite(text, extra_roots=roots) == name
    # prose and routes under other top folders stay as written
    for text in ("POST /data/v1/items", "the /data folder", "/database/zqacme/x"):
        assert rewrite(text, extra_roots=roots) == text
