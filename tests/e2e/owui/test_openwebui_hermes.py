"""The whole story once, end to end (issue 32 item 5): Open WebUI users and the real agent.

A real Open WebUI 0.12.4 in headless Chromium → the runs proxy (``gateway proxy``) →
``gateway run`` → the real Hermes agent 0.19.0, whose model is a scripted LLM that makes
Hermes's real ``write_file`` and ``terminal`` tools write real files. Every hop is a real
process on 127.0.0.1; the gateway and the proxy are started from one config file like an
operator would (``python -m gateway.cli run|proxy --config …``).

Set-up (module fixtures, shared by the four steps): Open WebUI's connection forwards the
user's session (auth type "session"), so the proxy delivers the answer's files as Open
WebUI file tiles ("native delivery") and the gateway opens its private links for the
owner's Open WebUI session. Each Open WebUI user has their own folder in the agent's
project, ``users/openwebui+<user id>``, which is their artifact scope
(``artifacts.roots = [".../users/{principal}"]``); the script writes into the folder of
the user who asks, as a per-user agent workspace would. Open WebUI's background tasks
(titles, tags, follow-ups) are switched off for this module: they would reach Hermes as
agent turns, and a scripted model cannot tell them from the user's turn.

The story, one test per step (a step does what an earlier one left undone first; when an
earlier step's *actions* failed, the later ones fail saying so; each step's checks are its
own, so one step's verdict does not hide another's):

1. User A asks for a report; Hermes writes ``report.md`` (``write_file``) and
   ``data/figures.csv`` (``terminal``); the answer names both. A gets each as a tile and
   as a link, and both give the bytes on disk in A's browser.
2. User B gets nothing of A's: A's links are the 404 page in B's browser, A's tiles are
   refused by Open WebUI, and when B asks the agent (which reads A's file and repeats
   A's paths), B's answer holds the bare names only, with no link and no tile.
3. A's next turn: the model gets A's own paths back in the conversation (the gateway maps
   A's links back), never a link and nothing of B's.
4. Hermes rewrites ``report.md`` in another turn: the new answer's link and tile give the
   new bytes; the first answer's link, sealed to the first version, says the file changed
   (410), and its tile, Open WebUI's own copy, still gives the first version.
5. Over all those turns, the agent's tool progress shows above each answer as Open WebUI
   status lines (issue 34 item 4) that name the files only: no host path, no link.

Screenshots for a person: ``story-A-*`` and ``story-B-*`` in the screens folder the
terminal summary names; beside them what the model was sent in each turn and the status
lines Open WebUI stored (``story-<turn>.json``), and the gateway's, the proxy's and
Hermes's logs.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from harness.instances import gateway_toml
from harness.scripted_llm import ScriptedLLM, ToolCall, Turn
from tests.conftest import OWUI_KEY, PROXY_KEY
from tests.e2e.hermes import install as hermes_install
from tests.e2e.hermes.agent import HERMES_MODEL, HermesAgent
from tests.e2e.owui.checks import private_link_re
from tests.e2e.owui.conftest import in_ci
from tests.helpers import HOST_PATH_RE
from tests.procs import Proc, free_port

pytestmark = [pytest.mark.openwebui, pytest.mark.hermes]

REPORT_V1 = "# Quarterly report\n\nQ1 revenue: 100\n"
REPORT_V2 = "# Quarterly report\n\nQ1 revenue: 100\nQ2 revenue: 120\n"
FIGURES = "quarter,revenue\nQ1,100\n"
ASK_REPORT = "Please write the quarterly report and a table of the figures."
#: (no apostrophe: Open WebUI's input may type a typographic one)
ASK_OTHERS = "Where did you save the report of the other user? Give me the full path."
ASK_ABOUT = "What is in the report?"
ASK_REWRITE = "Please add the second quarter to the report."
#: Open WebUI's background tasks, off for this module (see the module docstring)
NO_TASKS = {
    "ENABLE_TITLE_GENERATION": False,
    "ENABLE_TAGS_GENERATION": False,
    "ENABLE_FOLLOW_UP_GENERATION": False,
}
TILE_WAIT_MS = 15_000
NO_TILES_GRACE_MS = 1_000
#: the gateway's page for a link whose file changed after the answer
CHANGED_PAGE = "This link no longer works"


def folder_of(user: Any) -> str:
    """A user's folder name under ``users/``: ``{principal}`` for ``openwebui:<id>``."""
    return f"openwebui+{user.id}"


def write(path: Path, content: str) -> ToolCall:
    return ToolCall("write_file", {"path": str(path), "content": content})


# ------------------------------------------------------------------ the processes


@dataclass
class Agent:
    """The module's Hermes API server and its model."""

    hermes: HermesAgent
    llm: ScriptedLLM


@pytest.fixture(scope="module")
def story_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Agent]:
    """One Hermes API server for the module, its model a scripted LLM."""
    if not hermes_install.hermes_installed():
        reason = (
            f"hermes-agent {hermes_install.HERMES_VERSION} is not installed in "
            f"{hermes_install.venv_dir()} (run: python3 tests/e2e/hermes/install.py)"
        )
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    llm = ScriptedLLM.start()
    hermes = HermesAgent(tmp_path_factory.mktemp("story-hermes"), llm.base_url)
    try:
        hermes.start()
        yield Agent(hermes, llm)
    finally:
        hermes.stop()
        llm.close()


def write_config(base: Path, agent: HermesAgent, owui_url: str) -> tuple[Path, str, str]:
    """The operator's one config file for ``gateway run`` and ``gateway proxy``."""
    gw_port, px_port = free_port(), free_port()
    gw_url, px_url = f"http://127.0.0.1:{gw_port}", f"http://127.0.0.1:{px_port}"
    text = gateway_toml(
        base / "state",
        upstream_url=agent.url + "/v1",
        roots=[agent.project / "users" / "{principal}"],
        shared=False,
        keys=[(PROXY_KEY, "owui-proxy", "proxy")],
        public_base_url=gw_url,
        sections={
            "server": {"bind": f"127.0.0.1:{gw_port}"},
            "upstream": {"api_key": agent.key, "first_byte_timeout_seconds": 60.0},
            "proxy": {
                "bind": f"127.0.0.1:{px_port}",
                "gateway_url": gw_url,
                "gateway_key": PROXY_KEY,
                "client_keys": [OWUI_KEY],
                "openwebui_url": owui_url,
            },
        },
    )
    config = base / "gateway.toml"
    config.write_text(text, encoding="utf-8")
    config.chmod(0o600)  # it holds keys
    return config, gw_url, px_url


def start_server(command: str, config: Path, log: Path) -> Proc:
    proc = Proc(["-m", "gateway.cli", command, "--config", str(config)], log)
    try:
        proc.wait_for(r"listening on http://127\.0\.0\.1:\d+")
    except BaseException:
        proc.stop()
        raise
    return proc


def start_chain(
    base: Path, agent: HermesAgent, owui_url: str, stack: contextlib.ExitStack, tries: int = 3
) -> tuple[str, str]:
    """``gateway run`` and ``gateway proxy`` from one config, stopped by ``stack``; their
    URLs. The ports are picked free before the start (the links must name the gateway's
    origin), so a port taken meanwhile is retried with new ones."""
    for attempt in range(tries):
        config, gw_url, px_url = write_config(base, agent, owui_url)
        try:
            gateway = start_server("run", config, base / "gateway.log")
            stack.callback(gateway.stop)
            proxy = start_server("proxy", config, base / "proxy.log")
            stack.callback(proxy.stop)
            return gw_url, px_url
        except AssertionError as exc:
            if attempt == tries - 1 or "in use" not in str(exc):
                raise
            stack.close()
    raise AssertionError("unreachable")


async def connect_openwebui(owui: Any, proxy_url: str) -> None:
    """Connection 0 → the proxy, forwarding the user's session; Hermes's model published."""
    await owui.connect(proxy_url + "/v1", OWUI_KEY, config={"auth_type": "session"})
    await owui.publish_model(HERMES_MODEL)


# ------------------------------------------------------------------ the story


@dataclass
class TurnResult:
    """One answer as the browser showed it, and what the model was sent meanwhile."""

    answer: Any  # browser.Answer
    chat_id: str
    llm_requests: list[dict[str, Any]]
    turns_left: int  # of the model's script, once the answer was there
    files: list[dict[str, Any]] = field(default_factory=list)  # its stored tiles
    #: the tool progress Open WebUI showed above it (its stored status lines)
    statuses: list[str] = field(default_factory=list)


@dataclass
class Story:
    owui: Any
    browser: Any
    agent: HermesAgent
    llm: ScriptedLLM
    gateway_url: str
    page_a: Any
    page_b: Any
    screens: Path
    done: dict[str, Any] = field(default_factory=dict)
    failed: dict[str, BaseException] = field(default_factory=dict)

    @property
    def user_a(self) -> Any:
        return self.owui.user

    @property
    def user_b(self) -> Any:
        return self.owui.other

    def folder(self, user: Any) -> Path:
        return self.agent.project / "users" / folder_of(user)

    @property
    def report(self) -> Path:
        return self.folder(self.user_a) / "report.md"

    @property
    def figures(self) -> Path:
        return self.folder(self.user_a) / "data" / "figures.csv"

    async def once(self, key: str, action: Callable[[], Awaitable[Any]]) -> Any:
        """``action``'s result, run once per module; a failed action fails every step
        that needs it (it is not run twice: the scripted model's turns are used up)."""
        if key in self.failed:
            pytest.fail(f"an earlier step's actions failed ({key}): {self.failed[key]!r}")
        if key not in self.done:
            try:
                self.done[key] = await action()
            except Exception as exc:
                self.failed[key] = exc
                raise
        return self.done[key]

    async def turn(
        self, page: Any, prompt: str, turns: list[Turn], label: str, *, tiles: int, new_chat: bool
    ) -> TurnResult:
        """Script the model, send ``prompt`` in the browser, wait for the answer and for
        the ``tiles`` file tiles it should get (the steps check what came), screenshot it."""
        self.llm.script(turns)

        def ui() -> tuple[Any, str]:
            if new_chat:
                page.new_chat(HERMES_MODEL)
            page.send(prompt)
            answer = page.wait_answer()
            if tiles:
                with contextlib.suppress(AssertionError):  # fewer: the step says so
                    answer = page.wait_tiles(tiles, timeout_ms=TILE_WAIT_MS)
            else:  # the files event comes before the answer's end; a margin all the same
                page.page.wait_for_timeout(NO_TILES_GRACE_MS)
                answer = page.read_answer()
            page.screenshot(label)
            return answer, page.chat_id()

        answer, chat_id = await self.browser.run(ui)
        result = TurnResult(answer, chat_id, self.llm.requests, self.llm.turns_left)
        user = self.user_a if page is self.page_a else self.user_b
        answers = answer_messages(await self.owui.chat(user, chat_id))
        if answers:
            result.files = answers[-1].get("files") or []
            history = answers[-1].get("statusHistory") or []
            result.statuses = [str(s.get("description", "")) for s in history]
        # what the model was sent and the status lines, beside the screenshots (evidence)
        seen = {"model_requests": result.llm_requests, "status_lines": result.statuses}
        dump = json.dumps(seen, indent=1, ensure_ascii=False)
        (self.screens / f"story-{label}.json").write_text(dump, encoding="utf-8")
        return result

    async def first_answer(self) -> TurnResult:
        async def act() -> TurnResult:
            figures = self.figures
            command = (
                f"mkdir -p '{figures.parent}' && printf 'quarter,revenue\\nQ1,100\\n' > '{figures}'"
            )
            text = f"I wrote the report to {self.report} and the figures to {figures}."
            turns = [
                Turn(
                    tool_calls=[
                        write(self.report, REPORT_V1),
                        ToolCall("terminal", {"command": command}),
                    ]
                ),
                Turn(text=text),
            ]
            return await self.turn(
                self.page_a, ASK_REPORT, turns, "1-answer", tiles=2, new_chat=True
            )

        result: TurnResult = await self.once("A's first answer", act)
        return result

    async def other_users_answer(self) -> TurnResult:
        async def act() -> TurnResult:
            turns = [
                Turn(tool_calls=[ToolCall("read_file", {"path": str(self.report)})]),
                Turn(text=f"The other user's report is {self.report}, beside {self.figures}."),
            ]
            return await self.turn(
                self.page_b, ASK_OTHERS, turns, "2-answer", tiles=0, new_chat=True
            )

        await self.first_answer()
        result: TurnResult = await self.once("B's answer", act)
        return result

    async def next_turn(self) -> TurnResult:
        async def act() -> TurnResult:
            turns = [Turn(text=f"The report {self.report} gives the first quarter: 100.")]
            return await self.turn(
                self.page_a, ASK_ABOUT, turns, "3-next-turn", tiles=1, new_chat=False
            )

        await self.other_users_answer()
        result: TurnResult = await self.once("A's next turn", act)
        return result

    async def rewrite(self) -> TurnResult:
        async def act() -> TurnResult:
            turns = [
                Turn(tool_calls=[write(self.report, REPORT_V2)]),
                Turn(text=f"Done: {self.report} now has the second quarter."),
            ]
            return await self.turn(
                self.page_a, ASK_REWRITE, turns, "4-rewrite", tiles=1, new_chat=False
            )

        await self.next_turn()
        result: TurnResult = await self.once("A's rewrite", act)
        return result

    async def owned(self, user: Any) -> list[dict[str, Any]]:
        """The gateway's artifact list of ``user`` (the proxy key asserting them)."""
        headers = {
            "Authorization": f"Bearer {PROXY_KEY}",
            "X-Gateway-Owner": f"openwebui:{user.id}",
        }
        async with httpx.AsyncClient(base_url=self.gateway_url, timeout=10) as c:
            r = await c.get("/v1/artifacts", headers=headers)
        r.raise_for_status()
        data: list[dict[str, Any]] = r.json()["data"]
        return data


def answer_messages(stored: dict[str, Any]) -> list[dict[str, Any]]:
    """The assistant messages on a stored chat's current branch, oldest first."""
    history = stored["chat"]["history"]
    messages, current = history["messages"], history.get("currentId")
    chain = []
    while current is not None and current in messages:
        chain.append(messages[current])
        current = messages[current].get("parentId")
    return [m for m in reversed(chain) if m.get("role") == "assistant"]


@pytest.fixture(scope="module")
def story(
    openwebui: Any,
    browser: Any,
    screens: Path,
    story_agent: Agent,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Story]:
    from tests.e2e.owui.browser import ChatPage

    agent = story_agent.hermes
    base = tmp_path_factory.mktemp("story")
    users = (openwebui.user, openwebui.other)
    for user in users:  # each user's workspace, as the operator made it
        (agent.project / "users" / folder_of(user)).mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        for name in ("gateway", "proxy"):  # logs next to the screenshots, for a person
            stack.callback(_copy, base / f"{name}.log", screens / f"story-{name}.log")
        stack.callback(_copy, agent.log, screens / "story-hermes.log")
        servers = stack.enter_context(contextlib.ExitStack())
        gw_url, px_url = start_chain(base, agent, openwebui.url, servers)
        before = openwebui.set_task_config(**NO_TASKS)
        stack.callback(openwebui.set_task_config, **{k: before[k] for k in NO_TASKS})
        trio.run(connect_openwebui, openwebui, px_url)

        pages: list[Any] = []  # A's and B's browser (each its own context), signed in

        def open_pages() -> None:
            for label, user in zip(("A", "B"), users, strict=True):
                page = ChatPage(browser.new_context(), openwebui.url, screens, f"story-{label}")
                pages.append(page)
                page.login(user.email, user.password)

        stack.callback(lambda: browser.call(_close_pages, pages))
        browser.call(open_pages)
        yield Story(openwebui, browser, agent, story_agent.llm, gw_url, pages[0], pages[1], screens)


def _close_pages(pages: list[Any]) -> None:
    for page in pages:
        with contextlib.suppress(Exception):
            page.screenshot("teardown")
        with contextlib.suppress(Exception):
            page.context.close()


def _copy(src: Path, dst: Path) -> None:
    with contextlib.suppress(OSError):
        shutil.copyfile(src, dst)


# ------------------------------------------------------------------ checks


def assert_no_host_path(story: Story, *texts: str) -> None:
    """No host path, no user folder, nothing of the agent's project in what was shown."""
    secrets = [str(story.agent.base), str(story.agent.project), "openwebui+"]
    for text in texts:
        assert HOST_PATH_RE.search(text) is None, HOST_PATH_RE.search(text)
        for secret in secrets:
            assert secret not in text, (secret, text[:500])


def links_by_name(story: Story, answer: Any) -> dict[str, str]:
    """The answer's private links by their text (the file name)."""
    link_re = private_link_re(story.gateway_url)
    return {link.text: link.href for link in answer.links if link_re.match(link.href)}


def tile_by_name(result: TurnResult) -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for entry in result.files}


# ------------------------------------------------------------------ the steps


async def test_1_the_user_gets_each_file_the_agent_wrote(story: Story) -> None:
    first = await story.first_answer()
    answer = first.answer
    # the real tools wrote the real files
    assert story.report.read_text() == REPORT_V1
    assert story.figures.read_text() == FIGURES
    assert first.turns_left == 0, "the scripted model's turns were not all asked for"

    # the answer names both files; no host path anywhere in what A sees
    assert_no_host_path(story, answer.text, answer.html)
    for name in ("report.md", "figures.csv"):
        assert name in answer.text, (name, answer.text)
    # the agent's tool progress, shown above the answer while it ran (issue 34 item 4):
    # each tool by name with what it worked on, names only
    assert_no_host_path(story, *first.statuses)
    assert any(s.startswith("write_file") and "report.md" in s for s in first.statuses), (
        first.statuses
    )
    assert any(s.startswith("terminal") for s in first.statuses), first.statuses

    # each file as a link that downloads its bytes in A's browser (report.md clicked)
    links = links_by_name(story, answer)
    assert set(links) == {"report.md", "figures.csv"}, answer.links
    page = story.page_a
    clicked = await story.browser.run(page.click_link, "report.md")
    assert clicked.download == REPORT_V1.encode(), (clicked.status, clicked.body_text[:300])
    assert clicked.filename == "report.md"
    status, body = await story.browser.run(page.fetch, links["figures.csv"])
    assert (status, body) == (200, FIGURES.encode()), (status, body[:300])

    # and as Open WebUI file tiles, A's own files there, with the same bytes
    assert len(answer.file_tiles) == 2, answer
    tiles = tile_by_name(first)
    assert set(tiles) == {"report.md", "figures.csv"}, first.files
    expected = {"report.md": REPORT_V1, "figures.csv": FIGURES}
    for name, entry in tiles.items():
        status, body = await story.browser.run(page.fetch, story.owui.url + entry["url"])
        assert (status, body) == (200, expected[name].encode()), (name, status, body[:300])
    # a person clicks the tile: Open WebUI's file dialog, whose title downloads the file
    said, opened = await story.browser.run(page.open_tile, "report.md", "1-tile-dialog")
    assert "report.md" in said, said
    assert opened.download == REPORT_V1.encode(), (opened.status, opened.body_text[:300])
    # the gateway's list of A's files: the answer's two links
    owned = {a["filename"] for a in await story.owned(story.user_a)}
    assert owned == {"report.md", "figures.csv"}, owned


async def test_2_another_user_gets_nothing(story: Story) -> None:
    first = await story.first_answer()
    a_links = links_by_name(story, first.answer)
    assert a_links, "A's answer has no links to try"
    page_b = story.page_b

    # A's private links in B's browser: the 404 page, no download
    for name, href in a_links.items():
        opened = await story.browser.run(page_b.open_url, href, f"2-A-link-{name}")
        assert opened.download is None, f"B downloaded A's {name}"
        assert opened.status == 404, (name, opened.status, opened.body_text[:300])
        assert "No such file" in opened.body_text, opened.body_text[:300]
    # A's tiles in B's browser: Open WebUI's access control refuses them
    for entry in first.files:
        url = story.owui.url + entry["url"]
        status, body = await story.browser.run(page_b.fetch, url)
        assert status in (401, 403, 404), (entry["name"], status)
        assert body not in (REPORT_V1.encode(), FIGURES.encode())
    if first.files:
        await story.browser.run(page_b.open_url, story.owui.url + first.files[0]["url"], "2-A-tile")

    # B asks the agent for A's file; the agent reads it and repeats A's paths
    asked = await story.other_users_answer()
    answer = asked.answer
    assert asked.turns_left == 0
    assert_no_host_path(story, answer.text, answer.html, *asked.statuses)
    assert not [s for s in asked.statuses if "/v1/artifacts/" in s], asked.statuses
    for name in ("report.md", "figures.csv"):
        assert name in answer.text, (name, answer.text)  # the bare name, nothing more
    assert not [link for link in answer.links if "/v1/artifacts/" in link.href], answer.links
    assert answer.file_tiles == [] and answer.tile_images == [], answer
    assert asked.files == [], asked.files
    assert await story.owned(story.user_b) == []
    # and A's folder is still A's alone
    assert {a["filename"] for a in await story.owned(story.user_a)} == {"report.md", "figures.csv"}


async def test_3_the_agent_gets_its_own_paths_back(story: Story) -> None:
    result = await story.next_turn()  # after A's first answer and B's
    loop = [r for r in result.llm_requests if r.get("tools")]
    assert loop, f"the model got no agent-loop request: {result.llm_requests}"
    report, figures = str(story.report), str(story.figures)
    for request in loop:
        messages = request["messages"]
        contents = [_text(m.get("content")) for m in messages]
        everything = "\n".join(contents)
        # the first answer, as the agent gets it back: its own paths, no link
        previous = [c for c, m in zip(contents, messages, strict=True) if m["role"] == "assistant"]
        assert any(report in c and figures in c for c in previous), previous
        assert "/v1/artifacts/" not in everything, everything
        assert story.gateway_url not in everything
        # nothing of B: not B's folder, not B's conversation, not B's answer
        assert folder_of(story.user_b) not in everything
        assert ASK_OTHERS not in everything
        assert "The other user's report" not in everything
        assert ASK_REPORT in everything and ASK_ABOUT in everything
    answer = result.answer
    assert_no_host_path(story, answer.text, answer.html)
    assert "report.md" in links_by_name(story, answer), answer.links


async def test_4_a_rewrite_serves_the_new_bytes(story: Story) -> None:
    first = await story.first_answer()
    result = await story.rewrite()
    answer = result.answer
    assert story.report.read_text() == REPORT_V2
    assert result.turns_left == 0
    assert_no_host_path(story, answer.text, answer.html)
    page = story.page_a

    # the new answer's link gives the new bytes, in A's browser
    links = links_by_name(story, answer)
    assert "report.md" in links, answer.links
    clicked = await story.browser.run(page.click_link, "report.md")
    assert clicked.download is not None, (
        f"A clicked the rewritten report's link and got HTTP {clicked.status}: "
        f"{clicked.body_text[:300]}"
    )
    assert CHANGED_PAGE not in clicked.body_text
    assert clicked.download == REPORT_V2.encode(), clicked.download
    # and so does its tile
    tiles = tile_by_name(result)
    assert "report.md" in tiles, result.files
    status, body = await story.browser.run(page.fetch, story.owui.url + tiles["report.md"]["url"])
    assert (status, body) == (200, REPORT_V2.encode()), (status, body[:300])

    # the first answer's link was sealed to the first version: it says so, never the new
    # bytes; its tile is Open WebUI's own copy of that first version
    old = links_by_name(story, first.answer)["report.md"]
    opened = await story.browser.run(page.open_url, old, "4-first-link-after-rewrite")
    assert opened.download is None and opened.status == 410, (opened.status, opened.body_text)
    assert CHANGED_PAGE in opened.body_text, opened.body_text[:300]
    old_tile = tile_by_name(first)["report.md"]
    status, body = await story.browser.run(page.fetch, story.owui.url + old_tile["url"])
    assert (status, body) == (200, REPORT_V1.encode()), (status, body[:300])


def _text(content: Any) -> str:
    """A chat message's content as text (a string, or a list of text parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


async def test_5_tool_progress_names_the_files_only(story: Story) -> None:
    """What Hermes's tools did shows above each answer as Open WebUI status lines
    (issue 34 item 4): the tool and what it works on, by file name, like the text's
    prose: no host path, and no link (a status line is plain text, not a link)."""
    turns = {
        "1 (A)": await story.first_answer(),
        "2 (B)": await story.other_users_answer(),
        "3 (A)": await story.next_turn(),
        "4 (A)": await story.rewrite(),
    }
    shown = await story.browser.run(story.page_a.status_lines, "5-status-lines")
    for turn, result in {**turns, "4 (A), on screen": shown}.items():
        lines = result if isinstance(result, list) else result.statuses
        assert_no_host_path(story, *lines)
        assert not [s for s in lines if "http" in s or "/v1/artifacts/" in s], (turn, lines)
    first, rewrite = turns["1 (A)"].statuses, turns["4 (A)"].statuses
    assert "write_file: report.md" in first, first
    assert any(s.startswith("terminal: ") for s in first), first
    assert "read_file: report.md" in turns["2 (B)"].statuses, turns["2 (B)"].statuses
    # the rewrite's progress names the file that already existed the same way
    assert "write_file: report.md" in rewrite, rewrite
