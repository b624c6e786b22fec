"""Managed downloads: the link resolver for the rewriter and the download route's logic.

Minting (``ResponseLinks.resolve``), in a worker thread so the trio loop never
blocks on the file system or the database:

1. map the agent's path to a host path (``[[artifacts.mounts]]``, then ``~``);
   Windows-style paths without a mount cannot be host files here;
2. ``realpath`` it (symlinks and ``..`` resolved) and require it to sit under a
   configured root (roots resolved the same way);
3. refuse denied locations (``artifacts.denied``: any run of path components below
   the root, checked on the path as written *and* as resolved);
4. ``lstat`` the resolved file: a regular file within ``max_bytes`` with one link
   (see "Hard links"); its identity (device, inode, size, mtime, ctime) is recorded
   with a random 192-bit id.

Anything refused becomes the file name alone (the resolver answers ``None``); the
reason is logged at debug level without the path. Within one response a path is
minted once (same path → same link).

Serving checks the link (owner, or signature and expiry), then opens the recorded
path with ``O_NOFOLLOW | O_NONBLOCK`` and compares the open file's identity with the
record: a changed or swapped file answers 410, never the new content. The ctime is
part of the identity (records minted before it was recorded compare without it): a
file rewritten in place with its size and mtime put back (``os.utime``) still has a
new ctime, which no unprivileged process can set. The file is streamed from that
descriptor (``pread`` in worker threads), never read whole.

Hard links
----------
A hard link is the same file under a second name: a link under an artifact root to a
file outside every root (``ln ~/.ssh/id_rsa artifacts/x``) passes the ``realpath``
check, because the path really is under the root. Nothing in the file system says
which name is the "real" one, so a file with ``st_nlink > 1`` gets no link at mint
and answers 410 at download (a link made after minting is caught there), unless
``artifacts.allow_hard_links = true`` -- for artifact trees built with hard links
on purpose (``cp -al`` snapshots, content-addressed stores) whose every name is
trusted.
"""

from __future__ import annotations

import fnmatch
import logging
import mimetypes
import os
import re
import stat
import time
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio
from quart.wrappers.response import ResponseBody

from gateway.config import Config
from gateway.errors import Gone, NotFound
from gateway.signing import Signer, new_artifact_id
from gateway.store import ArtifactRecord, Store

log = logging.getLogger("gateway.artifacts")

READ_CHUNK = 256 * 1024


@dataclass(frozen=True, slots=True)
class FileFacts:
    path: str
    filename: str
    device: int
    inode: int
    size: int
    mtime_ns: int
    content_type: str
    ctime_ns: int | None = None


class DeniedNames:
    """``artifacts.denied``, compiled once: does a pattern match a run of consecutive
    path components (case-insensitively, ``fnmatch`` wildcards)?

    The one-component patterns (most of them) are one alternation tried once per
    component; a longer pattern is tried at every position, component by component."""

    def __init__(self, patterns: Iterable[str]) -> None:
        split = [
            tuple(c.lower() for c in d.replace("\\", "/").strip("/").split("/") if c)
            for d in patterns
        ]
        #: a pattern of no component ("/") matches every path, as a run of none
        self._always = any(not p for p in split)
        singles = [fnmatch.translate(p[0]) for p in split if len(p) == 1]
        self._single = re.compile("|".join(singles)) if singles else None
        self._runs = tuple(
            tuple(re.compile(fnmatch.translate(c)) for c in p) for p in split if len(p) > 1
        )

    def __call__(self, parts: Sequence[str]) -> bool:
        if self._always:
            return True
        low = [x.lower() for x in parts]
        single = self._single
        if single is not None and any(single.match(x) for x in low):
            return True
        for run in self._runs:
            n = len(run)
            for i in range(len(low) - n + 1):
                if all(run[j].match(low[i + j]) for j in range(n)):
                    return True
        return False


class ArtifactService:
    """Mints links for responses and checks them for downloads."""

    def __init__(
        self,
        config: Config,
        store: Store,
        signer: Signer,
        *,
        clock: Callable[[], float] = time.time,
        allow_hard_links: bool | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.signer = signer
        self.clock = clock
        self.base_url = config.server.public_base_url.rstrip("/")
        roots = tuple(os.path.realpath(r) for r in config.artifacts.roots)
        #: each root and the prefix of the paths below it ("/" is its own prefix)
        self._roots = tuple((r, r if r.endswith("/") else r + "/") for r in roots)
        self._mounts = tuple(
            (m.agent_prefix.replace("\\", "/").rstrip("/"), Path(os.path.realpath(m.host_dir)))
            for m in config.artifacts.mounts
        )
        self.allow_hard_links = (
            config.artifacts.allow_hard_links if allow_hard_links is None else allow_hard_links
        )
        self._denied = DeniedNames(config.artifacts.denied)

    # -- checks (blocking; run in worker threads) --------------------------------

    def to_host_path(self, path: str) -> str | None:
        """Agent path → host path, or None when it cannot be a file on this host."""
        p = path.replace("\\", "/") if _looks_windows(path) else path
        for prefix, host in self._mounts:
            pre = prefix.replace("\\", "/")
            if p == pre or p.startswith(pre + "/"):
                rest = p[len(pre) :].lstrip("/")
                return str(host / rest) if rest else str(host)
        if _looks_windows(path) or path.startswith("//") or path.startswith("\\\\"):
            return None
        if path.startswith("~"):
            p = os.path.expanduser(path)
        return p if p.startswith("/") else None

    def agent_path(self, host_path: str) -> str:
        """A host path as the agent knows it (a mount's host directory → its agent prefix)."""
        for prefix, host in self._mounts:
            h = str(host)
            if host_path == h or host_path.startswith(h.rstrip("/") + "/"):
                rest = host_path[len(h) :].lstrip("/")
                if prefix[1:2] == ":":  # a Windows agent prefix
                    return prefix.replace("/", "\\") + (
                        "\\" + rest.replace("/", "\\") if rest else ""
                    )
                return prefix + ("/" + rest if rest else "")
        return host_path

    def _below_root(self, p: str) -> tuple[str, ...] | None:
        """The components of the normal absolute path ``p`` below the first root that
        holds it (``()`` for the root itself), or None when no root holds it."""
        if p.startswith("//"):  # POSIX leaves a leading "//" alone; pathlib reads it so
            path = Path(p)
            for root, _ in self._roots:
                if path.is_relative_to(root):
                    return path.relative_to(root).parts
            return None
        for root, prefix in self._roots:
            if p == root:
                return ()
            if p.startswith(prefix):
                return tuple(p[len(prefix) :].split("/"))
        return None

    def inspect(self, path: str) -> FileFacts | None:
        """May ``path`` get a link? Returns the file's identity, or None (name only)."""
        host = self.to_host_path(path)
        if host is None:
            return None
        written = os.path.normpath(host)
        try:
            resolved = os.path.realpath(host, strict=True)
        except (OSError, RuntimeError, ValueError):  # ValueError: NUL or lone surrogate
            log.debug("no link: missing or unresolvable")
            return None
        rel_resolved = self._below_root(resolved)
        if rel_resolved is None:
            log.debug("no link: outside the artifact roots")
            return None
        rel_written = self._below_root(written)
        if rel_written is None:
            rel_written = Path(written).parts
        if self._denied(rel_resolved) or self._denied(rel_written):
            log.debug("no link: denied location")
            return None
        try:
            st = os.lstat(resolved)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            log.debug("no link: not a regular file")
            return None
        if st.st_size > self.config.artifacts.max_bytes:
            log.debug("no link: larger than artifacts.max_bytes")
            return None
        if st.st_nlink > 1 and not self.allow_hard_links:
            log.debug("no link: the file has other hard links (artifacts.allow_hard_links)")
            return None
        name = os.path.basename(resolved)
        ctype = mimetypes.guess_type(name)[0] or "application/octet-stream"
        return FileFacts(
            resolved,
            name,
            st.st_dev,
            st.st_ino,
            st.st_size,
            st.st_mtime_ns,
            ctype,
            st.st_ctime_ns,
        )

    def mint(self, facts: FileFacts, owner: str, mode: str) -> ArtifactRecord:
        """A new stored record for ``facts`` (blocking)."""
        rec = self.new_record(facts, owner, mode)
        self.store.create_artifact(rec)
        self.signer.refresh()  # the url() that follows signs with a current key
        return rec

    def mint_all(self, recs: Sequence[ArtifactRecord]) -> None:
        """Store :meth:`new_record`'s records in one transaction, all or none (blocking)."""
        self.store.create_artifacts(recs)
        self.signer.refresh()

    def new_record(self, facts: FileFacts, owner: str, mode: str) -> ArtifactRecord:
        """The record :meth:`mint` stores for ``facts`` (a new id; not stored yet)."""
        now = self.clock()
        expires = now + self.config.artifacts.public_ttl_seconds if mode == "public" else None
        return ArtifactRecord(
            id=new_artifact_id(),
            owner=owner,
            link_mode=mode,
            path=facts.path,
            filename=facts.filename,
            device=facts.device,
            inode=facts.inode,
            size=facts.size,
            mtime_ns=facts.mtime_ns,
            created=now,
            expires=expires,
            content_type=facts.content_type,
            ctime_ns=facts.ctime_ns,
        )

    # -- links -----------------------------------------------------------------------

    def share(self, rec: ArtifactRecord) -> ArtifactRecord:
        """A public link for the same file as the owner's ``rec`` (blocking).

        The file must still be the one recorded (else 410); the new record keeps its
        identity, so the public link stops working too if the file changes.
        """
        fd = self._open_verified(rec)
        os.close(fd)
        facts = FileFacts(
            rec.path,
            rec.filename,
            rec.device,
            rec.inode,
            rec.size,
            rec.mtime_ns,
            rec.content_type,
            rec.ctime_ns,
        )
        return self.mint(facts, rec.owner, "public")

    def url(self, rec: ArtifactRecord) -> str:
        base = f"{self.base_url}/v1/artifacts/{rec.id}"
        if rec.link_mode != "public" or rec.expires is None:
            return base
        exp = int(rec.expires)
        return f"{base}?exp={exp}&sig={self.signer.sign_link(rec.id, exp)}"

    def describe(self, rec: ArtifactRecord) -> dict[str, Any]:
        """The manifest entry (no path)."""
        return {
            "id": rec.id,
            "filename": rec.filename,
            "url": self.url(rec),
            "link_mode": rec.link_mode,
            "bytes": rec.size,
        }

    def for_response(self, owner: str, mode: str) -> ResponseLinks:
        return ResponseLinks(self, owner, mode)

    # -- download checks ---------------------------------------------------------------

    async def get(self, artifact_id: str) -> ArtifactRecord | None:
        if not _plausible_id(artifact_id):
            return None
        return await trio.to_thread.run_sync(self.store.get_artifact, artifact_id)

    async def authorize_public(self, artifact_id: str, exp: str, sig: str) -> ArtifactRecord:
        """A public link: signature first (tampered → 404), then expiry (→ 410)."""
        # Only the exact text that was signed: ASCII digits, no leading zero. (str.isdigit
        # alone lets "²" through to int(), a 500, and "0<exp>" or other-script digits
        # would verify as aliases of the signed link.)
        if not (exp.isascii() and exp.isdigit()) or len(exp) > 12 or str(int(exp)) != exp:
            raise _not_found()
        exp_i = int(exp)
        # a store-backed signer reads the key from the store: never cached, so a
        # retired key is refused at once on every instance
        if not await trio.to_thread.run_sync(self.signer.verify_link, artifact_id, exp_i, sig):
            raise _not_found()
        rec = await self.get(artifact_id)
        if rec is None or rec.link_mode != "public":
            raise _not_found()
        if rec.revoked:
            raise Gone("This link was revoked by its owner.", code="artifact_revoked")
        if exp_i < self.clock() or (rec.expires is not None and rec.expires < self.clock()):
            raise Gone("This link has expired; ask for a new one.", code="artifact_expired")
        return rec

    async def authorize_owner(self, artifact_id: str, owner: str) -> ArtifactRecord:
        rec = await self.get(artifact_id)
        if rec is None or rec.owner != owner:
            raise _not_found()
        if rec.revoked:
            raise Gone("This link was revoked by its owner.", code="artifact_revoked")
        return rec

    async def open_verified(self, rec: ArtifactRecord) -> int:
        """Open the recorded file and check it is still the same file (else 410)."""
        return await trio.to_thread.run_sync(self._open_verified, rec)

    def _open_verified(self, rec: ArtifactRecord) -> int:
        changed = Gone(
            "The file behind this link has changed or is gone since the link was made.",
            code="artifact_changed",
        )
        try:
            fd = os.open(rec.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            raise changed from None
        try:
            st = os.fstat(fd)
            same = (
                stat.S_ISREG(st.st_mode)
                and st.st_dev == rec.device
                and st.st_ino == rec.inode
                and st.st_size == rec.size
                and st.st_mtime_ns == rec.mtime_ns
                and (rec.ctime_ns is None or st.st_ctime_ns == rec.ctime_ns)
                and (st.st_nlink <= 1 or self.allow_hard_links)
            )
            if not same or self._below_root(os.path.realpath(rec.path)) is None:
                raise changed
            return fd
        except BaseException:
            os.close(fd)
            raise


class ResponseLinks:
    """The link resolver of one response: same path → same link; builds the manifest."""

    def __init__(self, service: ArtifactService, owner: str, mode: str) -> None:
        self._svc = service
        self._owner = owner
        self._mode = mode
        self._by_path: dict[str, str | None] = {}
        self._by_file: dict[str, ArtifactRecord] = {}
        self._minted: list[ArtifactRecord] = []

    @property
    def download_link_mode(self) -> str:
        return self._mode

    async def resolve(self, path: str) -> str | None:
        if path in self._by_path:
            return self._by_path[path]
        url = await trio.to_thread.run_sync(self._resolve_sync, path)
        self._by_path[path] = url
        return url

    async def resolve_many(self, paths: list[str]) -> None:
        """Resolve the new ones of ``paths`` in one worker-thread hop (in order, stopping
        at the first failure: that path is left for :meth:`resolve`, which raises it, and
        none after it is minted, as if they had been resolved one by one)."""
        todo = [p for p in dict.fromkeys(paths) if p not in self._by_path]
        if not todo:
            return
        if len(todo) == 1:
            await self.resolve(todo[0])
            return
        self._by_path.update(await trio.to_thread.run_sync(self._resolve_all, todo))

    def _resolve_all(self, paths: list[str]) -> dict[str, str | None]:
        """Inspect ``paths`` in order (stopping at the first that fails) and store the
        new records in one transaction; if that fails, none of them is kept and the
        answers end before the first path that needed one (its resolve() raises)."""
        done: dict[str, ArtifactRecord | None] = {}
        new: dict[str, ArtifactRecord] = {}  # file → record, not stored yet
        first_new = len(paths)
        for i, path in enumerate(paths):
            try:
                facts = self._svc.inspect(path)
            except Exception:
                break  # resolve() meets it again, in its place in the text
            if facts is None:
                done[path] = None
                continue
            rec = self._by_file.get(facts.path)
            if rec is None:
                rec = new.get(facts.path)
            if rec is None:
                rec = new[facts.path] = self._svc.new_record(facts, self._owner, self._mode)
                first_new = min(first_new, i)
            done[path] = rec
        if new:
            try:
                self._svc.mint_all(list(new.values()))
            except Exception:  # none stored: answer the paths before the first new one
                done = {p: done[p] for p in paths[:first_new] if p in done}
            else:
                self._by_file.update(new)
                self._minted.extend(new.values())
        return {p: None if r is None else self._svc.url(r) for p, r in done.items()}

    def _resolve_sync(self, path: str) -> str | None:
        facts = self._svc.inspect(path)
        if facts is None:
            return None
        rec = self._by_file.get(facts.path)
        if rec is None:
            rec = self._svc.mint(facts, self._owner, self._mode)
            self._by_file[facts.path] = rec
            self._minted.append(rec)
        return self._svc.url(rec)

    def manifest(self) -> dict[str, Any]:
        return {
            "download_link_mode": self._mode,
            "artifacts": [self._svc.describe(r) for r in self._minted],
        }


def _not_found() -> NotFound:
    return NotFound("No such artifact, or it is not yours.", code="artifact_not_found")


def _plausible_id(artifact_id: str) -> bool:
    return 16 <= len(artifact_id) <= 64 and all(c.isalnum() or c in "-_" for c in artifact_id)


def _looks_windows(path: str) -> bool:
    return len(path) >= 2 and path[1] == ":" and path[0].isascii() and path[0].isalpha()


# -- HTTP details (content disposition, ranges, streaming) -------------------------


def content_disposition(filename: str) -> str:
    """RFC 6266 ``attachment`` with an ASCII fallback and a UTF-8 ``filename*``."""
    fallback = "".join(
        c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in filename
    )
    fallback = fallback or "download"
    quoted = urllib.parse.quote(filename, safe="")
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quoted}"


def etag(rec: ArtifactRecord) -> str:
    return f'"{rec.id[:16]}-{rec.size:x}-{rec.mtime_ns:x}"'


def _digits(text: str) -> bool:
    """ASCII digits only: ``int()`` also takes "١٢", "+5", " 5" and "5_0"."""
    return text.isascii() and text.isdigit()


def parse_range(header: str | None, size: int) -> tuple[int, int] | bool | None:
    """``Range: bytes=a-b`` → (start, end inclusive); None: whole file; False: 416.

    RFC 9110 §14.2: a Range that is not valid (bad syntax, ``last < first``, digits
    other than ASCII) is ignored -- the whole file, 200. A valid one that no byte of
    the file satisfies (``first >= size``, a zero-length suffix) is 416.
    """
    if not header:
        return None
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None  # unsupported forms: serve the whole file (allowed by RFC 9110)
    first, dash, last = spec.strip().partition("-")
    if not dash:
        return None
    if first == "":
        if not _digits(last):
            return None
        n = int(last)
        if n <= 0:
            return False
        return (max(0, size - n), size - 1) if size > 0 else False
    if not _digits(first) or (last and not _digits(last)):
        return None
    start = int(first)
    end = int(last) if last else size - 1
    if last and end < start:
        return None  # invalid: ignored
    if start >= size:
        return False
    return start, min(end, size - 1)


def download_content_type(rec: ArtifactRecord) -> str:
    """The ``Content-Type`` of a download: ``text/*`` says ``charset=utf-8`` (what agents
    write) unless the record names a charset already."""
    ctype = rec.content_type
    if ctype.lower().startswith("text/") and "charset=" not in ctype.lower():
        return f"{ctype}; charset=utf-8"
    return ctype


class FileBody(ResponseBody):
    """Streams ``length`` bytes of an open descriptor from ``start``; closes it after.

    Reads are ``pread`` calls in worker threads; a class-based iterator (not an async
    generator) so a client that disconnects leaves nothing to finalize.
    """

    def __init__(self, fd: int, start: int, length: int) -> None:
        self._fd = fd
        self._offset = start
        self._remaining = length

    async def __aenter__(self) -> FileBody:
        return self

    async def __aexit__(self, exc_type: Any, exc_value: Any, tb: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __aiter__(self) -> FileBody:
        return self

    async def __anext__(self) -> bytes:
        if self._remaining <= 0 or self._fd < 0:
            raise StopAsyncIteration
        n = min(READ_CHUNK, self._remaining)
        data = await trio.to_thread.run_sync(os.pread, self._fd, n, self._offset)
        if not data:
            raise StopAsyncIteration
        self._offset += len(data)
        self._remaining -= len(data)
        return data


class NameOnly:
    """The resolver that never mints: every path becomes its file name (background tasks)."""

    def __init__(self, mode: str) -> None:
        self._mode = mode

    @property
    def download_link_mode(self) -> str:
        return self._mode

    async def resolve(self, path: str) -> str | None:
        return None

    def manifest(self) -> dict[str, Any]:
        return {"download_link_mode": self._mode, "artifacts": []}
