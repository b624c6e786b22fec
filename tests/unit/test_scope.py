"""A user reaches only their own files: per-principal scope and agent state.

Real files under ``tmp_path``, a real SQLite store. The same checks mint links and
serve downloads, so each case asks both where it matters.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from gateway.core.errors import ConfigError, Gone
from gateway.links.agenthome import HERMES_ENTRIES, AgentHomes
from gateway.links.artifacts import ArtifactService
from gateway.links.signing import Signer
from gateway.ops.config import config_from_dict, principal_folder
from gateway.store import SQLiteStore

ALICE = {"key": "alice-key-0123456789abcdef", "principal": "alice"}
BOB = {"key": "bob-key-0123456789abcdefgh", "principal": "bob"}
PROXY = {"key": "proxy-key-0123456789abcdef", "principal": "owui", "role": "proxy"}


def service(tmp_path: Path, **artifacts: Any) -> ArtifactService:
    config = config_from_dict(
        {
            "state_dir": str(tmp_path / "state"),
            "artifacts": artifacts,
            "auth": {"keys": [ALICE, BOB, PROXY]},
        }
    )
    return ArtifactService(config, SQLiteStore(tmp_path / "state" / "g.sqlite3"), Signer.generate())


def write(path: Path, text: str = "x") -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


@pytest.fixture
def users(tmp_path: Path) -> Path:
    return tmp_path / "users"


def test_a_principal_gets_links_only_in_its_own_folder(tmp_path: Path, users: Path) -> None:
    svc = service(tmp_path, roots=[str(users / "{principal}" / "out")])
    mine = write(users / "alice" / "out" / "q3-plan.txt")
    owui = write(users / "openwebui+0b2c-77" / "out" / "r.md")
    assert svc.inspect(mine, "alice") is not None
    assert svc.inspect(mine, "bob") is None  # the same answer as for a missing file
    assert svc.inspect(str(users / "bob" / "out" / "none.txt"), "bob") is None
    assert svc.inspect(owui, "openwebui:0b2c-77") is not None
    assert svc.inspect(owui, "openwebui:0b2c-78") is None
    assert svc.inspect(str(users / "alice" / "q3.txt"), "alice") is None  # not under out/


def test_principal_folders_never_collide_and_dots_have_none() -> None:
    assert principal_folder("openwebui:ab") == "openwebui+ab"
    assert principal_folder("openwebui-ab") == "openwebui-ab"
    assert principal_folder("a@b.c") == "a@b.c"
    assert principal_folder(".") is None and principal_folder("..") is None


def test_a_symlink_never_widens_a_scope(tmp_path: Path, users: Path) -> None:
    """Whatever the agent links (a principal's folder, a file inside it), the file's real
    place decides."""
    svc = service(tmp_path, roots=[str(users / "{principal}")])
    secret = write(users / "alice" / "q3-plan.txt", "alice's")
    (users / "bob").parent.mkdir(exist_ok=True)
    os.symlink(users / "alice", users / "bob")  # bob's folder IS alice's
    assert svc.inspect(str(users / "bob" / "q3-plan.txt"), "bob") is None
    carol = users / "carol"
    carol.mkdir()
    os.symlink(secret, carol / "plan.txt")  # a link to alice's file in carol's folder
    assert svc.inspect(str(carol / "plan.txt"), "carol") is None
    assert svc.inspect(secret, "alice") is not None


def test_scopes_replace_roots_and_shared_roots_are_everyones(tmp_path: Path) -> None:
    profile = tmp_path / "hermes" / "profiles" / "alice" / "work"
    shared = tmp_path / "team"
    svc = service(
        tmp_path,
        roots=[str(tmp_path / "users" / "{principal}")],
        shared_roots=[str(shared)],
        scopes=[{"principal": "alice", "roots": [str(profile)]}],
    )
    report = write(profile / "report.md")
    common = write(shared / "handbook.pdf")
    alice_default = write(tmp_path / "users" / "alice" / "x.txt")
    assert svc.inspect(report, "alice") is not None
    assert svc.inspect(report, "bob") is None
    assert svc.inspect(alice_default, "alice") is None  # her scope replaces roots
    assert svc.inspect(common, "alice") is not None
    assert svc.inspect(common, "bob") is not None
    assert svc.scope("bob") == (str(tmp_path / "users" / "bob"), str(shared))


async def test_a_download_checks_the_owners_scope_again(tmp_path: Path, users: Path) -> None:
    """A link minted in scope stops working if its file is no longer in the owner's
    scope (an operator moved the folders): 410, never another's bytes."""
    svc = service(tmp_path, roots=[str(users / "{principal}")])
    f = write(users / "alice" / "a.txt", "a")
    facts = svc.inspect(f, "alice")
    assert facts is not None
    rec = svc.mint(facts, "alice", "private")
    os.close(await svc.open_verified(rec))
    moved = svc.mint(facts, "bob", "private")  # (never minted so: a store edited by hand)
    with pytest.raises(Gone):
        await svc.open_verified(moved)


@pytest.mark.parametrize(
    "artifacts",
    [
        {"roots": ["/srv/out"]},  # written without {principal}
        {},  # the default is per principal, but an explicit plain root is not
    ][:1],
)
def test_a_shared_root_must_be_said_to_be_shared(tmp_path: Path, artifacts: Any) -> None:
    with pytest.raises(ConfigError) as info:
        service(tmp_path, **artifacts)
    assert info.value.key == "artifacts.roots[0]"
    assert "shared_roots" in str(info.value) and "{principal}" in str(info.value)
    one_user = config_from_dict({"artifacts": artifacts, "auth": {"keys": [ALICE]}})
    assert one_user.artifacts.roots == (Path("/srv/out"),)
    several = config_from_dict({"auth": {"keys": [ALICE, BOB]}})
    assert "{principal}" in str(several.artifacts.roots[0])  # the default: one folder each


@pytest.mark.parametrize(
    ("roots", "message"),
    [
        (["/srv/{principal}/x/{principal}"], "once"),
        (["/srv/user-{principal}"], "whole folder name"),
    ],
)
def test_the_placeholder_is_one_whole_folder_name(roots: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_dict({"artifacts": {"roots": roots}})
    assert message in str(info.value)
    with pytest.raises(ConfigError):
        config_from_dict({"artifacts": {"shared_roots": ["/srv/{principal}"]}})


# --------------------------------------------------------------------------- agent state


def hermes_home(at: Path) -> Path:
    """A folder as Hermes leaves its home (hermes-agent 0.19.0)."""
    write(at / "config.yaml", "model: {}\n")
    write(at / "state.db", "")
    (at / "memories").mkdir(exist_ok=True)
    return at


FILE_ENTRIES = (".json", ".db", ".md", ".yaml", ".lock", ".log", ".env")


def entry_file(home: Path, entry: str) -> Path:
    """A file that is ``entry`` of ``home`` (the entry itself, or a file in it)."""
    name = entry.replace("*", "-wal")
    is_file = name.lower().endswith(FILE_ENTRIES) or (name.startswith(".") and "." in name[1:])
    return home / name if is_file else home / name / "x.txt"


@pytest.mark.parametrize("entry", HERMES_ENTRIES)
@pytest.mark.parametrize("where", ["the root", "below the root", "above the root"])
def test_an_agents_state_is_never_an_artifact(tmp_path: Path, entry: str, where: str) -> None:
    """Each thing Hermes keeps in its home, the home being the root (a profile folder
    listed as a root), a folder below the root (found by its contents, whatever its
    name) or above it (a root that is one of the home's own folders)."""
    root = tmp_path / "root"
    home = hermes_home(root / "agent" if where == "below the root" else root)
    target = entry_file(home, entry)
    if where == "above the root":
        if target.parent == home:
            pytest.skip("a root is a folder: this entry is a file")
        root = target.parent
    write(target, "secret state")
    svc = service(tmp_path, shared_roots=[str(root)])
    assert svc.inspect(str(target), "alice") is None, target


def test_everything_in_an_agent_home_is_denied_but_a_root_of_ones_own_in_it(
    tmp_path: Path,
) -> None:
    """An allowlist: whatever Hermes keeps in its home (tomorrow's files too) is refused
    when the root is the home; a root the operator put inside it (the agent's
    workspace) is allowed, unless it is one of Hermes's own folders."""
    home = hermes_home(tmp_path / "profiles" / "alice")
    report = write(home / "workspace" / "report.md")
    for name in ("sessions/s1.json", "auth.json", "future-token.json", "mcp-tokens/x.json"):
        write(home / name)
    whole = service(tmp_path, shared_roots=[str(home)])
    for name in ("workspace/report.md", "sessions/s1.json", "auth.json", "future-token.json"):
        assert whole.inspect(str(home / name), "alice") is None, name
    own = service(tmp_path, shared_roots=[str(home / "workspace"), str(home / "sessions")])
    assert own.inspect(report, "alice") is not None
    assert own.inspect(str(home / "sessions" / "s1.json"), "alice") is None


def test_a_home_can_be_declared(tmp_path: Path) -> None:
    """A fresh home without Hermes's files yet, named otherwise: artifacts.agent_homes."""
    home = tmp_path / "agent-home"
    write(home / "logs" / "agent.log")
    assert (
        service(tmp_path, shared_roots=[str(home)]).inspect(
            str(home / "logs" / "agent.log"), "alice"
        )
        is not None
    )
    declared = service(tmp_path, shared_roots=[str(home)], agent_homes=[str(home)])
    assert declared.inspect(str(home / "logs" / "agent.log"), "alice") is None


def test_the_dot_hermes_folder_is_denied_by_name(tmp_path: Path) -> None:
    root = tmp_path / "home"
    svc = service(tmp_path, shared_roots=[str(root)])
    assert svc.inspect(write(root / ".hermes" / "logs" / "agent.log"), "alice") is None
    assert svc.inspect(write(root / ".hermes" / "anything.txt"), "alice") is None
    assert svc.inspect(write(root / "project" / "notes.txt"), "alice") is not None


def test_a_home_that_appears_later_is_seen_after_the_cache_time() -> None:
    now = [0.0]
    homes = AgentHomes(clock=lambda: now[0])
    assert not homes.denied("/nonexistent-zq/sessions/a.json")
    now[0] += 100
    assert not homes.denied("/nonexistent-zq/sessions/a.json")


def test_config_cases_the_red_team_found(tmp_path: Path) -> None:
    """{principal} in a scope root is refused; a scope root above everyone's folders and
    principals that differ only in case are warned about."""
    from gateway.cli.config import config_warnings
    from gateway.ops.config import inspect_config

    with pytest.raises(ConfigError) as info:
        config_from_dict(
            {"artifacts": {"scopes": [{"principal": "bob", "roots": ["/srv/{principal}"]}]}}
        )
    assert info.value.key == "artifacts.scopes[0].roots[0]"
    users = tmp_path / "users"
    data = {
        "artifacts": {
            "roots": [str(users / "{principal}")],
            "scopes": [{"principal": "bob", "roots": [str(users)]}],
        },
        "auth": {
            "keys": [ALICE, BOB, {**BOB, "key": "bob2-key-0123456789abcdefg", "principal": "Bob"}]
        },
    }
    text = " ".join(config_warnings(inspect_config(data)))
    assert "holds every principal's {principal} folder" in text
    assert "differ only in letter case" in text
