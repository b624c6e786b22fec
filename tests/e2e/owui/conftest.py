"""Fixtures for the browser tests: a real Open WebUI 0.12.4 and a real headless Chromium.

Prerequisites (installed by ``python3 tests/e2e/owui/install.py``, which
``python3 dev.py test`` runs): the cached Open WebUI venv and Debian's
``/usr/bin/chromium``. Without them these tests are skipped with the reason, except
under ``CI=true``, where a missing prerequisite fails them.

Timing on 2 cores: Open WebUI needs ~20 s to answer ``/health``. It is started once
per session and shared; the ``openwebui`` tests are moved to the end of the run and
the process is launched right after collection, so it boots while the rest of the
suite runs. Each test then starts its own demo upstream, gateway and runs proxy on
real hypercorn inside its trio nursery and points Open WebUI's connection at that
proxy (:func:`start_owui_chain`).

JWT mode needs ``FORWARD_USER_INFO_HEADER_JWT_SECRET`` in Open WebUI's environment at
start, so the tests that use the :func:`openwebui_jwt` fixture get a second instance,
launched as soon as the first one answers ``/health`` (two boots at once on 2 cores
would slow both); those tests run last, so it boots while the other browser tests run.

Screenshots and Open WebUI's log go to ``$ARTIFACT_GATEWAY_SCREENS``, or else to a
new folder per run under ``${TMPDIR:-/tmp}/artifact-gateway-screens/``; the terminal
summary names it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio

from gateway.api.app import create_app
from gateway.cli.demo_upstream import DemoFiles
from gateway.http.serve import serve_app
from gateway.ops.config import Config
from gateway.proxy import create_proxy_app
from tests.conftest import OWUI_KEY, Gateway, Proxy, Upstream, proxy_config, start_demo_upstream
from tests.e2e.owui import install

MARKER = "openwebui"
#: workspace models ("presets") on top of the demo upstream's ``demo`` model; their
#: custom param reaches the proxy as a top-level ``download_link_mode``
PRESETS = {"demo-public": "public", "demo-private": "private"}
#: the JWT instance's FORWARD_USER_INFO_HEADER_JWT_SECRET = the proxy's openwebui_jwt_secret
JWT_SECRET = "test-openwebui-jwt-secret-0123456789abcdef"
JWT_FIXTURE = "openwebui_jwt"

#: how long a fixture waits for an Open WebUI to be launched (its own startup timeout
#: applies after that)
OPENWEBUI_WAIT = 240.0

_OWUI_KEY = pytest.StashKey["OpenWebUIHandle"]()
_JWT_KEY = pytest.StashKey["DeferredOpenWebUI"]()
_SCREENS_KEY = pytest.StashKey[Path]()


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() == "true"


def missing_prerequisites() -> list[str]:
    missing = []
    if not install.openwebui_installed():
        missing.append(f"the Open WebUI {install.OPENWEBUI_VERSION} venv ({install.venv_dir()})")
    if not install.chromium_installed():
        missing.append(f"Debian's chromium ({install.CHROMIUM})")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the playwright package (the project's [test] extra)")
    return missing


def screens_dir() -> Path:
    """This run's folder for screenshots and Open WebUI's log, created empty.

    ``$ARTIFACT_GATEWAY_SCREENS`` is used as it is (emptied: e.g. for CI to collect);
    otherwise a new ``<time>-<pid>`` folder under ``${TMPDIR:-/tmp}/artifact-gateway-screens``
    (runs in other checkouts at the same time keep theirs), of which the 5 newest are kept.
    """
    env = os.environ.get("ARTIFACT_GATEWAY_SCREENS")
    if env:
        shots = Path(env)
        shutil.rmtree(shots, ignore_errors=True)
    else:
        base = Path(tempfile.gettempdir()) / "artifact-gateway-screens"
        shots = base / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        if base.is_dir():
            runs = sorted(p for p in base.iterdir() if p.is_dir())
            for old in runs[: max(0, len(runs) - 4)]:
                shutil.rmtree(old, ignore_errors=True)
    shots.mkdir(parents=True, exist_ok=True)
    return shots


# ----------------------------------------------------------------- session plumbing


@dataclass
class OpenWebUIHandle:
    """The session's Open WebUI: launched early, readied on first use."""

    owui: Any  # openwebui.OpenWebUI (imported lazily: it needs httpx only)
    ready: bool = False
    error: BaseException | None = None


class DeferredOpenWebUI:
    """A second Open WebUI, launched by a thread once ``after`` answers ``/health``.

    ``handle`` is None until it was launched; :meth:`stop` ends it whatever its state.
    The launching thread lives until :meth:`stop`: the child's parent-death signal
    (``PR_SET_PDEATHSIG``) fires when the *thread* that forked it ends, not the process.
    """

    def __init__(self, after: Any, launch: Any) -> None:
        self.handle: OpenWebUIHandle | None = None
        self._after = after
        self._launch = launch
        self._lock = threading.Lock()
        self._stopped = False
        self._stop = threading.Event()
        self.launched = threading.Event()
        self._thread = threading.Thread(target=self._run, name="openwebui-jwt", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        # launched even when the first one failed: its own fixture reports that
        self._after.wait_healthy(OPENWEBUI_WAIT)
        with self._lock:
            if not self._stopped:
                try:
                    self.handle = OpenWebUIHandle(self._launch())
                except BaseException as exc:  # reported by the fixture
                    self.handle = OpenWebUIHandle(None, error=exc)
        self.launched.set()
        self._stop.wait()  # keep the parent thread alive (see the class docstring)

    def wait(self, timeout: float) -> OpenWebUIHandle:
        if not self.launched.wait(timeout) or self.handle is None:
            raise RuntimeError("the JWT-mode Open WebUI was never launched")
        return self.handle

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            handle = self.handle
        if handle is not None and handle.owui is not None:
            handle.owui.stop()
        self._stop.set()
        self._thread.join(timeout=5)


def _launch_jwt_instance(shots: Path) -> Any:
    from tests.e2e.owui.openwebui import OpenWebUI

    return OpenWebUI.launch(
        install.venv_python(),
        log_path=shots / "openwebui-jwt.log",
        connection_key=OWUI_KEY,
        env={"FORWARD_USER_INFO_HEADER_JWT_SECRET": JWT_SECRET},
    )


def _uses_jwt(item: pytest.Item) -> bool:
    return JWT_FIXTURE in getattr(item, "fixturenames", ())


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the ``openwebui`` tests last (JWT mode at the very end), and start Open WebUI
    now so it boots meanwhile."""
    browser_items = [i for i in items if i.get_closest_marker(MARKER)]
    if not browser_items:
        return
    browser_items.sort(key=_uses_jwt)  # stable: file order otherwise
    items[:] = [i for i in items if not i.get_closest_marker(MARKER)] + browser_items
    missing = missing_prerequisites()
    if missing:
        if not in_ci():
            skip = pytest.mark.skip(
                reason="not installed: "
                + "; ".join(missing)
                + " (run: python3 tests/e2e/owui/install.py)"
            )
            for item in browser_items:
                item.add_marker(skip)
        return  # under CI the fixtures fail loudly
    if config.option.collectonly or all(i.get_closest_marker("skip") for i in browser_items):
        return
    from tests.e2e.owui.openwebui import OpenWebUI

    shots = screens_dir()
    config.stash[_SCREENS_KEY] = shots
    main = OpenWebUI.launch(
        install.venv_python(), log_path=shots / "openwebui.log", connection_key=OWUI_KEY
    )
    config.stash[_OWUI_KEY] = OpenWebUIHandle(main)
    if any(_uses_jwt(i) and not i.get_closest_marker("skip") for i in browser_items):
        config.stash[_JWT_KEY] = DeferredOpenWebUI(main, partial(_launch_jwt_instance, shots))


def pytest_unconfigure(config: pytest.Config) -> None:
    deferred = config.stash.get(_JWT_KEY, None)
    if deferred is not None:
        deferred.stop()
    handle = config.stash.get(_OWUI_KEY, None)
    if handle is not None and handle.owui is not None:
        handle.owui.stop()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    shots = config.stash.get(_SCREENS_KEY, None)
    handle = config.stash.get(_OWUI_KEY, None)
    if shots is None:
        return
    lines = [f"screenshots and Open WebUI log: {shots}"]
    deferred = config.stash.get(_JWT_KEY, None)
    instances = [("Open WebUI", handle)]
    if deferred is not None:
        instances.append(("Open WebUI (JWT mode)", deferred.handle))
    for label, h in instances:
        owui = h.owui if h is not None else None
        if owui is not None and owui.ready_seconds is not None:
            waited = owui.waited_seconds or 0.0
            lines.append(
                f"{label} answered /health {owui.ready_seconds:.1f} s after launch; "
                f"the tests waited {waited:.1f} s for it"
            )
    terminalreporter.write_sep("-", "openwebui")
    for line in lines:
        terminalreporter.write_line(line)


def _require_prerequisites() -> None:
    missing = missing_prerequisites()
    if missing:
        message = (
            "not installed: " + "; ".join(missing) + " (run: python3 tests/e2e/owui/install.py)"
        )
        if in_ci():
            pytest.fail("CI=true and " + message, pytrace=False)
        pytest.skip(message)


@pytest.fixture(scope="session")
def openwebui(request: pytest.FixtureRequest) -> Any:
    """The session's Open WebUI, healthy, with an admin and a normal user, presets published."""
    _require_prerequisites()
    handle = request.config.stash.get(_OWUI_KEY, None)
    if handle is None:  # e.g. collected without the hook having launched it
        from tests.e2e.owui.openwebui import OpenWebUI

        shots = request.getfixturevalue("screens")
        handle = OpenWebUIHandle(
            OpenWebUI.launch(
                install.venv_python(), log_path=shots / "openwebui.log", connection_key=OWUI_KEY
            )
        )
        request.config.stash[_OWUI_KEY] = handle
    return _ready(handle)


@pytest.fixture(scope="session")
def openwebui_jwt(request: pytest.FixtureRequest, openwebui: Any) -> Any:
    """A second Open WebUI, started with ``FORWARD_USER_INFO_HEADER_JWT_SECRET``
    (= :data:`JWT_SECRET`): it sends ``X-OpenWebUI-User-Jwt`` instead of the user headers."""
    deferred = request.config.stash.get(_JWT_KEY, None)
    if deferred is None:  # e.g. collected without the hook having launched it
        shots = request.getfixturevalue("screens")
        deferred = DeferredOpenWebUI(openwebui, partial(_launch_jwt_instance, shots))
        request.config.stash[_JWT_KEY] = deferred
    return _ready(deferred.wait(OPENWEBUI_WAIT))


def _ready(handle: OpenWebUIHandle) -> Any:
    """``handle``'s Open WebUI healthy, with its users and published models (once)."""
    if handle.error is not None:
        pytest.fail(f"Open WebUI did not start: {handle.error}", pytrace=False)
    if not handle.ready:
        try:
            handle.owui.wait_ready()
            handle.owui.create_users()
            trio.run(_publish_presets, handle.owui)
        except BaseException as exc:
            handle.error = exc
            raise
        handle.ready = True
    return handle.owui


async def _publish_presets(owui: Any) -> None:
    await owui.publish_model("demo")  # presets need read access to their base model too
    await owui.publish_model("demo-image")
    for model_id, mode in PRESETS.items():
        await owui.publish_model(
            model_id,
            base_model_id="demo",
            params={"custom_params": {"download_link_mode": mode}},
        )


@pytest.fixture(scope="session")
def screens(request: pytest.FixtureRequest) -> Path:
    shots = request.config.stash.get(_SCREENS_KEY, None)
    if shots is None:
        shots = screens_dir()
        request.config.stash[_SCREENS_KEY] = shots
    return shots


@pytest.fixture(scope="session")
def browser(screens: Path) -> Iterator[Any]:
    """Debian's Chromium under Playwright, on its own thread (see ``browser.py``)."""
    _require_prerequisites()
    from tests.e2e.owui.browser import BrowserThread

    thread = BrowserThread()
    try:
        yield thread
    finally:
        thread.close()


@pytest.fixture
def chat_page(
    request: pytest.FixtureRequest, browser: Any, openwebui: Any, screens: Path
) -> Iterator[Any]:
    """A fresh browser context with one Open WebUI tab (not signed in yet).

    Its methods must run on the browser thread: ``await browser.run(page.login, ...)``.
    A last screenshot is taken at teardown.
    """
    from tests.e2e.owui.browser import ChatPage

    def open_page() -> ChatPage:
        return ChatPage(browser.new_context(), openwebui.url, screens, request.node.name)

    page = browser.call(open_page)
    try:
        yield page
    finally:

        def close() -> None:
            try:
                page.screenshot("teardown")
            finally:
                page.context.close()

        browser.call(close)


@pytest.fixture
def open_page(request: pytest.FixtureRequest, browser: Any, screens: Path) -> Iterator[Any]:
    """A factory for more browser contexts: ``open_page(base_url, label)`` gives a
    :class:`~tests.e2e.owui.browser.ChatPage` in a fresh context (no cookies); call it on
    the browser thread. Every context it made is closed at teardown, after a screenshot."""
    from tests.e2e.owui.browser import ChatPage

    pages: list[Any] = []

    def make(base_url: str, label: str) -> Any:
        page = ChatPage(browser.new_context(), base_url, screens, f"{request.node.name}-{label}")
        pages.append(page)
        return page

    yield make

    def close() -> None:
        for page in pages:
            try:
                with contextlib.suppress(Exception):  # a page that cannot be shot still closes
                    page.screenshot("teardown")
            finally:
                page.context.close()

    browser.call(close)


# ------------------------------------------------------------ the chain, per test


@dataclass
class OwuiChain:
    upstream: Upstream
    gateway: Gateway
    proxy: Proxy
    config: Config

    @property
    def files(self) -> DemoFiles:
        return self.upstream.app.demo_files


def _listening_socket() -> tuple[int, str]:
    """A socket listening on 127.0.0.1 (ephemeral port), handed to hypercorn by fd.

    The gateway's links must name its real origin (``server.public_base_url``)
    before it starts, so the port is taken first, without a race.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(100)
    port = sock.getsockname()[1]
    return sock.detach(), f"http://127.0.0.1:{port}"


async def _close_on_cancel(close: Any) -> None:
    try:
        await trio.sleep_forever()
    finally:
        with trio.CancelScope(shield=True):
            await close()


async def start_owui_chain(
    nursery: trio.Nursery,
    tmp: Path,
    owui: Any,
    *,
    connection: dict[str, Any] | None = None,
    **overrides: Any,
) -> OwuiChain:
    """demo upstream -> gateway -> runs proxy, and Open WebUI's connection -> that proxy.

    ``overrides`` are config sections for :func:`tests.conftest.proxy_config`
    (``proxy={...}`` is merged into the proxy section); ``connection`` is Open WebUI's
    ``OPENAI_API_CONFIGS["0"]`` (e.g. ``{"auth_type": "session"}``).
    """
    upstream = await start_demo_upstream(nursery, tmp)
    gw_fd, gw_url = _listening_socket()
    px_fd, px_url = _listening_socket()
    server = {"public_base_url": gw_url, **overrides.pop("server", {})}
    config = proxy_config(tmp, upstream.url + "/v1", gw_url, server=server, **overrides)
    gw_app = create_app(config)
    await nursery.start(
        partial(serve_app, gw_app, f"fd://{gw_fd}", shutdown_trigger=trio.sleep_forever)
    )
    nursery.start_soon(_close_on_cancel, gw_app.gateway.aclose)
    px_app = create_proxy_app(config)
    await nursery.start(
        partial(serve_app, px_app, f"fd://{px_fd}", shutdown_trigger=trio.sleep_forever)
    )
    nursery.start_soon(_close_on_cancel, px_app.proxy.aclose)
    await owui.connect(px_url + "/v1", OWUI_KEY, config=connection)
    return OwuiChain(
        upstream, Gateway(gw_app, gw_url, config), Proxy(px_app, px_url, config), config
    )
