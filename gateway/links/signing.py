"""Link signatures, the per-principal upstream id, and artifact ids.

The HMAC code is pure stdlib. Keys live in one of two places:

* **the state store** (what the gateway uses: :meth:`Signer.from_store`), shared by
  every instance on the same database, so a rotation or retirement made anywhere is
  seen everywhere (see "Rotation" below);
* **a key file** ``state_dir/signing-keys.json`` (:meth:`Signer.load_or_create`, the
  format of earlier releases). :meth:`Signer.from_store` imports it once into a store
  that has no keys yet and renames it ``signing-keys.json.imported``; if the store
  already has keys and a local key file differs from them, it logs a warning and uses
  the store's.

Key file
--------
``state_dir/signing-keys.json``, mode 0600 (refused with :class:`ConfigError` if it
grants any group or other permission), written atomically (temporary file created
``O_CREAT|O_EXCL`` 0600, fsync, rename, fsync of the directory)::

    {
      "format": "artifact-gateway-signing-keys",
      "version": 1,
      "active": "3f9a1c0e",                      kid that signs new links
      "principal_salt": "<base64url, 32 bytes>", key of principal_id(), never rotated
      "keys": [                                  oldest first; all of them verify
        {"kid": "3f9a1c0e", "secret": "<base64url, 32 bytes>", "created": 1700000000}
      ]
    }

A ``kid`` is 8 lowercase hex characters; a secret is at least 32 random bytes.

Domain strings
--------------
Every HMAC input starts with its own label, so a value computed for one purpose can
never be replayed as another:

* ``b"artifact-gateway:link:v1\\x00" + id + b"\\x00" + str(exp)`` -- public link
  signatures, keyed by a signing key. The signature is ``<kid>.<mac>`` where ``mac``
  is the 32-byte HMAC-SHA256 in base64url without padding (43 characters).
* ``b"artifact-gateway:principal:v1\\x00" + principal`` -- the opaque upstream
  principal id ``"p_" + 24 hex``, keyed by ``principal_salt``.

Why a separate principal salt: upstream ids must stay stable for as long as the
gateway keeps its state (upstreams use them for abuse tracking and caching), while
signing keys come and go. Deriving the id from the oldest signing key would change
every id when that key is retired, so the salt lives apart and is never rotated.

Rotation (store-backed signer)
------------------------------
1. ``gateway keys rotate`` (:meth:`Signer.rotate`) adds a new key and makes it the
   only active one, in one transaction. Links signed with older keys still verify.
2. **Verification reads the key from the store every time** (one indexed read per
   public download, beside the artifact record itself): nothing caches a key, so a
   retired key is refused by every instance from the moment the retirement commits.
3. **Signing uses a cached active key, at most** :data:`ACTIVE_KEY_MAX_AGE` **seconds
   old**: minting (in a worker thread) re-reads it when the cache is older than that,
   and the maintenance task (:mod:`gateway.runs.reaper`) refreshes it on the same period,
   so every instance signs with the new key within 5 s of a rotation. Until then it
   signs with the previous key, which still verifies.
4. After the longest public-link lifetime (``artifacts.public_ttl_seconds``) has
   passed, ``gateway keys retire KID`` deletes the old key; links it signed stop
   verifying (404) -- they would have expired anyway. Retiring the active key is
   refused. Do not retire a key within :data:`ACTIVE_KEY_MAX_AGE` of the rotation
   that replaced it (an instance may still be signing with it).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import stat
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.core.errors import ConfigError

if TYPE_CHECKING:
    from gateway.store.base import Store

log = logging.getLogger("gateway.signing")

__all__ = [
    "ACTIVE_KEY_MAX_AGE",
    "KEY_FILE_NAME",
    "LINK_DOMAIN",
    "PRINCIPAL_DOMAIN",
    "Signer",
    "new_artifact_id",
]

KEY_FILE_NAME = "signing-keys.json"
#: how old (seconds) the cached active key of a store-backed signer may get
ACTIVE_KEY_MAX_AGE = 5.0
LINK_DOMAIN = b"artifact-gateway:link:v1\x00"
PRINCIPAL_DOMAIN = b"artifact-gateway:principal:v1\x00"
FORM_DOMAIN = b"artifact-gateway:form:v1\x00"

_FORMAT = "artifact-gateway-signing-keys"
_VERSION = 1
_SECRET_BYTES = 32
#: principal ids remembered (a proxy may act for any number of owners: then start over)
PRINCIPAL_IDS = 4096
_MAC_CHARS = 43  # base64url of 32 bytes, no padding
_KID_RE = re.compile(r"[0-9a-f]{8}")
_SIG_MAX_CHARS = 64  # "kid" "." 43 chars = 52; anything longer is garbage


def new_artifact_id() -> str:
    """A fresh random artifact id: 192 bits, URL-safe, 32 characters."""
    return secrets.token_urlsafe(24)


def _b64e(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64d(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _new_kid(taken: Mapping[str, bytes]) -> str:
    while True:
        kid = secrets.token_hex(4)
        if kid not in taken:
            return kid


class Signer:
    """Holds the signing keys (one active, older ones verify only) and the principal salt.

    Three ways to get one: :meth:`from_store` (the gateway: keys shared through the
    state store), :meth:`load_or_create` (a key file), or the constructor /
    :meth:`generate` (in memory; ``path=None`` makes :meth:`rotate` and :meth:`retire`
    persist nothing).
    """

    __slots__ = (
        "_active",
        "_active_secret",
        "_clock",
        "_created",
        "_ids",
        "_keys",
        "_loaded_at",
        "_lock",
        "_max_age",
        "_path",
        "_principal_salt",
        "_store",
    )

    def __init__(
        self,
        *,
        keys: Mapping[str, bytes],
        active_kid: str,
        principal_salt: bytes,
        path: Path | None = None,
        created: Mapping[str, int] | None = None,
    ) -> None:
        for kid, secret in keys.items():
            _check_key(kid, secret)
        if active_kid not in keys:
            raise ValueError("the active kid is not among the keys")
        if len(principal_salt) < _SECRET_BYTES:
            raise ValueError(f"the principal salt has at least {_SECRET_BYTES} bytes")
        self._keys = dict(keys)  # insertion order = oldest first (unused with a store)
        self._active = active_kid
        self._active_secret = self._keys[active_kid]
        self._principal_salt = bytes(principal_salt)
        self._ids: dict[str, str] = {}  # principal_id's answers (bounded: PRINCIPAL_IDS)
        self._path = path
        self._created = {kid: (created or {}).get(kid, 0) for kid in self._keys}
        self._store: Store | None = None
        self._lock = threading.Lock()
        self._clock: Callable[[], float] = time.monotonic
        self._loaded_at = 0.0
        self._max_age = ACTIVE_KEY_MAX_AGE

    @classmethod
    def generate(cls, *, path: Path | None = None) -> Signer:
        """A signer with one fresh key and a fresh principal salt (not persisted)."""
        kid = secrets.token_hex(4)
        return cls(
            keys={kid: secrets.token_bytes(_SECRET_BYTES)},
            active_kid=kid,
            principal_salt=secrets.token_bytes(_SECRET_BYTES),
            path=path,
            created={kid: int(time.time())},
        )

    @classmethod
    def from_store(
        cls,
        store: Store,
        *,
        state_dir: Path | None = None,
        max_age: float = ACTIVE_KEY_MAX_AGE,
        clock: Callable[[], float] = time.monotonic,
    ) -> Signer:
        """The signer of a gateway instance: keys and salt live in ``store`` (blocking).

        A store without keys is seeded once: from ``state_dir/signing-keys.json`` if
        there is one (then renamed ``.imported``), else with a fresh key and salt. Two
        instances seeding at once end up with the same keys (the first seed wins). If
        the store has keys and a local key file differs from them, a warning is logged
        and the store's keys are used.
        """
        from gateway.store.base import SigningKey

        file = Path(state_dir) / KEY_FILE_NAME if state_dir is not None else None
        salt = store.principal_salt()
        if salt is None:
            seed: Signer | None = None
            if file is not None:
                try:
                    seed = cls._load(file)
                except FileNotFoundError:
                    seed = None
            imported = seed is not None
            seed = seed or cls.generate()
            keys = [
                SigningKey(kid, secret, seed._created.get(kid, 0), kid == seed._active)
                for kid, secret in seed._keys.items()
            ]
            if store.init_signing(keys, seed._principal_salt) and imported and file:
                log.info("imported %s into the state store", KEY_FILE_NAME)
                try:
                    os.replace(file, file.with_name(KEY_FILE_NAME + ".imported"))
                except OSError as exc:
                    log.warning(
                        "could not rename %s after importing it (%s); it is no longer read",
                        KEY_FILE_NAME,
                        exc.strerror,
                    )
            salt = store.principal_salt()
            if salt is None:
                raise ConfigError("state_dir", "the state store lost its signing keys")
        elif file is not None:
            cls._warn_if_file_differs(store, salt, file)
        active = store.active_signing_key()
        if active is None:
            raise ConfigError(
                "database_url",
                "the state store has no active signing key; run `gateway keys rotate`",
            )
        signer = cls(
            keys={active.kid: active.secret},
            active_kid=active.kid,
            principal_salt=salt,
            created={active.kid: active.created},
        )
        signer._store = store
        signer._clock = clock
        signer._max_age = max_age
        signer._loaded_at = clock()
        return signer

    @classmethod
    def _warn_if_file_differs(cls, store: Store, salt: bytes, file: Path) -> None:
        try:
            local = cls._load(file)
        except FileNotFoundError:
            return
        except ConfigError as exc:
            log.warning("ignoring %s: %s", KEY_FILE_NAME, exc.message)
            return
        stored = {k.kid: k.secret for k in store.list_signing_keys()}
        if local._keys != stored or local._principal_salt != salt:
            log.warning(
                "%s in the state directory differs from the signing keys in the state store; "
                "the store's keys are used (links signed only by the file's keys do not "
                "verify). Move the file away once you have checked it.",
                KEY_FILE_NAME,
            )

    @classmethod
    def load_or_create(cls, state_dir: Path) -> Signer:
        """Load ``state_dir/signing-keys.json``, creating it (and ``state_dir``, 0700) if missing.

        Raises :class:`ConfigError` (key ``state_dir``) if the file grants group/other
        permissions, is not a regular file, is malformed, or cannot be read or written.
        """
        path = Path(state_dir) / KEY_FILE_NAME
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                "state_dir", f"cannot create the state directory ({exc.strerror})"
            ) from exc
        try:
            return cls._load(path)
        except FileNotFoundError:
            pass
        signer = cls.generate(path=path)
        try:
            _write_atomically(path, signer._to_json(), replace=False)
        except FileExistsError:
            # Another process created it first: use theirs, so both sign alike.
            return cls._load(path)
        except OSError as exc:
            raise ConfigError(
                "state_dir", f"cannot write {KEY_FILE_NAME} ({exc.strerror})"
            ) from exc
        return signer

    @classmethod
    def _load(cls, path: Path) -> Signer:
        """Read and validate the key file; FileNotFoundError passes through."""
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise ConfigError(
                "state_dir",
                f"cannot open {KEY_FILE_NAME} ({exc.strerror}); it must be a regular file",
            ) from exc
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ConfigError("state_dir", f"{KEY_FILE_NAME} is not a regular file")
            if st.st_mode & 0o077:
                raise ConfigError(
                    "state_dir",
                    f"{KEY_FILE_NAME} grants permissions to group or other users; "
                    "run chmod 600 on it (and consider rotating the keys)",
                )
            with os.fdopen(fd, "rb", closefd=False) as fh:
                raw = fh.read()
        finally:
            os.close(fd)
        return cls._from_json(raw, path)

    @classmethod
    def _from_json(cls, raw: bytes, path: Path) -> Signer:
        def bad(why: str) -> ConfigError:
            return ConfigError(
                "state_dir", f"{KEY_FILE_NAME} is malformed ({why}); restore it from a backup"
            )

        try:
            doc = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise bad("not JSON") from exc
        if not isinstance(doc, dict):
            raise bad("not an object")
        if doc.get("format") != _FORMAT or doc.get("version") != _VERSION:
            raise bad(f"expected format {_FORMAT!r} version {_VERSION}")
        entries = doc.get("keys")
        if not isinstance(entries, list) or not entries:
            raise bad("no keys")
        keys: dict[str, bytes] = {}
        created: dict[str, int] = {}
        try:
            for entry in entries:
                kid, secret = entry["kid"], entry["secret"]
                if not isinstance(kid, str) or not isinstance(secret, str) or kid in keys:
                    raise bad("bad or duplicate key entry")
                keys[kid] = _b64d(secret)
                stamp = entry.get("created", 0)
                created[kid] = stamp if isinstance(stamp, int) else 0
            salt_text = doc["principal_salt"]
            active = doc["active"]
            if not isinstance(salt_text, str) or not isinstance(active, str):
                raise bad("bad principal_salt or active")
            salt = _b64d(salt_text)
            return cls(
                keys=keys, active_kid=active, principal_salt=salt, path=path, created=created
            )
        except (KeyError, TypeError, binascii.Error) as exc:
            raise bad("missing or undecodable field") from exc
        except ValueError as exc:
            raise bad(str(exc)) from exc

    def _to_json(self) -> bytes:
        doc: dict[str, Any] = {
            "format": _FORMAT,
            "version": _VERSION,
            "active": self._active,
            "principal_salt": _b64e(self._principal_salt),
            "keys": [
                {"kid": kid, "secret": _b64e(secret), "created": self._created.get(kid, 0)}
                for kid, secret in self._keys.items()
            ],
        }
        return (json.dumps(doc, indent=2) + "\n").encode("ascii")

    def _persist(self) -> None:
        if self._path is not None:
            _write_atomically(self._path, self._to_json(), replace=True)

    def __repr__(self) -> str:
        where = "store" if self._store is not None else f"kids={list(self._keys)!r}"
        return f"<Signer active={self._active!r} {where}>"

    @property
    def active_kid(self) -> str:
        """The kid that signs new links (store-backed: as of the last refresh)."""
        return self._active

    @property
    def kids(self) -> tuple[str, ...]:
        """Every kid that verifies, oldest first (store-backed: reads the store)."""
        if self._store is not None:
            return tuple(k.kid for k in self._store.list_signing_keys())
        return tuple(self._keys)

    @property
    def store_backed(self) -> bool:
        return self._store is not None

    def refresh(self, *, force: bool = False) -> None:
        """Store-backed: re-read the active key if the cached one is older than
        :data:`ACTIVE_KEY_MAX_AGE` (or ``force``). Blocking; a no-op otherwise."""
        store = self._store
        if store is None or (not force and self._clock() - self._loaded_at < self._max_age):
            return
        active = store.active_signing_key()
        with self._lock:
            if active is not None:
                self._active, self._active_secret = active.kid, active.secret
            self._loaded_at = self._clock()

    def rotate(self) -> str:
        """Add a new active key, keep the older ones for verification, persist; return its kid."""
        if self._store is not None:
            from gateway.store.base import SigningKey

            taken = {kid: b"" for kid in self.kids}
            key = SigningKey(
                _new_kid(taken), secrets.token_bytes(_SECRET_BYTES), int(time.time()), True
            )
            self._store.add_signing_key(key)
            with self._lock:
                self._active, self._active_secret = key.kid, key.secret
                self._loaded_at = self._clock()
            return key.kid
        kid = _new_kid(self._keys)
        old = (dict(self._keys), self._active, self._active_secret, dict(self._created))
        self._keys[kid] = secrets.token_bytes(_SECRET_BYTES)
        self._created[kid] = int(time.time())
        self._active, self._active_secret = kid, self._keys[kid]
        try:
            self._persist()
        except BaseException:
            self._keys, self._active, self._active_secret, self._created = old
            raise
        return kid

    def retire(self, kid: str) -> None:
        """Remove an older key (links it signed stop verifying) and persist.

        Raises ``ValueError`` for an unknown kid or the active one.
        """
        if self._store is not None:
            self._store.retire_signing_key(kid)
            return
        if kid not in self._keys:
            raise ValueError("unknown kid")
        if kid == self._active:
            raise ValueError("cannot retire the active key; rotate first")
        old = (dict(self._keys), dict(self._created))
        del self._keys[kid]
        self._created.pop(kid, None)
        try:
            self._persist()
        except BaseException:
            self._keys, self._created = old
            raise

    @staticmethod
    def _link_message(artifact_id: str, exp: int) -> bytes:
        return LINK_DOMAIN + artifact_id.encode("utf-8") + b"\x00" + str(exp).encode("ascii")

    @classmethod
    def _mac(cls, kid: str, secret: bytes, artifact_id: str, exp: int) -> str:
        digest = hmac.new(secret, cls._link_message(artifact_id, exp), hashlib.sha256).digest()
        return f"{kid}.{_b64e(digest)}"

    def sign_link(self, artifact_id: str, exp: int) -> str:
        """Signature ``<kid>.<base64url mac>`` of a public link for (artifact_id, exp).

        Never blocks: a store-backed signer uses its cached active key (see
        :meth:`refresh`)."""
        if isinstance(exp, bool) or not isinstance(exp, int):
            raise TypeError("exp is an int (unix seconds)")
        if not isinstance(artifact_id, str) or not artifact_id or "\x00" in artifact_id:
            raise ValueError("artifact_id is a non-empty string without NUL")
        with self._lock:
            kid, secret = self._active, self._active_secret
        return self._mac(kid, secret, artifact_id, exp)

    def verify_link(self, artifact_id: str, exp: int, sig: str) -> bool:
        """True iff ``sig`` was made by :meth:`sign_link` with any key that still verifies.

        Never raises on attacker-controlled input; expiry is the caller's business. A
        store-backed signer reads the key from the store (blocking; StoreError if the
        store is down), so a retired key is refused at once.
        """
        try:
            if isinstance(exp, bool) or not isinstance(exp, int):
                return False
            if not isinstance(artifact_id, str) or not artifact_id or "\x00" in artifact_id:
                return False
            if not isinstance(sig, str) or len(sig) > _SIG_MAX_CHARS or not sig.isascii():
                return False
            kid, dot, mac = sig.partition(".")
            if not dot or not _KID_RE.fullmatch(kid) or len(mac) != _MAC_CHARS:
                return False
            secret = self._store.get_signing_key(kid) if self._store else self._keys.get(kid)
            if secret is None:
                return False
            expected = self._mac(kid, secret, artifact_id, exp)
            # Compare the canonical encodings, so a non-canonical base64 spelling of the
            # same MAC (padding bits set) is refused too.
            return hmac.compare_digest(expected.encode("ascii"), sig.encode("ascii"))
        except (UnicodeError, ValueError, TypeError):
            return False

    def principal_id(self, principal: str) -> str:
        """Opaque stable id of ``principal`` for upstream requests: ``"p_"`` + 24 hex."""
        known = self._ids.get(principal)
        if known is not None:  # an HMAC is ~10 k instructions; the salt never changes
            return known
        if len(self._ids) >= PRINCIPAL_IDS:  # owners asserted by a proxy are unbounded
            self._ids.clear()
        message = PRINCIPAL_DOMAIN + principal.encode("utf-8", "surrogatepass")
        # hmac.digest: the same MAC as hmac.new(...).hexdigest(), in one C call
        pid = "p_" + hmac.digest(self._principal_salt, message, "sha256").hex()[:24]
        self._ids[principal] = pid
        return pid

    def form_token(self, purpose: str, *parts: str) -> str:
        """A token binding an HTML form to its purpose and subject (CSRF protection):
        HMAC under the principal salt, domain-separated from every other use of it."""
        message = FORM_DOMAIN + "\x00".join((purpose, *parts)).encode("utf-8", "surrogatepass")
        return hmac.new(self._principal_salt, message, hashlib.sha256).hexdigest()[:32]

    def check_form_token(self, token: str, purpose: str, *parts: str) -> bool:
        expected = self.form_token(purpose, *parts)
        return isinstance(token, str) and hmac.compare_digest(
            expected.encode(), token.encode("ascii", "replace")
        )


def _check_key(kid: str, secret: bytes) -> None:
    if not _KID_RE.fullmatch(kid):
        raise ValueError("a kid is 8 lowercase hex characters")
    if len(secret) < _SECRET_BYTES:
        raise ValueError(f"a signing key has at least {_SECRET_BYTES} bytes")


def _write_atomically(path: Path, data: bytes, *, replace: bool) -> None:
    """Write ``data`` to ``path`` with mode 0600 via a temporary file in the same directory.

    ``replace=False`` refuses to overwrite an existing file (``FileExistsError``), so two
    processes creating the key file at once cannot end up with different keys.
    """
    directory = path.parent
    tmp = directory / f".{path.name}.{secrets.token_hex(6)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(tmp, flags, 0o600)
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        if replace:
            os.replace(tmp, path)
        else:
            _link_no_clobber(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)


def _link_no_clobber(tmp: Path, path: Path) -> None:
    """Move ``tmp`` to ``path`` unless ``path`` exists (then ``FileExistsError``)."""
    try:
        os.link(tmp, path)  # atomic and never overwrites
    except FileExistsError:
        raise
    except OSError:
        # No hard links on this filesystem: check-then-rename, racy only here.
        if path.exists():
            raise FileExistsError(path.name) from None
        os.replace(tmp, path)
        return
    os.unlink(tmp)


def _fsync_dir(directory: Path) -> None:
    try:
        dfd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return  # platforms without directory fds (Windows)
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)
