"""Agent state is never an artifact: recognising an agent's home folder (blocking).

An agent keeps its own state beside the files it writes for users: the Hermes agent's
home (``~/.hermes``, ``$HERMES_HOME``, each ``profiles/<name>``) holds its sessions,
memories, credentials (``auth.json``, ``.env``), ``config.yaml``, databases and logs.
A deployment that lists that home, a profile folder or a folder above it as an
artifact root must still never hand those out.

A folder is an **agent home** when it is named ``.hermes`` or holds Hermes's markers:
``config.yaml`` beside ``state.db``, ``SOUL.md`` or a ``memories`` folder. A file whose
path runs through an agent home is denied when its first folder or name below the home
is one Hermes makes there (:data:`HERMES_ENTRIES`), whatever the depth of the home
above or below the artifact root; a folder of the operator's own inside a home (a
``workspace`` for the agent's files) stays allowed. Answers are cached per folder for
:data:`TTL_SECONDS` (a home can appear while the gateway runs).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

__all__ = ["HERMES_ENTRIES", "AgentHomes"]

#: what Hermes keeps in its home (hermes-agent 0.19.0): state, credentials, logs, caches,
#: other profiles; matched case-insensitively, ``*`` at the end for a prefix
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
)
#: a folder with config.yaml and one of these is a Hermes home
_MARKERS = ("state.db", "SOUL.md", "memories")
TTL_SECONDS = 10.0
CACHE = 4096


def _is_entry(name: str) -> bool:
    low = name.lower()
    return any(low.startswith(e[:-1]) if e.endswith("*") else low == e for e in HERMES_ENTRIES)


class AgentHomes:
    """``denied(resolved_path)``: does the path run through an agent home into its state?"""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._homes: dict[str, tuple[bool, float]] = {}

    def denied(self, resolved: str) -> bool:
        """``resolved`` is an absolute, normal path (symlinks resolved)."""
        parts = resolved.split("/")
        for i in range(1, len(parts) - 1):  # each folder above the file, and its child
            below = parts[i + 1]
            if _is_entry(below) and self._is_home("/".join(parts[: i + 1]) or "/"):
                return True
        return False

    def _is_home(self, folder: str) -> bool:
        if os.path.basename(folder) == ".hermes":
            return True
        now = self._clock()
        got = self._homes.get(folder)
        if got is not None and now - got[1] < TTL_SECONDS:
            return got[0]
        home = os.path.isfile(os.path.join(folder, "config.yaml")) and any(
            os.path.exists(os.path.join(folder, m)) for m in _MARKERS
        )
        if len(self._homes) >= CACHE:
            self._homes.clear()
        self._homes[folder] = (home, now)
        return home
