"""Fixtures for the tests against the real Hermes agent (marker ``hermes``).

Prerequisite: the cached venv of ``python3 tests/e2e/hermes/install.py`` (which
``python3 dev.py test`` runs). Without it these tests skip, saying why, except under
``CI=true``, where they fail.

One Hermes API server per test session (``hermes gateway run -v``, a throw-away
``HERMES_HOME`` and ``HOME``, loopback, an ephemeral port), started on first use and
stopped (its whole process group) at the end, also after a failure. Its model is a
:class:`harness.scripted_llm.ScriptedLLM`. A start takes ~3.5 s on 2 idle cores (the
terminal summary prints the measured figure), cheap enough for one per module, but
nothing a test does survives in a way another test sees: each test gets

* a fresh script (the :class:`HermesRun`'s ``llm.script(...)``; requests forgotten),
* its own folder under Hermes's terminal folder (``workdir``, no spaces in its name)
  for the files its script writes.

Hermes keeps sessions in its home (keyed by the first user message): tests that
care use a first message of their own.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.scripted_llm import ScriptedLLM
from tests.e2e.hermes import install
from tests.e2e.hermes.agent import HERMES_MODEL, HermesAgent

MARKER = "hermes"
_STARTS = pytest.StashKey[list[float]]()
_COUNTER = itertools.count(1)


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() == "true"


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_STARTS] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    starts = terminalreporter.config.stash.get(_STARTS, [])
    if starts:
        figures = ", ".join(f"{s:.1f} s" for s in starts)
        terminalreporter.write_line(f"Hermes API server start (spawn to /health 200): {figures}")


@dataclass
class HermesRun:
    """What one test gets: the agent's URL and key, its folder, and the model's script."""

    agent: HermesAgent
    llm: ScriptedLLM
    workdir: Path

    @property
    def url(self) -> str:
        return self.agent.url

    @property
    def base_url(self) -> str:
        """Hermes's OpenAI-compatible base URL (what ``upstream.base_url`` gets)."""
        return self.agent.url + "/v1"

    @property
    def key(self) -> str:
        return self.agent.key

    @property
    def home(self) -> Path:
        return self.agent.home

    @property
    def model(self) -> str:
        return HERMES_MODEL

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


@pytest.fixture(scope="session")
def hermes_llm() -> Iterator[ScriptedLLM]:
    llm = ScriptedLLM.start()
    try:
        yield llm
    finally:
        llm.close()


@pytest.fixture(scope="session")
def hermes_agent(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    hermes_llm: ScriptedLLM,
) -> Iterator[HermesAgent]:
    if not install.hermes_installed():
        reason = (
            f"hermes-agent {install.HERMES_VERSION} is not installed in {install.venv_dir()} "
            "(run: python3 tests/e2e/hermes/install.py)"
        )
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    agent = HermesAgent(tmp_path_factory.mktemp("hermes"), hermes_llm.base_url)
    try:
        agent.start()
        request.config.stash[_STARTS].extend(agent.start_seconds)
        yield agent
    finally:
        agent.stop()


@pytest.fixture
def hermes(
    request: pytest.FixtureRequest, hermes_agent: HermesAgent, hermes_llm: ScriptedLLM
) -> Iterator[HermesRun]:
    if hermes_agent.proc is None or hermes_agent.proc.poll() is not None:
        pytest.fail(f"the session's Hermes is not running; its log:\n{hermes_agent.tail()}")
    name = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name).strip("-")[:40]
    workdir = hermes_agent.project / f"t{next(_COUNTER)}-{name}"
    workdir.mkdir(parents=True)
    hermes_llm.script([])
    yield HermesRun(hermes_agent, hermes_llm, workdir)
    hermes_llm.script([])
