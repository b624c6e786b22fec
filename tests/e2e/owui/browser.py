"""Debian's Chromium driven by Playwright's sync API, from trio tests.

Playwright's async API runs only on asyncio, and its sync API binds every object to
the thread that created it. So one dedicated thread owns Playwright and the browser
(:class:`BrowserThread`); a trio test hands it plain sync functions with
``await browser.run(fn, ...)``, which waits in a trio worker thread, so the test's
servers (gateway, proxy, upstream: all in trio's loop on the main thread) keep
serving while the browser talks to them.

Each test gets a fresh browser context (its own cookies, storage and cache); the
browser itself is launched once per session with the flags this machine needs (a
closed network refuses Chromium's background connections). Playwright's own browser
download is never used: ``executable_path`` is Debian's ``/usr/bin/chromium``.

:class:`ChatPage` is what a person does in Open WebUI: sign in on the real login
page, pick a model in the selector, type a message, wait for the answer to finish,
read what was rendered (text, links with their ``href``, file tiles, code spans),
click a link, take screenshots.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import trio
from playwright.sync_api import Browser, BrowserContext, Download, Page, Playwright, sync_playwright
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.e2e.owui.install import CHROMIUM

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ANSWER_TIMEOUT_MS = 60_000

P = ParamSpec("P")
T = TypeVar("T")


class BrowserThread:
    """Playwright + one Chromium, owned by one thread; ``await run(fn)`` from trio."""

    def __init__(self, executable: Path = CHROMIUM) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="playwright")
        self._playwright: Playwright | None = None
        self.browser: Browser | None = None
        self.executable = executable
        self.call(self._start)

    def _start(self) -> None:
        self._playwright = sync_playwright().start()
        self.browser = self._playwright.chromium.launch(
            executable_path=str(self.executable), args=CHROMIUM_ARGS, headless=True
        )

    def call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn`` on the browser thread and wait (from sync code)."""
        return self._executor.submit(fn, *args, **kwargs).result()

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn`` on the browser thread; trio keeps running meanwhile."""
        future = self._executor.submit(fn, *args, **kwargs)
        return await trio.to_thread.run_sync(future.result, abandon_on_cancel=True)

    def new_context(self) -> BrowserContext:
        """A fresh, isolated context (call on the browser thread, e.g. inside ``run``)."""
        assert self.browser is not None
        return self.browser.new_context(
            viewport={"width": 1280, "height": 900}, accept_downloads=True
        )

    def close(self) -> None:
        def stop() -> None:
            if self.browser is not None:
                with contextlib.suppress(Exception):
                    self.browser.close()
            if self._playwright is not None:
                self._playwright.stop()

        try:
            self._executor.submit(stop).result(timeout=30)
        finally:
            self._executor.shutdown(wait=True)


# ------------------------------------------------------------------- reading a chat


@dataclass
class Link:
    href: str
    text: str
    target: str | None


@dataclass
class Answer:
    """The last assistant message as rendered."""

    text: str
    html: str
    links: list[Link]
    code_spans: list[str]
    file_tiles: list[str]  # visible names of the message's file tiles (``message.files``)
    images: list[str] = field(default_factory=list)  # ``src`` of images in the text
    tile_images: list[str] = field(default_factory=list)  # ``src`` of image tiles (files)


@dataclass
class Opened:
    """What clicking a link in the chat gave: a download, or a page in a new tab."""

    download: bytes | None
    filename: str | None
    status: int | None
    body_text: str
    url: str


_SCREEN_NAME = re.compile(r"[^\w.-]+")


class ChatPage:
    """One signed-in Open WebUI tab (all methods run on the browser thread)."""

    def __init__(self, context: BrowserContext, base_url: str, screens: Path, name: str) -> None:
        self.context = context
        self.base_url = base_url.rstrip("/")
        self.screens = screens
        self.name = _SCREEN_NAME.sub("-", name)
        self.page: Page = context.new_page()
        self.console_errors: list[str] = []
        self.page.on(
            "console",
            lambda m: self.console_errors.append(m.text) if m.type == "error" else None,
        )
        self._shots = 0
        self._answers_before = 0

    def screenshot(self, label: str, page: Page | None = None) -> Path:
        self._shots += 1
        path = self.screens / f"{self.name}-{self._shots:02d}-{_SCREEN_NAME.sub('-', label)}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        (page or self.page).screenshot(path=str(path), full_page=True)
        return path

    def login(self, email: str, password: str) -> None:
        """Through the real login page; leaves the ``token`` cookie (HttpOnly) set."""
        page = self.page
        page.goto(self.base_url + "/auth")
        page.fill("input#email", email)
        page.fill("input#password", password)
        page.click("button:has-text('Sign in')")
        page.wait_for_selector("#chat-input", timeout=30_000)

    def new_chat(self, model: str | None = None) -> None:
        """Open a new chat; pick ``model`` in the selector like a person would."""
        self.page.goto(self.base_url + "/")
        self.page.wait_for_selector("#chat-input", timeout=30_000)
        if model is not None:
            self.choose_model(model)

    def choose_model(self, model: str) -> None:
        page = self.page
        page.click("#model-selector-model-button")
        option = page.locator(f"#model-selector-list [role=option][data-value='{model}']")
        option.wait_for(timeout=10_000)
        option.click()
        label = page.get_attribute("#model-selector-model-button", "aria-label") or ""
        assert (
            model in label
            or page.locator(f"#model-selector-model-button:has-text('{model}')").count()
        ), f"model {model!r} not selected: {label!r}"

    def send(self, text: str) -> None:
        self._answers_before = self._assistant_messages().count()
        box = self.page.locator("#chat-input")
        box.click()
        self.page.keyboard.type(text)
        self.page.keyboard.press("Enter")

    def _assistant_messages(self) -> Any:
        return self.page.locator("div[id^='message-']:has(.chat-assistant)")

    def _last_assistant(self) -> Any:
        return self._assistant_messages().last

    def wait_answer(self, timeout_ms: int = ANSWER_TIMEOUT_MS) -> Answer:
        """Until the answer to the last :meth:`send` is done (its action buttons appear)."""
        deadline = time.monotonic() + timeout_ms / 1000
        while self._assistant_messages().count() <= self._answers_before:
            if time.monotonic() > deadline:
                raise AssertionError(f"no new answer within {timeout_ms} ms")
            self.page.wait_for_timeout(100)
        message = self._last_assistant()
        message.locator(".copy-response-button").wait_for(state="attached", timeout=timeout_ms)
        return self.read_answer()

    def read_answer(self) -> Answer:
        message = self._last_assistant()
        content = message.locator("#response-content-container")
        links = content.locator("a[href]").evaluate_all(
            "els => els.map(e => ({href: e.href, text: e.innerText, target: e.getAttribute('target')}))"
        )
        codes = content.locator("code").evaluate_all("els => els.map(e => e.innerText)")
        images = content.locator("img").evaluate_all("els => els.map(e => e.src)")
        # message.files: the row of tiles above the text (ResponseMessage.svelte)
        tiles = message.locator(".chat-assistant > div > div.my-1:not([id$='-embeds-container'])")
        names = tiles.locator("button").evaluate_all(
            "els => els.map(e => e.innerText.trim()).filter(Boolean)"
        )
        tile_images = tiles.locator("img").evaluate_all("els => els.map(e => e.src)")
        return Answer(
            text=content.inner_text(),
            html=content.inner_html(),
            links=[Link(x["href"], x["text"], x["target"]) for x in links],
            code_spans=codes,
            file_tiles=names,
            images=images,
            tile_images=tile_images,
        )

    def fetch(self, url: str) -> tuple[int, bytes]:
        """``GET url`` with this browser context's cookies (its Open WebUI session): the
        status and the body, as a download from this browser would get them."""
        response = self.context.request.get(url, max_redirects=0)
        try:
            return response.status, response.body()
        finally:
            response.dispose()

    def open_tile(self, name: str, label: str, timeout_ms: int = 20_000) -> tuple[str, Opened]:
        """Click the last answer's file tile ``name`` like a person: Open WebUI opens its
        file dialog (screenshot), whose title is a link to the file; click that too, then
        close the dialog. The dialog's text, and what the title link gave."""
        tiles = self._last_assistant().locator(
            ".chat-assistant > div > div.my-1:not([id$='-embeds-container']) button",
            has_text=name,
        )
        tiles.first.click()
        dialog = self.page.locator(".modal").last
        dialog.wait_for(state="visible", timeout=timeout_ms)
        title = dialog.locator("a[target=_blank]", has_text=name).first
        title.wait_for(timeout=timeout_ms)
        self.screenshot(label)
        text = str(dialog.inner_text())
        opened = self.click_opening(title, timeout_ms)
        self.page.keyboard.press("Escape")
        with contextlib.suppress(PlaywrightTimeout):
            dialog.wait_for(state="hidden", timeout=5_000)
        return text, opened

    def status_lines(self, label: str, timeout_ms: int = 10_000) -> list[str]:
        """Open the last answer's status history (the agent's progress shown above the
        text) like a person, take a screenshot; the lines it shows."""
        toggle = self._last_assistant().locator("button[aria-label='Toggle status history']")
        toggle.first.click(timeout=timeout_ms)
        self.page.wait_for_timeout(300)  # it unfolds
        self.screenshot(label)
        lines = (
            self._last_assistant()
            .locator(".status-description")
            .evaluate_all("els => els.map(e => e.innerText.trim())")
        )
        return [str(line) for line in lines]

    def wait_tiles(self, count: int, timeout_ms: int = ANSWER_TIMEOUT_MS) -> Answer:
        """Until the last answer shows ``count`` file tiles (files and images together)."""
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            answer = self.read_answer()
            if len(answer.file_tiles) + len(answer.tile_images) >= count:
                return answer
            if time.monotonic() > deadline:
                raise AssertionError(f"{count} file tiles expected, the answer shows {answer}")
            self.page.wait_for_timeout(100)

    def chat_id(self, timeout_ms: int = 30_000) -> str:
        """The id of the chat on screen (Open WebUI moves to ``/c/<id>`` once it is saved)."""
        self.page.wait_for_url(re.compile(r".*/c/[\w-]+$"), timeout=timeout_ms)
        return self.page.url.rstrip("/").rsplit("/", 1)[1]

    def sidebar_title(self, chat_id: str, timeout_ms: int = ANSWER_TIMEOUT_MS) -> str:
        """The chat's title as the sidebar shows it (opened first when it is collapsed),
        once it is no longer Open WebUI's placeholder."""
        item = self.page.locator(f"[data-sidebar-chat-id='{chat_id}']:visible").first
        if not item.count():
            self.page.locator("button[aria-label='Open Sidebar']").first.click()
        item.wait_for(state="visible", timeout=timeout_ms)
        self.page.wait_for_function(
            """id => [...document.querySelectorAll(`[data-sidebar-chat-id='${id}']`)].some(el => {
                const t = el.offsetParent === null ? '' : el.innerText.trim().split('\\n')[0];
                return t !== '' && t !== 'New Chat';
            })""",
            arg=chat_id,
            timeout=timeout_ms,
        )
        # the item's first line is the title (a "… ago" line may follow)
        return str(item.inner_text()).strip().splitlines()[0].strip()

    def reload_chat(self, timeout_ms: int = ANSWER_TIMEOUT_MS) -> Answer:
        """Reload the page (the chat as Open WebUI stored it) and read the last answer."""
        self.page.reload()
        self._last_assistant().locator(".copy-response-button").wait_for(
            state="attached", timeout=timeout_ms
        )
        return self.read_answer()

    def content_images(self, timeout_ms: int = 20_000) -> list[dict[str, Any]]:
        """The last answer's ``<img>`` elements once each finished loading (or failing):
        ``src``, ``loaded`` (decoded, non-zero size), and the text around them."""
        content = self._last_assistant().locator("#response-content-container")
        content.locator("img").first.wait_for(state="attached", timeout=timeout_ms)
        self.page.wait_for_function(
            """() => [...document.querySelectorAll("div[id^='message-'] #response-content-container img")]
                     .every(img => img.complete)""",
            timeout=timeout_ms,
        )
        found: list[dict[str, Any]] = content.locator("img").evaluate_all(
            "els => els.map(e => ({src: e.src, loaded: e.complete && e.naturalWidth > 0,"
            " width: e.naturalWidth}))"
        )
        return found

    def open_url(self, url: str, label: str, timeout_ms: int = 20_000) -> Opened:
        """Type ``url`` into a new tab of this context: a download, or a page."""
        page = self.context.new_page()
        downloads: list[Download] = []

        def on_download(download: Download) -> None:
            downloads.append(download)

        page.on("download", on_download)
        status: int | None = None
        try:
            try:
                response = page.goto(url, timeout=timeout_ms)
                status = response.status if response is not None else None
            except PlaywrightError as exc:  # a navigation that became a download
                if "Download is starting" not in str(exc) and "ERR_ABORTED" not in str(exc):
                    raise
                if not downloads:
                    downloads.append(page.wait_for_event("download", timeout=timeout_ms))
            if downloads:
                download = downloads[0]
                path = download.path()
                return Opened(
                    Path(path).read_bytes() if path else b"",
                    download.suggested_filename,
                    status,
                    "",
                    download.url,
                )
            self.screenshot(label, page=page)
            return Opened(None, None, status, page.locator("body").inner_text(), page.url)
        finally:
            with contextlib.suppress(Exception):
                page.close()

    def share(self, file_name: str, timeout_ms: int = 20_000) -> tuple[str, str]:
        """Follow the private note's share link for ``file_name``, create a public link on
        the gateway's page like a person would; that link, and what the page said."""
        link = self._last_assistant().locator(
            "#response-content-container a[href$='/share']", has_text=file_name
        )
        with self.context.expect_page(timeout=timeout_ms) as popup_info:
            link.first.click()
        popup = popup_info.value
        try:
            button = popup.locator("button:has-text('Create a public link')")
            button.wait_for(timeout=timeout_ms)
            self.screenshot(f"share-{file_name}", page=popup)
            said = str(popup.locator("body").inner_text())
            button.click()
            field_ = popup.locator("input[readonly]")
            field_.wait_for(timeout=timeout_ms)
            self.screenshot(f"shared-{file_name}", page=popup)
            return str(field_.input_value()), said
        finally:
            with contextlib.suppress(Exception):
                popup.close()

    def click_link(self, link_text: str, timeout_ms: int = 20_000) -> Opened:
        """Click a link of the last answer like a person; report what happened.

        Links open in a new tab (``target=_blank``): either that tab turns into a
        download (``Content-Disposition: attachment``) or it shows a page.
        """
        link = self._last_assistant().locator("#response-content-container a", has_text=link_text)
        return self.click_opening(link.first, timeout_ms)

    def click_opening(self, target: Any, timeout_ms: int = 20_000) -> Opened:
        """Click ``target`` (a locator of something that opens a new tab) and report what
        the tab became: a download, or a page (see :meth:`click_link`)."""
        statuses: dict[str, int] = {}
        downloads: list[Download] = []

        def on_response(response: Any) -> None:
            statuses[response.url] = response.status

        def on_download(download: Download) -> None:
            downloads.append(download)

        def on_page(page: Page) -> None:  # before the new tab's first event
            page.on("download", on_download)

        # Chromium turns the new tab into a download and closes it; Playwright then
        # reports the download on the opener (this tab), sometimes on the new one
        self.context.on("response", on_response)
        self.context.on("page", on_page)
        self.page.on("download", on_download)
        try:
            with self.context.expect_page(timeout=timeout_ms) as popup_info:
                target.click()
            popup = popup_info.value
            # the tab either starts a download (and Chromium closes it) or shows a page
            deadline = time.monotonic() + timeout_ms / 1000
            while not downloads and time.monotonic() < deadline:
                if not popup.is_closed():
                    with contextlib.suppress(PlaywrightTimeout):
                        popup.wait_for_load_state("load", timeout=200)
                    if popup.url not in ("", "about:blank") and statuses.get(popup.url):
                        break  # a page, not a download
                self.page.wait_for_timeout(100)  # Playwright dispatches events meanwhile
            if downloads:
                download = downloads[0]
                path = download.path()  # waits until it is complete
                opened = Opened(
                    Path(path).read_bytes() if path else b"",
                    download.suggested_filename,
                    statuses.get(download.url),
                    "",
                    download.url,
                )
            else:
                text = "" if popup.is_closed() else popup.locator("body").inner_text()
                opened = Opened(None, None, statuses.get(popup.url), text, popup.url)
                if not popup.is_closed():
                    self.screenshot("opened-link", page=popup)
            with contextlib.suppress(Exception):
                popup.close()
            return opened
        finally:
            self.context.remove_listener("response", on_response)
            self.context.remove_listener("page", on_page)
            self.page.remove_listener("download", on_download)
