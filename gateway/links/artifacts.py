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

import dataclasses
import fnmatch
import logging
import mimetypes
import os
import re
import stat
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio
from quart.wrappers.response import ResponseBody

from gateway.core.errors import GatewayError, Gone, NotFound
from gateway.links.agenthome import AgentHomes
from gateway.links.signing import Signer, new_artifact_id
from gateway.ops.config import PRINCIPAL_PLACEHOLDER, Config, principal_folder
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
        self._scopes = Scopes(config)
        self._mounts = tuple(
            (m.agent_prefix.replace("\\", "/").rstrip("/"), Path(os.path.realpath(m.host_dir)))
            for m in config.artifacts.mounts
        )
        self.allow_hard_links = (
            config.artifacts.allow_hard_links if allow_hard_links is None else allow_hard_links
        )
        self._denied = DeniedNames(config.artifacts.denied)
        self._homes = AgentHomes([os.path.realpath(h) for h in config.artifacts.agent_homes])
        #: ``(owner, n)`` -> how many of n new links may be minted now (gateway.principals.quotas)
        self.link_quota: Callable[[str, int], int] | None = None

    def links_allowed(self, owner: str, n: int) -> int:
        """How many of ``n`` new links ``owner`` may mint now (``[quotas]
        links_per_minute``); a path over it becomes its file name (blocking)."""
        return n if self.link_quota is None or n == 0 else self.link_quota(owner, n)

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

    def scope(self, owner: str) -> tuple[str, ...]:
        """The folders ``owner``'s links may point into (resolved; see :class:`Scopes`)."""
        return tuple(root for root, _ in self._scopes.of(owner))

    def inspect(self, path: str, owner: str) -> FileFacts | None:
        """May ``path`` get a link of ``owner``'s? The file's identity, or None (its name
        alone: missing, outside the owner's scope, denied, too big, hard-linked; the
        same answer for each, so a link tells nothing about another's files)."""
        host = self.to_host_path(path)
        if host is None:
            return None
        roots = self._scopes.of(owner)
        written = os.path.normpath(host)
        try:
            resolved = os.path.realpath(host, strict=True)
            resolved.encode("utf-8")  # a name that is not UTF-8 (surrogate escapes)
        except (OSError, RuntimeError, ValueError):  # ValueError: NUL or lone surrogate
            log.debug("no link for %s: missing, unresolvable or not UTF-8", _shown(host))
            return None
        rel_resolved = below_root(resolved, roots)
        if rel_resolved is None:
            log.debug("no link for %s: outside the requester's artifact roots", _shown(host))
            return None
        rel_written = below_root(written, roots)
        if rel_written is None:
            rel_written = Path(written).parts
        if self._denied(rel_resolved) or self._denied(rel_written):
            log.debug("no link for %s: a denied location (artifacts.denied)", _shown(host))
            return None
        if self._homes.denied(resolved, [root for root, _ in roots]):
            log.debug("no link for %s: an agent's own state (its home folder)", _shown(host))
            return None
        try:
            st = os.lstat(resolved)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            log.debug("no link for %s: not a regular file", _shown(host))
            return None
        if st.st_size > self.config.artifacts.max_bytes:
            log.debug("no link for %s: larger than artifacts.max_bytes", _shown(host))
            return None
        if st.st_nlink > 1 and not self.allow_hard_links:
            log.debug("no link for %s: other hard links (artifacts.allow_hard_links)", _shown(host))
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

    def save(self, new: Sequence[ArtifactRecord], rebound: Sequence[ArtifactRecord]) -> None:
        """Store :meth:`new_record`'s records and re-bound ones in one transaction, all
        or none (blocking)."""
        self.store.save_artifacts(new, rebound)
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
            resolved = os.path.realpath(rec.path)
            if not same or below_root(resolved, self._scopes.of(rec.owner)) is None:
                raise changed
            if self._homes.denied(resolved, [root for root, _ in self._scopes.of(rec.owner)]):
                raise changed
            return fd
        except BaseException:
            os.close(fd)
            raise


Roots = tuple[tuple[str, str], ...]  # (resolved root, the prefix of the paths below it)


def _prefixed(roots: Iterable[str]) -> Roots:
    """Each root with the prefix of the paths below it ("/" is its own prefix)."""
    return tuple((r, r if r.endswith("/") else r + "/") for r in dict.fromkeys(roots))


def below_root(p: str, roots: Roots) -> tuple[str, ...] | None:
    """The components of the normal absolute path ``p`` below the first of ``roots``
    that holds it (``()`` for the root itself), or None when none holds it."""
    if p.startswith("//"):  # POSIX leaves a leading "//" alone; pathlib reads it so
        path = Path(p)
        for root, _ in roots:
            if path.is_relative_to(root):
                return path.relative_to(root).parts
        return None
    for root, prefix in roots:
        if p == root:
            return ()
        if p.startswith(prefix):
            return tuple(p[len(prefix) :].split("/"))
    return None


def _shown(host: str) -> str:
    """A path in a debug line: its file name only (the folders are the user's)."""
    return repr(os.path.basename(host.rstrip("/")) or "/")


class Scopes:
    """Which folders each principal's links may point into (``[artifacts]``).

    A principal's scope is its ``[[artifacts.scopes]]`` roots if it has an entry, else
    ``roots`` with ``{principal}`` standing for its own folder; ``shared_roots`` are in
    every scope. Roots written by the operator are resolved once (symlinks included);
    a principal's folder is not: it is the resolved part before the placeholder, then
    the folder name and the rest as written, so a symlink there (the agent can make
    one) never widens the scope — a file behind it resolves elsewhere and is outside.
    """

    CACHE = 4096

    def __init__(self, config: Config) -> None:
        arts = config.artifacts
        self._shared = [os.path.realpath(r) for r in arts.shared_roots]
        self._fixed = {s.principal: [os.path.realpath(r) for r in s.roots] for s in arts.scopes}
        self._plain: list[str] = []
        self._templates: list[tuple[str, str]] = []  # (resolved parent, the rest)
        for root in arts.roots:
            text = str(root)
            if PRINCIPAL_PLACEHOLDER in text:
                head, _, rest = text.partition(PRINCIPAL_PLACEHOLDER)
                self._templates.append((os.path.realpath(head or "/"), rest.rstrip("/")))
            else:
                self._plain.append(os.path.realpath(text))
        self._cache: dict[str, Roots] = {}

    def of(self, owner: str) -> Roots:
        """``owner``'s roots (resolved, each with its prefix)."""
        got = self._cache.get(owner)
        if got is None:
            if len(self._cache) >= self.CACHE:
                self._cache.clear()
            got = self._cache[owner] = _prefixed([*self._own(owner), *self._shared])
        return got

    def _own(self, owner: str) -> list[str]:
        fixed = self._fixed.get(owner)
        if fixed is not None:
            return fixed
        folder = principal_folder(owner)
        own = list(self._plain)
        if folder is not None:
            own += [os.path.join(parent, folder) + rest for parent, rest in self._templates]
        return own


class ResponseLinks:
    """The links of one answer, following its files' life until the answer ends.

    Contract (the answer's text may name a path before the agent writes the file, and
    the agent may rewrite a file after its link went out):

    * **Every mention is checked again.** A path that is no servable file yet gets its
      name now and is resolved afresh at its next mention ("not there yet" is never
      final inside an answer). A path that has a link keeps that link (same path →
      same link) and its record is re-bound to the file as it is at that mention.
      Mentions resolved in one batch (:meth:`resolve_many`, one worker-thread hop)
      share one check.
    * **Files the agent reports** (:meth:`report`: the paths its tool events say it
      writes) need no mention: :meth:`seal` links them when they are servable then.
      So does a path mentioned only before its file existed ("I'll save the table to
      <path>", then the tool writes it): its mention keeps the name, the manifest
      gets the link. At most :data:`MAX_REPORTED` such paths per answer.
    * **Sealing.** When the answer ends, :meth:`seal` (once) binds every link of the
      answer to its file as the answer leaves it, so the owner's click serves the
      bytes the answer describes; a link whose path is no servable file then is dead
      (410 ``artifact_changed``) and left out of the manifest, as is a link its owner
      revoked meanwhile. After sealing nothing re-binds a link: a later change of the
      file answers 410, as always.
    * **Adoption.** An instance that takes over another's answer (a run adopted after
      its instance stopped) starts from that answer's links (:meth:`adopt`): the same
      file keeps the link the client already has.

    Every check is :meth:`ArtifactService.inspect` (the owner's roots, the denial
    list, size, hard links), so a re-bound link can only ever point at a file a new
    link could point at. Not safe for concurrent use (one pipeline awaits it).
    """

    def __init__(self, service: ArtifactService, owner: str, mode: str) -> None:
        self._svc = service
        self._owner = owner
        self._mode = mode
        #: agent path → the id of its link (the paths that have one)
        self._by_path: dict[str, str] = {}
        #: resolved host path → the id of the link bound to it (two spellings of one
        #: file share a link)
        self._by_file: dict[str, str] = {}
        #: id → the link's latest record, in the order the links were made
        self._links: dict[str, ArtifactRecord] = {}
        #: paths the agent reported writing or mentioned before they were servable, in
        #: order (checked when sealing)
        self._reported: dict[str, None] = {}
        #: links whose owner revoked them (left out of the manifest)
        self._revoked: set[str] = set()
        self._sealed = False

    @property
    def download_link_mode(self) -> str:
        return self._mode

    async def resolve(self, path: str) -> str | None:
        """The link for ``path`` now (None: its name alone). Raises what the check of
        ``path`` raised (an unreadable folder, the store being down)."""
        answers = await trio.to_thread.run_sync(self._check_all, [path], True)
        return answers[path]

    async def resolve_many(self, paths: list[str]) -> dict[str, str | None]:
        """The links for ``paths`` now, checked in one worker-thread hop, in order and
        stopping before the first that fails: that path and the rest are missing from
        the answer (:meth:`resolve` then raises the failure in its place, as if they
        were resolved one by one)."""
        if not paths:
            return {}
        return await trio.to_thread.run_sync(self._check_all, paths, False)

    def report(self, paths: Iterable[str]) -> None:
        """Paths the agent says it writes: linked by :meth:`seal` if servable then."""
        for path in paths:
            if len(self._reported) >= MAX_REPORTED:
                return
            self._reported[path] = None

    def adopt(self, records: Iterable[ArtifactRecord]) -> None:
        """Start from links an earlier instance made for this answer (its owner's,
        not revoked: the caller checks): each file keeps its link, and sealing binds
        them as the answer leaves their files."""
        for rec in records:
            if rec.owner != self._owner or rec.revoked or rec.id in self._links:
                continue
            self._links[rec.id] = rec
            self._by_file.setdefault(rec.path, rec.id)
            self._by_path.setdefault(rec.path, rec.id)

    async def seal(self) -> None:
        """Bind every link of the answer to its file as the answer leaves it, and link
        the reported files (once: the answer's end). A failure leaves the links as they
        were (logged): the answer itself is complete."""
        if self._sealed:
            return
        self._sealed = True
        if not self._by_path and not self._reported:
            return
        try:
            await trio.to_thread.run_sync(self._seal_sync)
        except GatewayError as exc:
            log.warning("the links of an answer could not be sealed: %s", exc.message)

    def manifest(self) -> dict[str, Any]:
        return {
            "download_link_mode": self._mode,
            "artifacts": [
                self._svc.describe(r)
                for r in self._links.values()
                if r.size != GONE.size and r.id not in self._revoked
            ],
        }

    # -- blocking parts (worker threads) ---------------------------------------------

    def _inspect_all(self, paths: Iterable[str], strict: bool) -> dict[str, FileFacts | None]:
        """Each path's facts, in order; a failing check ends them before it (raised
        when ``strict``)."""
        facts: dict[str, FileFacts | None] = {}
        for path in paths:
            if path in facts:
                continue
            try:
                facts[path] = self._svc.inspect(path, self._owner)
            except Exception:
                if strict:
                    raise
                break
        return facts

    def _check_all(self, paths: list[str], strict: bool) -> dict[str, str | None]:
        """Check ``paths`` and store what changed in one transaction. If the store
        fails nothing is kept, and the answers end before the first path that needed a
        write (raised when ``strict``: :meth:`resolve` meets the failure there)."""
        facts = self._inspect_all(paths, strict)
        plan = self._plan(facts)
        try:
            self._write(plan)
        except Exception:
            if strict:
                raise
            kept = list(facts)[: plan.first_write]
            return {p: self._url(plan, p) for p in kept}
        self.report(p for p in facts if p not in plan.records)  # (may exist later)
        return {p: self._url(plan, p) for p in facts}

    def _url(self, plan: _Plan, path: str) -> str | None:
        rid = plan.records.get(path)
        return None if rid is None else self._svc.url(plan.latest[rid])

    def _plan(self, facts: dict[str, FileFacts | None]) -> _Plan:
        """The links the checked ``facts`` need: a path keeps its link (re-bound when
        its file changed), else shares the link of its file, else gets a new one."""
        plan = _Plan()
        for i, (path, f) in enumerate(facts.items()):
            if f is None:
                continue
            rid = self._by_path.get(path) or plan.by_file.get(f.path)
            if rid is None:
                rid = self._by_file.get(f.path)
            rec = None if rid is None else plan.latest.get(rid) or self._links[rid]
            if rec is None:
                rec = self._svc.new_record(f, self._owner, self._mode)
                plan.new.add(rec.id)
            elif _same_file(rec, f):
                plan.latest.setdefault(rec.id, rec)
                plan.by_file[f.path] = rec.id
                plan.records[path] = rec.id
                continue
            else:
                rec = _bound(rec, f)
            plan.first_write = min(plan.first_write, i)
            plan.latest[rec.id] = rec
            plan.by_file[f.path] = rec.id
            plan.records[path] = rec.id
        return plan

    def _write(self, plan: _Plan) -> None:
        """Store the plan's new and changed records (one transaction), then keep them."""
        new = [r for i, r in plan.latest.items() if i in plan.new]
        over = new[self._svc.links_allowed(self._owner, len(new)) :]
        if over:  # beyond the owner's links per minute: those paths get their names
            plan.drop({r.id for r in over})
            new = new[: len(new) - len(over)]
        rebound = [
            r for i, r in plan.latest.items() if i not in plan.new and r != self._links.get(i)
        ]
        if new or rebound:
            self._svc.save(new, rebound)
        for rec in plan.latest.values():
            old = self._links.get(rec.id)
            if old is not None and old.path != rec.path and self._by_file.get(old.path) == rec.id:
                del self._by_file[old.path]
            self._by_file[rec.path] = rec.id
            self._links[rec.id] = rec
        self._by_path.update(plan.records)

    def _seal_sync(self) -> None:
        facts: dict[str, FileFacts | None] = {}
        for path in (*self._by_path, *self._reported):
            try:
                facts[path] = self._svc.inspect(path, self._owner)
            except Exception:  # a check that fails: no servable file
                log.debug("sealing: a path could not be checked", exc_info=True)
                facts[path] = None
        plan = self._plan(facts)
        alive = set(plan.latest)
        for rid, rec in self._links.items():
            if rid not in alive and rec.size != GONE.size:
                plan.latest[rid] = _gone(rec)
        self._write(plan)
        for rid in self._links:
            stored = self._svc.store.get_artifact(rid)
            if stored is None or stored.revoked:
                self._revoked.add(rid)


class _Plan:
    """What one check stores: each servable path's link id, each link's latest record
    (new ones in ``new``), and the index of the first path that needed a write."""

    __slots__ = ("by_file", "first_write", "latest", "new", "records")

    def __init__(self) -> None:
        self.records: dict[str, str] = {}
        self.latest: dict[str, ArtifactRecord] = {}
        self.by_file: dict[str, str] = {}
        self.new: set[str] = set()
        self.first_write = sys.maxsize

    def drop(self, ids: set[str]) -> None:
        """Forget the new links ``ids``: their paths get no link."""
        self.new -= ids
        for rid in ids:
            del self.latest[rid]
        self.records = {p: r for p, r in self.records.items() if r not in ids}
        self.by_file = {p: r for p, r in self.by_file.items() if r not in ids}


#: the identity a link gets when its path is no servable file at the answer's end: no
#: file has inode 0 and a size of -1, so the download answers 410
GONE = FileFacts("", "", 0, 0, -1, 0, "application/octet-stream", 0)
#: paths one answer's agent may report writing or mention before they exist (each costs
#: a check when sealing)
MAX_REPORTED = 1024


def _same_file(rec: ArtifactRecord, f: FileFacts) -> bool:
    return (rec.path, rec.device, rec.inode, rec.size, rec.mtime_ns, rec.ctime_ns) == (
        f.path,
        f.device,
        f.inode,
        f.size,
        f.mtime_ns,
        f.ctime_ns,
    )


def _bound(rec: ArtifactRecord, f: FileFacts) -> ArtifactRecord:
    """``rec`` pointing at the file ``f`` (its id, owner, mode and dates kept)."""
    return dataclasses.replace(
        rec,
        path=f.path,
        filename=f.filename,
        device=f.device,
        inode=f.inode,
        size=f.size,
        mtime_ns=f.mtime_ns,
        content_type=f.content_type,
        ctime_ns=f.ctime_ns,
    )


def _gone(rec: ArtifactRecord) -> ArtifactRecord:
    """``rec`` as a dead link (its name and path kept for the owner's listing)."""
    return dataclasses.replace(rec, device=0, inode=0, size=GONE.size, mtime_ns=0, ctime_ns=0)


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
    """ASCII digits only, at most 19 of them (every file offset): ``int()`` also takes
    "١٢", "+5", " 5" and "5_0", and refuses 4,300 digits or more (a 500 before)."""
    return len(text) <= 19 and text.isascii() and text.isdigit()


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

    async def resolve_many(self, paths: list[str]) -> dict[str, str | None]:
        return dict.fromkeys(paths)

    def report(self, paths: Iterable[str]) -> None:
        pass

    async def seal(self) -> None:
        pass

    def manifest(self) -> dict[str, Any]:
        return {"download_link_mode": self._mode, "artifacts": []}
