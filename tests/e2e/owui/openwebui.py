"""A real Open WebUI 0.12.4 as a subprocess on 127.0.0.1, offline, for browser tests.

:class:`OpenWebUI` starts ``open-webui serve`` from the cached venv made by
``install.py`` with a throw-away ``DATA_DIR``, waits until ``/health`` answers,
signs up the first user (who becomes the admin) and adds a normal user through the
admin API. It is started once per test session and shared; every test then points
its one OpenAI-compatible connection at that test's own runs proxy with
:meth:`OpenWebUI.connect` (``POST /openai/config/update``, which also clears Open
WebUI's model cache), so no test depends on another's ports.

Offline: ``OFFLINE_MODE`` (which also sets ``HF_HUB_OFFLINE``), no Ollama, no
embedding model (``RAG_EMBEDDING_MODEL=""`` so nothing is loaded at start), no
version check, no telemetry. ``docs/openwebui-notes.md`` says why each one matters.

Stopping is strict: SIGTERM to the process group, wait, SIGKILL on timeout, then the
``DATA_DIR`` is removed. Startup on 2 cores takes ~20 s, nearly all of it Python
imports (torch, transformers, sentence-transformers via langchain) and the database
migrations; :meth:`OpenWebUI.launch` only spawns the process, so the session can
do other work while it boots (see ``conftest.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.owui.install import data_template

OPENWEBUI_STARTUP_TIMEOUT = 180.0
STOP_TIMEOUT = 15.0
#: Open WebUI's own default password rules accept these (no validation regex is set)
ADMIN = ("Admin Owner", "admin@example.com", "admin-pass-0123456789")
USER = ("Bob Builder", "bob@example.com", "bob-pass-0123456789")
#: a second normal user: must get nothing of Bob's
OTHER = ("Carol Other", "carol@example.com", "carol-pass-0123456789")
#: the connection's placeholder until a test connects its own proxy (discard port:
#: refused at once, so Open WebUI's model list is empty rather than slow)
UNCONNECTED_URL = "http://127.0.0.1:9/v1"


@dataclass
class OwuiUser:
    id: str
    email: str
    name: str
    role: str
    password: str
    token: str  # Open WebUI's session JWT (what the `token` cookie holds)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


def _die_with_parent() -> None:
    """In the child: SIGTERM when the test process dies (even by SIGKILL); Linux only."""
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def offline_env(data_dir: Path, port: int, connection_key: str) -> dict[str, str]:
    """The environment Open WebUI gets: offline, throw-away, headers forwarded."""
    return {
        "DATA_DIR": str(data_dir),
        "WEBUI_SECRET_KEY": secrets.token_urlsafe(32),  # fixed for this run
        "WEBUI_URL": f"http://127.0.0.1:{port}",
        "CORS_ALLOW_ORIGIN": f"http://127.0.0.1:{port}",
        "OFFLINE_MODE": "true",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "ENABLE_OLLAMA_API": "false",
        "ENABLE_OPENAI_API": "true",
        "OPENAI_API_BASE_URL": UNCONNECTED_URL,
        "OPENAI_API_KEY": connection_key,
        "ENABLE_FORWARD_USER_INFO_HEADERS": "true",
        # no SentenceTransformer at start (get_ef loads nothing without a model name);
        # uploads that must not be indexed use ?process=false
        "RAG_EMBEDDING_ENGINE": "",
        "RAG_EMBEDDING_MODEL": "",
        "ENABLE_VERSION_UPDATE_CHECK": "false",
        "ANONYMIZED_TELEMETRY": "false",
        "SCARF_NO_ANALYTICS": "true",
        "DO_NOT_TRACK": "true",
        "USER_AGENT": "artifact-gateway-tests",
        "ENABLE_DB_MIGRATIONS": "true",
    }


@dataclass
class OpenWebUI:
    """One Open WebUI process; :meth:`launch`, then :meth:`wait_ready`, then :meth:`stop`."""

    python: Path
    url: str
    data_dir: Path
    log_path: Path
    connection_key: str
    proc: subprocess.Popen[bytes] | None = None
    admin: OwuiUser | None = None
    user: OwuiUser | None = None
    other: OwuiUser | None = None
    started_at: float = 0.0
    #: launch -> first 200 from /health (measured by a watcher thread, so it is the
    #: real startup time even when nobody waited for it)
    ready_seconds: float | None = None
    #: how long the session actually blocked in :meth:`wait_ready`
    waited_seconds: float | None = None
    env: dict[str, str] = field(default_factory=dict)
    _healthy: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def launch(
        cls,
        python: Path,
        *,
        log_path: Path,
        connection_key: str,
        env: Mapping[str, str] | None = None,
    ) -> OpenWebUI:
        port = free_port()
        data_dir = Path(tempfile.mkdtemp(prefix="artifact-gateway-openwebui-"))
        template = data_template()
        if (template / "webui.db").exists():  # already migrated: saves ~6 s of startup
            shutil.copytree(template, data_dir, dirs_exist_ok=True)
        full_env = {**os.environ, **offline_env(data_dir, port, connection_key), **(env or {})}
        owui = cls(
            python=python,
            url=f"http://127.0.0.1:{port}",
            data_dir=data_dir,
            log_path=log_path,
            connection_key=connection_key,
            env=full_env,
        )
        log_path.parent.mkdir(parents=True, exist_ok=True)
        owui.started_at = time.monotonic()
        with log_path.open("wb") as log:
            owui.proc = subprocess.Popen(
                [
                    str(python.parent / "open-webui"),
                    "serve",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                ],
                cwd=data_dir,  # `serve` may write .webui_secret_key into its cwd
                env=full_env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() ends all of it
                preexec_fn=_die_with_parent,
            )
        threading.Thread(target=owui._watch_health, name="openwebui-health", daemon=True).start()
        return owui

    # -- lifecycle ------------------------------------------------------------------

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def _watch_health(self) -> None:
        proc = self.proc
        deadline = self.started_at + OPENWEBUI_STARTUP_TIMEOUT
        while proc is not None and proc.poll() is None and time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    self.ready_seconds = time.monotonic() - self.started_at
                    self._healthy.set()
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)

    def wait_healthy(self, timeout: float = OPENWEBUI_STARTUP_TIMEOUT) -> bool:
        """Block until ``/health`` answered (True), or the process died or time ran out."""
        deadline = time.monotonic() + timeout
        while not self._healthy.wait(0.5):
            proc = self.proc
            if proc is None or proc.poll() is not None or time.monotonic() > deadline:
                return False
        return True

    def wait_ready(self, timeout: float = OPENWEBUI_STARTUP_TIMEOUT) -> None:
        """Until ``GET /health`` answers 200; raise with the log's tail if it never does."""
        assert self.proc is not None
        waiting = time.monotonic()
        deadline = self.started_at + timeout
        while not self._healthy.wait(0.25):
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"Open WebUI exited with status {self.proc.returncode} during startup; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"Open WebUI did not answer /health within {timeout:.0f} s; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
        self.waited_seconds = time.monotonic() - waiting

    def stop(self) -> None:
        """End the process group (TERM, wait, KILL) and remove ``DATA_DIR``. Idempotent."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=STOP_TIMEOUT)
        if proc is not None:
            # anything left in its group (it forks nothing by default, but be sure)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(self.data_dir, ignore_errors=True)

    # -- setup through the REST API (sync: runs once, before any trio test) ----------

    def _client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def create_users(self) -> None:
        """First signup becomes the admin; the admin adds two normal users."""
        name, email, password = ADMIN
        with self._client() as c:
            r = c.post(
                "/api/v1/auths/signup", json={"name": name, "email": email, "password": password}
            )
            r.raise_for_status()
            a = r.json()
        self.admin = OwuiUser(a["id"], email, name, a["role"], password, a["token"])
        assert self.admin.role == "admin", a
        with self._client(self.admin.token) as c:
            added = []
            for name, email, password in (USER, OTHER):
                r = c.post(
                    "/api/v1/auths/add",
                    json={"name": name, "email": email, "password": password, "role": "user"},
                )
                r.raise_for_status()
                u = r.json()
                added.append(OwuiUser(u["id"], email, name, u["role"], password, u["token"]))
        self.user, self.other = added

    def task_config(self) -> dict[str, Any]:
        """The admin's background-task settings (``GET /api/v1/tasks/config``)."""
        assert self.admin is not None
        with self._client(self.admin.token) as c:
            r = c.get("/api/v1/tasks/config")
            r.raise_for_status()
            data: dict[str, Any] = r.json()
            return data

    def set_task_config(self, **changes: Any) -> dict[str, Any]:
        """Change background-task settings (e.g. ``ENABLE_TITLE_GENERATION=False``);
        the settings before the change, to give back to this method later."""
        assert self.admin is not None
        before = self.task_config()
        with self._client(self.admin.token) as c:
            r = c.post("/api/v1/tasks/config/update", json={**before, **changes})
            r.raise_for_status()
        return before

    # -- per test (async: called from inside trio tests) --------------------------------

    def _aclient(self, token: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )

    async def connect(
        self, base_url: str, key: str | None = None, *, config: dict[str, Any] | None = None
    ) -> None:
        """Point connection 0 at ``base_url`` (e.g. a test's proxy ``…/v1``).

        ``config`` is ``OPENAI_API_CONFIGS["0"]``, e.g. ``{"auth_type": "session"}``.
        """
        assert self.admin is not None
        body = {
            "ENABLE_OPENAI_API": True,
            "OPENAI_API_BASE_URLS": [base_url],
            "OPENAI_API_KEYS": [key if key is not None else self.connection_key],
            "OPENAI_API_CONFIGS": {"0": config or {}},
        }
        async with self._aclient(self.admin.token) as c:
            r = await c.post("/openai/config/update", json=body)
            r.raise_for_status()

    async def model_ids(self, user: OwuiUser) -> list[str]:
        """What ``user`` sees in the model selector (``GET /api/models``)."""
        async with self._aclient(user.token) as c:
            r = await c.get("/api/models")
            r.raise_for_status()
            return [m["id"] for m in r.json()["data"]]

    async def publish_model(
        self,
        model_id: str,
        *,
        base_model_id: str | None = None,
        name: str | None = None,
        params: dict[str, Any] | None = None,
    ) -> None:
        """Make ``model_id`` visible to every user (grant ``user:*`` read).

        With ``base_model_id`` it is a workspace model ("preset") on top of a
        connection's model; its ``params`` (e.g. ``{"custom_params":
        {"download_link_mode": "public"}}``) reach the connection as top-level body keys.
        """
        assert self.admin is not None
        grants = [{"principal_type": "user", "principal_id": "*", "permission": "read"}]
        async with self._aclient(self.admin.token) as c:
            if base_model_id is None and params is None:
                # a connection's own model: the access route creates its DB row
                r = await c.post(
                    "/api/v1/models/model/access/update",
                    json={"id": model_id, "name": name or model_id, "access_grants": grants},
                )
                r.raise_for_status()
                return
            existing = await c.get("/api/v1/models/model", params={"id": model_id})
            form = {
                "id": model_id,
                "base_model_id": base_model_id,
                "name": name or model_id,
                "meta": {"description": f"test preset on {base_model_id or model_id}"},
                "params": params or {},
                "access_grants": grants,
            }
            if existing.status_code == 200 and existing.json():
                r = await c.post("/api/v1/models/model/update", json=form)
            else:
                r = await c.post("/api/v1/models/create", json=form)
            r.raise_for_status()
            r = await c.post(
                "/api/v1/models/model/access/update",
                json={"id": model_id, "name": name or model_id, "access_grants": grants},
            )
            r.raise_for_status()

    async def chat(self, user: OwuiUser, chat_id: str) -> dict[str, Any]:
        """A stored chat as Open WebUI keeps it (``GET /api/v1/chats/{id}``)."""
        async with self._aclient(user.token) as c:
            r = await c.get(f"/api/v1/chats/{chat_id}")
            r.raise_for_status()
            data: dict[str, Any] = r.json()
            return data

    async def chat_tags(self, user: OwuiUser, chat_id: str) -> list[str]:
        async with self._aclient(user.token) as c:
            r = await c.get(f"/api/v1/chats/{chat_id}/tags")
            r.raise_for_status()
            return [t["name"] for t in r.json()]

    async def file_content(self, user: OwuiUser, file_id: str) -> httpx.Response:
        """What ``user`` gets for a stored file (``GET /api/v1/files/{id}/content``)."""
        async with self._aclient(user.token) as c:
            return await c.get(f"/api/v1/files/{file_id}/content")

    async def install_function(
        self, function_id: str, source: str, valves: dict[str, Any], *, name: str = ""
    ) -> None:
        """Create a Function as the admin, make it active and global, set its valves."""
        assert self.admin is not None
        async with self._aclient(self.admin.token) as c:
            r = await c.post(
                "/api/v1/functions/create",
                json={
                    "id": function_id,
                    "name": name or function_id,
                    "content": source,
                    "meta": {"description": "installed by the browser tests"},
                },
            )
            r.raise_for_status()
            for toggle in ("toggle", "toggle/global"):
                r = await c.post(f"/api/v1/functions/id/{function_id}/{toggle}")
                r.raise_for_status()
            r = await c.get(f"/api/v1/functions/id/{function_id}")
            r.raise_for_status()
            state = r.json()
            assert state["is_active"] and state["is_global"], state
            r = await c.post(f"/api/v1/functions/id/{function_id}/valves/update", json=valves)
            r.raise_for_status()

    async def delete_function(self, function_id: str) -> None:
        assert self.admin is not None
        async with self._aclient(self.admin.token) as c:
            r = await c.delete(f"/api/v1/functions/id/{function_id}/delete")
            if r.status_code != 404:
                r.raise_for_status()

    def describe(self) -> str:
        return json.dumps(
            {"url": self.url, "data_dir": str(self.data_dir), "log": str(self.log_path)}
        )
