"""Shared fixtures: real hypercorn servers on 127.0.0.1 with ephemeral ports, and a
real PostgreSQL.

Servers run in pytest-trio's per-test ``nursery`` fixture, which is cancelled when
the test ends, so no server or task outlives its test.

PostgreSQL: ``pg_cluster`` starts one throw-away cluster per test session
(:mod:`harness.pgcluster`: a temp folder, a free loopback port, fsync off; stopped and
deleted at the end, also on failure). Each test gets its own database:
``pg_url`` a copy of a template already at the current schema (a file copy, ~40 ms),
``pg_empty_url`` an empty one. Without server binaries the tests that need them are
skipped, saying why -- except with ``CI=true``, where they fail: CI must run them
(``python3 dev.py test`` installs them, as root).
"""

from __future__ import annotations

import dataclasses
import os
import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from gateway.api.app import create_app
from gateway.cli.demo_upstream import DemoUpstreamApp, create_demo_upstream_app, serve_demo_upstream
from gateway.http.serve import serve_app
from gateway.ops.config import Config, config_from_dict
from gateway.proxy import create_proxy_app
from gateway.store import Store, open_store
from gateway.stream.pipeline import PipelineSettings
from harness.pgcluster import PgCluster, PgUnavailable

ALICE_KEY = "test-alice-key-0123456789"
BOB_KEY = "test-bob-key-0123456789ab"
PROXY_KEY = "test-proxy-key-0123456789"
#: a ``proxy.client_keys`` entry: what Open WebUI sends to the runs proxy
OWUI_KEY = "test-owui-client-key-01234"


def make_config(tmp: Path, upstream_url: str, **overrides: Any) -> Config:
    data: dict[str, Any] = {
        "state_dir": str(tmp / "state"),
        "server": {"bind": "127.0.0.1:0", "public_base_url": "http://127.0.0.1:8642"},
        # the demo upstream and the scripted transports speak chat only (no probe of
        # /capabilities taking a scripted answer); the native relay's tests set apis
        "upstream": {"base_url": upstream_url, "apis": "chat"},
        # one folder every principal shares, on purpose (tests of per-principal scope
        # set roots with {principal} or [[artifacts.scopes]] themselves)
        "artifacts": {
            "roots": [],
            "shared_roots": [str(tmp / "artifacts")],
            "default_link_mode": "private",
        },
        "auth": {
            "keys": [
                {"key": ALICE_KEY, "principal": "alice", "role": "user"},
                {"key": BOB_KEY, "principal": "bob", "role": "user"},
                {"key": PROXY_KEY, "principal": "owui-proxy", "role": "proxy"},
            ]
        },
    }
    for section, values in overrides.items():
        if isinstance(values, dict):
            data.setdefault(section, {}).update(values)
        else:
            data[section] = values
    (tmp / "artifacts").mkdir(parents=True, exist_ok=True)
    return config_from_dict(data)


@dataclass
class Upstream:
    app: DemoUpstreamApp
    url: str  # origin, without /v1


@dataclass
class Gateway:
    app: Any
    url: str
    config: Config

    def client(self, key: str = ALICE_KEY, **kw: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {key}"},
            timeout=httpx.Timeout(10, read=30),
            **kw,
        )


async def start_demo_upstream(
    nursery: trio.Nursery, tmp: Path, chunk_delay: float = 0.0
) -> Upstream:
    app = create_demo_upstream_app(
        tmp / "artifacts", outside_dir=tmp / "outside", chunk_delay=chunk_delay
    )
    url: str = await nursery.start(serve_demo_upstream, app)
    return Upstream(app, url)


async def start_gateway(
    nursery: trio.Nursery,
    config: Config,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    customize: Callable[[Any], None] | None = None,
    settings: PipelineSettings | None = None,
) -> Gateway:
    """The API server on real hypercorn; ``settings`` replaces its pipeline settings
    (``harness.nothing.NOTHING_FOUND``: rewriting off, to prove a leak check can fail)."""
    app = create_app(config, upstream_transport=transport, settings=settings)
    if customize is not None:
        customize(app)
    urls: list[str] = await nursery.start(
        partial(serve_app, app, "127.0.0.1:0", shutdown_trigger=trio.sleep_forever)
    )
    nursery.start_soon(_close_when_cancelled, app)
    return Gateway(app, urls[0], config)


async def _close_when_cancelled(app: Any) -> None:
    try:
        await trio.sleep_forever()
    finally:
        with trio.CancelScope(shield=True):
            await app.gateway.aclose()


@pytest.fixture
async def upstream(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[Upstream]:
    yield await start_demo_upstream(nursery, tmp_path)


@pytest.fixture
async def gateway(
    nursery: trio.Nursery, upstream: Upstream, tmp_path: Path
) -> AsyncIterator[Gateway]:
    yield await start_gateway(nursery, make_config(tmp_path, upstream.url + "/v1"))


@dataclass
class Proxy:
    app: Any
    url: str
    config: Config

    def client(self, key: str | None = OWUI_KEY, **kw: Any) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
        return httpx.AsyncClient(
            base_url=self.url, headers=headers, timeout=httpx.Timeout(10, read=30), **kw
        )


def proxy_config(
    tmp: Path,
    upstream_url: str,
    gateway_url: str,
    *,
    proxy: dict[str, Any] | None = None,
    **overrides: Any,
) -> Config:
    """``make_config`` plus a ``[proxy]`` section pointing at ``gateway_url`` (PROXY_KEY, OWUI_KEY)."""
    section = {"gateway_url": gateway_url, "gateway_key": PROXY_KEY, "client_keys": [OWUI_KEY]}
    return make_config(tmp, upstream_url, proxy={**section, **(proxy or {})}, **overrides)


async def start_proxy(
    nursery: trio.Nursery, config: Config, *, transport: httpx.AsyncBaseTransport | None = None
) -> Proxy:
    """The Open WebUI runs proxy on real hypercorn (its gateway is ``config.proxy.gateway_url``)."""
    app = create_proxy_app(config, transport=transport)
    urls: list[str] = await nursery.start(
        partial(serve_app, app, "127.0.0.1:0", shutdown_trigger=trio.sleep_forever)
    )
    nursery.start_soon(_close_proxy_when_cancelled, app)
    return Proxy(app, urls[0], config)


async def _close_proxy_when_cancelled(app: Any) -> None:
    try:
        await trio.sleep_forever()
    finally:
        with trio.CancelScope(shield=True):
            await app.proxy.aclose()


@pytest.fixture
async def proxy(
    nursery: trio.Nursery, upstream: Upstream, gateway: Gateway, tmp_path: Path
) -> AsyncIterator[Proxy]:
    """demo upstream -> gateway -> runs proxy, all real servers on loopback."""
    yield await start_proxy(nursery, proxy_config(tmp_path, upstream.url + "/v1", gateway.url))


PG_TEMPLATE = "gw_template"


@pytest.fixture(autouse=True)
def _no_ambient_database(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GATEWAY_DATABASE_URL exported in the developer's shell must not send the suite's
    gateways to that database; tests that want PostgreSQL set it themselves."""
    monkeypatch.delenv("GATEWAY_DATABASE_URL", raising=False)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """One throw-away PostgreSQL cluster for the session (skipped without binaries)."""
    try:
        cluster = PgCluster.start()
    except PgUnavailable as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true, and PostgreSQL cannot run here: {exc}", pytrace=False)
        pytest.skip(f"PostgreSQL not available: {exc}")
    try:
        cluster.create_database(PG_TEMPLATE)
        open_store(Path("/nonexistent"), cluster.url(PG_TEMPLATE), migrate=True).close()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def pg_url(pg_cluster: PgCluster) -> Iterator[str]:
    """A fresh database at the current schema (a copy of the session's template)."""
    name = "t_" + secrets.token_hex(6)
    url = pg_cluster.create_database(name, template=PG_TEMPLATE)
    try:
        yield url
    finally:
        pg_cluster.drop_database(name)


@pytest.fixture
def pg_empty_url(pg_cluster: PgCluster) -> Iterator[str]:
    """A fresh, empty database (schema version 0)."""
    name = "e_" + secrets.token_hex(6)
    url = pg_cluster.create_database(name)
    try:
        yield url
    finally:
        pg_cluster.drop_database(name)


@dataclasses.dataclass
class Backend:
    """Opens stores on one backing database: each :meth:`open` is another instance."""

    name: str
    opener: Callable[[], Store]
    opened: list[Store] = dataclasses.field(default_factory=list)

    def open(self) -> Store:
        store = self.opener()
        self.opened.append(store)
        return store


#: fixtures that start (or use) the throw-away PostgreSQL: their tests get ``postgres``
PG_FIXTURES = frozenset({"pg_cluster", "pg_url", "pg_empty_url"})


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``backend`` is SQLite under tests/unit (unit tests need no PostgreSQL server),
    SQLite and PostgreSQL elsewhere, or what a module's ``BACKENDS`` names (the modules
    of tests/e2e/postgres run the unit tests' backend cases on PostgreSQL)."""
    if "backend" not in metafunc.fixturenames:
        return
    unit = Path(str(metafunc.definition.path)).resolve().is_relative_to(ROOT / "tests" / "unit")
    names = getattr(metafunc.module, "BACKENDS", ("sqlite",) if unit else BACKEND_NAMES)
    params = [
        pytest.param(n, id=n, marks=[pytest.mark.postgres] if n == "postgresql" else [])
        for n in names
    ]
    metafunc.parametrize("backend", params, indirect=True)


BACKEND_NAMES = ("sqlite", "postgresql")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        b = Backend("sqlite", lambda: open_store(tmp_path / "state"))
    else:
        url: str = request.getfixturevalue("pg_url")
        b = Backend("postgresql", lambda: open_store(tmp_path, url, pool_size=4))
    try:
        yield b
    finally:
        for s in b.opened:
            s.close()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests using PostgreSQL get the ``postgres`` marker; a module that re-runs another
    one's backend tests (``BACKENDS``) keeps only those; ``slow`` tests are excluded by
    default (see the marker), ``-m slow`` runs them."""
    kept, dropped = [], []
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & PG_FIXTURES:
            item.add_marker(pytest.mark.postgres)
        module = getattr(item, "module", None)
        function = getattr(item, "function", None)
        imported = module is not None and getattr(function, "__module__", None) != module.__name__
        rerun = imported and hasattr(module, "BACKENDS")
        (dropped if rerun and "backend" not in fixtures else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    if "slow" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="slow: run with -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
