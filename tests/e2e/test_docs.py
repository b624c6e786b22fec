"""The repository's own documentation is true for a newcomer with a fresh clone.

The repository is cloned into a temporary folder (only what is committed), then:

* every file path the README and ``docs/`` mention (in code spans and in links)
  exists in the clone;
* every command they show parses: ``gateway …`` and ``python -m harness…`` commands
  answer ``--help`` with exit 0, ``python3 dev.py X`` names a command ``dev.py`` has;
* ``gateway config example | gateway config check --config -`` passes;
* links between documents point at files of the repository, never outside it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOP_DIRS = ("gateway", "harness", "tests", "docs", "cassettes", "integrations", ".ci")
TOP_FILES = ("README.md", "CHANGELOG.md", "dev.py", "pyproject.toml")
_CODE = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
_PATHLIKE = re.compile(
    r"^(?:\.?/)?(?:" + "|".join(re.escape(d) for d in TOP_DIRS) + r")/[\w./{},*-]*$"
)
_PLACEHOLDER = re.compile(r"(?:^|/)[A-Z][A-Z_]+(?:\.|/|$)")  # cassettes/NAME.yaml
DEV_COMMANDS = ("run", "test", "lint", "bench", "setup", "help")


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    target = tmp_path_factory.mktemp("clone") / "repo"
    subprocess.run(
        ["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(target)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return target


def documents(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def _expand(path: str) -> Iterator[str]:
    """``gateway/fronts/{chat,responses}.py`` → both files."""
    m = re.search(r"\{([^{}]+)\}", path)
    if m is None:
        yield path
        return
    for alt in m.group(1).split(","):
        yield from _expand(path[: m.start()] + alt.strip() + path[m.end() :])


def mentioned_paths(doc: Path) -> set[str]:
    text = doc.read_text(encoding="utf-8")
    found: set[str] = set()
    for code in _CODE.findall(text):
        for word in code.split():
            word = word.strip(".,;:()'\"").split(":", 1)[0]
            if _PATHLIKE.match(word) or word in TOP_FILES:
                found.update(_expand(word))
    return {p for p in found if "*" not in p and "<" not in p and not _PLACEHOLDER.search(p)}


def test_every_path_the_docs_mention_exists(clone: Path) -> None:
    missing = []
    for doc in documents(clone):
        for path in sorted(mentioned_paths(doc)):
            if not (clone / path.lstrip("./")).exists():
                missing.append(f"{doc.relative_to(clone)}: {path}")
    assert not missing, "\n".join(missing)


def test_links_stay_inside_the_repository(clone: Path) -> None:
    bad = []
    for doc in documents(clone):
        prose = _CODE.sub("", _FENCE.sub("", doc.read_text(encoding="utf-8")))
        for target in _LINK.findall(prose):
            if re.match(r"^[a-z]+:", target) or target.startswith("#") or "<" in target:
                continue
            rel = target.split("#", 1)[0]
            if not rel:
                continue
            resolved = (doc.parent / rel).resolve()
            if not resolved.is_relative_to(clone.resolve()) or not resolved.exists():
                bad.append(f"{doc.relative_to(clone)}: {target}")
    assert not bad, "\n".join(bad)
    readme = (clone / "README.md").read_text(encoding="utf-8")
    assert "../shared" not in readme and "DESIGN.md" not in readme


def shown_commands(root: Path) -> list[list[str]]:
    """Command lines in the docs' fenced blocks (comments and prompts stripped)."""
    out: list[list[str]] = []
    for doc in documents(root):
        for block in _FENCE.findall(doc.read_text(encoding="utf-8")):
            for line in block.splitlines():
                line = line.split(" #", 1)[0].strip().removeprefix("$ ")
                if not line or "|" in line or "<" in line or "\\" in line:
                    continue
                try:
                    words = shlex.split(line)
                except ValueError:
                    continue
                words = [w for w in words if "=" not in w or w.startswith("-")]
                if words:
                    out.append(words)
    return out


def _gateway_path(words: list[str]) -> list[str] | None:
    """The subcommand words of a ``gateway …`` line (``None`` if it is not one)."""
    from gateway.cli import build_parser

    i = next((k for k, w in enumerate(words) if w.endswith("gateway")), None)
    if i is None or "/" in words[i].removesuffix("gateway").rstrip("/").replace(".venv/bin", ""):
        return None
    parser = build_parser()
    path: list[str] = []
    for word in words[i + 1 :]:
        choices = _choices(parser)
        if word not in choices:
            break
        path.append(word)
        parser = choices[word]
    return path


def _choices(parser: object) -> dict[str, object]:
    import argparse

    for action in getattr(parser, "_actions", ()):
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_every_command_the_docs_show_parses(clone: Path) -> None:
    failures = []
    checked = 0
    for words in shown_commands(clone):
        if words[0] in ("python3", "python") and words[1:2] == ["dev.py"]:
            if len(words) > 2 and words[2] not in DEV_COMMANDS:
                failures.append(" ".join(words))
            continue
        argv: list[str] | None = None
        if "-m" in words and words[words.index("-m") + 1 :][:1]:
            module = words[words.index("-m") + 1]
            if module.startswith(("harness", "gateway")):
                after = words[words.index("-m") + 2 :][:1]
                rest = [w for w in after if re.fullmatch(r"[a-z][a-z_-]*", w)]
                argv = [sys.executable, "-m", module, *rest, "--help"]
        else:
            path = _gateway_path(words)
            if path is not None and path:
                argv = [sys.executable, "-m", "gateway.cli", *path, "--help"]
        if argv is None:
            continue
        res = subprocess.run(argv, cwd=clone, capture_output=True, text=True, timeout=60)
        checked += 1
        if res.returncode != 0:
            failures.append(f"{' '.join(words)}: exit {res.returncode}: {res.stderr[-300:]}")
    assert checked >= 10, checked
    assert not failures, "\n".join(failures)


def test_config_example_passes_config_check(clone: Path) -> None:
    example = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "config", "example"],
        cwd=clone,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    check = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "config", "check", "--config", "-"],
        cwd=clone,
        input=example.stdout,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stderr
    assert "[server]" in check.stdout and "is valid" in check.stderr


def test_readme_starts_with_the_two_commands(clone: Path) -> None:
    lines = (clone / "README.md").read_text(encoding="utf-8").splitlines()
    block = "\n".join(lines[:8])
    assert "python3 dev.py run" in block and "python3 dev.py test" in block


def test_readme_layout_table_matches_the_tree(clone: Path) -> None:
    """Every module of gateway/ is named in the README's layout table, and every name
    there exists."""
    readme = (clone / "README.md").read_text(encoding="utf-8")
    table = readme.split("## Layout", 1)[1].split("\n## ", 1)[0]
    named: set[str] = set()
    for row in table.splitlines():
        cell = row.split("|")[1] if row.startswith("|") else ""
        base = ""  # a name is relative to the folder of the last full path before it
        for code in _CODE.findall(cell):
            for item in _expand(code):
                if item.startswith(TOP_DIRS):
                    base = item if item.endswith("/") else item.rsplit("/", 1)[0] + "/"
                    named.add(item)
                else:
                    named.add(base + item)
    modules = {
        str(p.relative_to(clone))
        for p in (clone / "gateway").rglob("*.py")
        if p.name not in ("__init__.py", "__main__.py", "py.typed")
    }
    packages = {n for n in named if n.endswith("/")}
    unnamed = sorted(
        m for m in modules if m not in named and not any(m.startswith(p) for p in packages)
    )
    assert not unnamed, f"modules missing from the README's layout table: {unnamed}"
    absent = sorted(n for n in named if not (clone / n).exists())
    assert not absent, f"the layout table names what does not exist: {absent}"


def test_ctrl_c_ends_dev_pys_child_its_own_way_without_a_traceback(tmp_path: Path) -> None:
    """SIGINT to dev.py's process group (no terminal: a supervisor stopping the job)
    reaches the child once, forwarded by dev.py (the child runs in a group of its
    own): it ends as it does (here: it prints and exits 0), and dev.py prints no
    ``KeyboardInterrupt`` traceback and returns the child's status."""
    import signal
    import time

    child = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGINT, lambda *a: (print('child: drained'), sys.exit(0)))\n"
        "print('ready', flush=True); time.sleep(30)\n"
    )
    script = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); import dev\n"
        f"raise SystemExit(dev.run([sys.executable, '-c', {child!r}]))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's job
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert "child: drained" in out
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert proc.returncode == 0


def test_ctrl_c_in_a_terminal_reaches_the_child_alone(tmp_path: Path) -> None:
    """``python3 dev.py run`` in a terminal: the child gets the terminal (as a shell's
    job), so the terminal's Ctrl-C reaches the child directly, once; dev.py is not
    interrupted (it forwards nothing) and returns the child's status."""
    import pty
    import select
    import time

    child = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGINT, lambda *a: (print('child: drained', flush=True), sys.exit(0)))\n"
        "print('ready', flush=True); time.sleep(30)\n"
    )
    script = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); import dev\n"
        f"rc = dev.run([sys.executable, '-c', {child!r}]); print('dev.py rc', rc, flush=True)\n"
    )
    pid, fd = pty.fork()
    if pid == 0:  # the child: a session whose controlling terminal is the pty
        os.execv(sys.executable, [sys.executable, "-c", script])
    out = b""

    def read_until(needle: bytes, timeout: float) -> None:
        nonlocal out
        deadline = time.monotonic() + timeout
        while needle not in out and time.monotonic() < deadline:
            if select.select([fd], [], [], 0.1)[0]:
                try:
                    out += os.read(fd, 4096)
                except OSError:
                    break
        assert needle in out, out.decode(errors="replace")

    try:
        read_until(b"ready", 20)
        time.sleep(0.2)
        os.write(fd, b"\x03")  # Ctrl-C, as typed
        read_until(b"dev.py rc 0\r\n", 20)
    finally:
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG) == (0, 0):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)
    text = out.decode(errors="replace")
    assert "child: drained" in text and "dev.py rc 0" in text, text
    assert "received SIGINT" not in text, text  # dev.py itself was not interrupted
