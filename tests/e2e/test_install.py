"""A real install, as an operator makes one: the wheel built from this tree, installed
with pip into a fresh venv outside the clone (its dependencies from the package
registry), runs: ``gateway --version``, ``gateway config example | gateway config
check``, ``gateway run`` in front of the installed demo upstream (a host path becomes a
link that downloads), ``gateway service render`` naming the installed entry point.

Nothing from the clone is on the installed commands' path: they run from a temporary
folder with a clean environment. ``-m slow`` also installs with pipx.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway import __version__
from tests.procs import REPO, clean_env, free_port

KEY = "install-alice-key-0123456789"
SKIP = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"
)


def run(argv: list[str], cwd: Path, **kw: object) -> subprocess.CompletedProcess[str]:
    env = clean_env()
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False, **kw
    )  # type: ignore[call-overload]
    assert proc.returncode == 0, f"{argv}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of a copy of this tree (the build writes into the source folder)."""
    tmp = tmp_path_factory.mktemp("build")
    src = tmp / "src"
    shutil.copytree(REPO, src, ignore=SKIP)
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "-w",
            str(tmp / "dist"),
            str(src),
        ],
        tmp,
    )
    (built,) = (tmp / "dist").glob("artifact_gateway-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed by pip; its bin folder."""
    home = tmp_path_factory.mktemp("operator")
    venv.EnvBuilder(with_pip=True).create(home / "venv")
    bindir = home / "venv" / "bin"
    run([str(bindir / "python"), "-m", "pip", "install", "-q", str(wheel)], home)
    return bindir


def test_the_wheel_holds_the_package_and_its_entry_point(wheel: Path) -> None:
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    assert "gateway/cli/__init__.py" in names and "gateway/py.typed" in names
    assert not [n for n in names if n.startswith(("tests/", "cassettes/"))]
    meta = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "gateway = gateway.cli:main" in zipfile.ZipFile(wheel).read(meta).decode()


def test_the_installed_commands_run(installed: Path, tmp_path: Path) -> None:
    where = run(
        [str(installed / "python"), "-c", "import gateway; print(gateway.__file__)"], tmp_path
    )
    assert Path(where.stdout.strip()).is_relative_to(installed.parent), "not the installed copy"
    assert not Path(where.stdout.strip()).is_relative_to(REPO)
    version = run([str(installed / "gateway"), "--version"], tmp_path)
    assert version.stdout.strip() == f"gateway {__version__}"
    example = run([str(installed / "gateway"), "config", "example"], tmp_path).stdout
    checked = run(
        [str(installed / "gateway"), "config", "check", "--config", "-"], tmp_path, input=example
    )
    assert "configuration is valid" in checked.stderr


@pytest.fixture
def served(installed: Path, tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    """The installed demo upstream and ``gateway run``; (gateway URL, config, root)."""
    root = tmp_path / "agent-out"
    root.mkdir()
    up, gw = free_port(), free_port()
    config = tmp_path / "gateway.toml"
    config.write_text(
        f'state_dir = "{tmp_path / "state"}"\n'
        f'[server]\nbind = "127.0.0.1:{gw}"\npublic_base_url = "http://127.0.0.1:{gw}"\n'
        f'[upstream]\nbase_url = "http://127.0.0.1:{up}/v1"\n'
        f'[artifacts]\nroots = ["{root}"]\n'
        f'[[auth.keys]]\nkey = "{KEY}"\nprincipal = "alice"\n',
        encoding="utf-8",
    )
    env = clean_env()
    env.pop("PYTHONPATH", None)
    procs = [
        subprocess.Popen(
            [str(installed / "python"), "-m", "gateway.cli.demo_upstream", "--port", str(up), "--root", str(root)],
            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ),
        subprocess.Popen(
            [str(installed / "gateway"), "run", "--config", str(config)],
            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        ),
    ]  # fmt: skip
    try:
        run(
            [str(installed / "gateway"), "health", f"http://127.0.0.1:{gw}/health/ready", "--wait"],
            tmp_path,
        )
        yield f"http://127.0.0.1:{gw}", config, root
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            assert proc.wait(20) == 0


def test_gateway_run_serves_from_the_install(served: tuple[str, Path, Path]) -> None:
    url, _, root = served
    headers = {"Authorization": f"Bearer {KEY}"}
    body = {"model": "demo", "messages": [{"role": "user", "content": "make me a report"}]}
    resp = httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=30)
    assert resp.status_code == 200, resp.text
    answer = resp.json()
    text = answer["choices"][0]["message"]["content"]
    assert str(root) not in json.dumps(answer)
    links = re.findall(rf"{re.escape(url)}/v1/artifacts/[\w-]+", text)
    assert links, text
    got = httpx.get(links[0], headers=headers, timeout=30)
    assert got.status_code == 200 and got.content


def test_service_render_uses_and_names_the_installed_entry_point(
    installed: Path, served: tuple[str, Path, Path], tmp_path: Path
) -> None:
    _, config, _ = served
    unit = run(
        [str(installed / "gateway"), "service", "render", "systemd", "--config", str(config)],
        tmp_path,
    )
    exec_start = next(li for li in unit.stdout.splitlines() if li.startswith("ExecStart="))
    assert exec_start.startswith(f"ExecStart={installed / 'gateway'} run --config {config}")
    assert (
        f"the service runs {installed / 'gateway'} (artifact-gateway {__version__}, installed in"
        in unit.stderr
    )
    assert str(REPO) not in unit.stdout


@pytest.mark.slow
def test_pipx_installs_the_wheel(wheel: Path, tmp_path: Path) -> None:
    """pipx from the registry, in a venv of its own; its home and bin folder in tmp."""
    venv.EnvBuilder(with_pip=True).create(tmp_path / "pipx-venv")
    pip = tmp_path / "pipx-venv" / "bin" / "pip"
    run([str(pip), "install", "-q", "pipx"], tmp_path)
    env = {"PIPX_HOME": str(tmp_path / "pipx"), "PIPX_BIN_DIR": str(tmp_path / "bin")}
    pipx = tmp_path / "pipx-venv" / "bin" / "pipx"
    proc = subprocess.run(
        [str(pipx), "install", str(wheel)], cwd=tmp_path, env={**clean_env(), **env},
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    version = run([str(tmp_path / "bin" / "gateway"), "--version"], tmp_path)
    assert version.stdout.strip() == f"gateway {__version__}"
