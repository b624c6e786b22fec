"""Agent state is never an artifact: recognising an agent's home folder (blocking).

An agent keeps its own state beside the files it writes for users: the Hermes agent's
home (``~/.hermes``, ``$HERMES_HOME``, each ``profiles/<name>``) holds its sessions,
memories, credentials (``auth.json``, ``.env``, OAuth tokens, MCP tokens), ``config.yaml``,
databases, checkpoints (copies of the files it edited) and logs. A deployment that lists
that home, a profile folder or a folder above it as an artifact root must still never
hand those out.

A folder is an **agent home** when it is named ``.hermes``, is listed in
``artifacts.agent_homes``, or holds Hermes's markers: ``config.yaml`` beside
``state.db``, ``SOUL.md``, ``memories``, ``auth.json``, ``gateway_state.json`` or
``response_store.db``. **Everything in an agent home is denied** (an allowlist, not a
list of what Hermes keeps: it keeps more with every version), except below an artifact
root the operator put *inside* the home — a folder of its own there, such as the
agent's workspace — whose first folder below the home is none of the names Hermes uses
(:data:`HERMES_ENTRIES`). The innermost home on the path decides (a profile inside
``~/.hermes`` is a home of its own). Answers are cached per folder for
:data:`TTL_SECONDS` (a home can appear while the gateway runs).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence

__all__ = ["HERMES_ENTRIES", "AgentHomes"]

#: names Hermes uses in its home (hermes-agent 0.19.0: state, credentials, logs, caches,
#: other profiles): a root inside a home under one of these is no folder of the
#: operator's own; matched case-insensitively, ``*`` at the end for a prefix
HERMES_ENTRIES = (
    ".env",
    "auth.json",
    "auth.lock",
    "config.yaml",
    "soul.md",
    "state.db*",
    "response_store.db*",
    "kanban.db*",
    "kanban",
    "sessions",
    "memories",
    "logs",
    "cron",
    "skills",
    "hooks",
    "pairing",
    "platforms",
    "state",
    "sandboxes",
    "image_cache",
    "audio_cache",
    "bin",
    "profiles",
    "gateway_state.json",
    "gateway.lock",
    "gateway-starts.log",
    "channel_directory.json",
    ".skills_prompt_snapshot.json",
    ".clean_shutdown",
    ".tirith-install-failed",
    "active_profile",
    ".hermes-tmp.*",
    ".hermes_history",
    "memory_store.db*",
    "projects.db*",
    "cache",
    "checkpoints",
    "credentials",
    "auth",
    "mcp-tokens",
    "whatsapp",
    "session-exports",
    "webhook_subscriptions.json",
    ".anthropic_oauth.json",
    "google_token.json",
)
#: a folder with config.yaml and one of these is a Hermes home
_MARKERS = (
    "state.db",
    "SOUL.md",
    "memories",
    "auth.json",
    "gateway_state.json",
    "response_store.db",
)
TTL_SECONDS = 10.0
CACHE = 4096


def _is_entry(name: str) -> bool:
    low = name.lower()
    return any(low.startswith(e[:-1]) if e.endswith("*") else low == e for e in HERMES_ENTRIES)


class AgentHomes:
    """``denied(resolved, roots)``: does the path lie in an agent's home (outside a
    folder of the operator's own in it)?"""

    def __init__(
        self, declared: Sequence[str] = (), clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._clock = clock
        self._declared = frozenset(declared)
        self._homes: dict[str, tuple[bool, float]] = {}

    def denied(self, resolved: str, roots: Sequence[str] = ()) -> bool:
        """``resolved`` is an absolute, normal path (symlinks resolved); ``roots`` the
        resolved artifact roots it was found under (a root inside a home is the
        operator's own folder there)."""
        parts = resolved.split("/")
        for i in range(len(parts) - 2, 0, -1):  # the innermost home decides
            folder = "/".join(parts[: i + 1])
            if self._is_home(folder):
                return not _own_folder(folder, parts[i + 1], resolved, roots)
        return False

    def _is_home(self, folder: str) -> bool:
        if os.path.basename(folder) == ".hermes" or folder in self._declared:
            return True
        now = self._clock()
        got = self._homes.get(folder)
        if got is not None and now - got[1] < TTL_SECONDS:
            return got[0]
        home = os.path.isfile(os.path.join(folder, "config.yaml")) and any(
            os.path.lexists(os.path.join(folder, m)) for m in _MARKERS
        )
        if len(self._homes) >= CACHE:
            self._homes.clear()
        self._homes[folder] = (home, now)
        return home


def _own_folder(home: str, first: str, resolved: str, roots: Sequence[str]) -> bool:
    """Is ``resolved`` below a root strictly inside ``home`` whose first folder there
    (``first``) is not one of Hermes's own?"""
    if _is_entry(first):
        return False
    inside = home.rstrip("/") + "/"
    return any(
        root.startswith(inside) and (resolved + "/").startswith(root.rstrip("/") + "/")
        for root in roots
    )
