"""Tests for gateway.links.signing: key file hygiene, link signatures, rotation, principal ids."""

from __future__ import annotations

import json
import os
import stat
import string
from pathlib import Path

import pytest

from gateway.core.errors import ConfigError
from gateway.links.signing import ACTIVE_KEY_MAX_AGE, KEY_FILE_NAME, Signer, new_artifact_id
from tests.conftest import Backend

EXP = 1_900_000_000


def flips(text: str, replacements: str = "A0_") -> list[str]:
    """Every single-character change of ``text``: two different replacements per position."""
    out = []
    for i, ch in enumerate(text):
        for repl in [c for c in replacements if c != ch][:2]:
            out.append(text[:i] + repl + text[i + 1 :])
    return out


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- key file -----------------------------------------------------------------------------


def test_creates_key_file_0600_in_0700_dir(tmp_path: Path) -> None:
    state = tmp_path / "state"
    signer = Signer.load_or_create(state)
    path = state / KEY_FILE_NAME
    assert mode(path) == 0o600
    assert mode(state) == 0o700
    doc = json.loads(path.read_text())
    assert doc["active"] == signer.active_kid
    assert [k["kid"] for k in doc["keys"]] == [signer.active_kid]
    assert len(doc["keys"][0]["secret"]) >= 43  # >= 32 bytes in base64url
    assert not [p for p in state.iterdir() if p.name.endswith(".tmp")]


def test_reload_gives_the_same_keys(tmp_path: Path) -> None:
    first = Signer.load_or_create(tmp_path)
    sig = first.sign_link("abc", EXP)
    second = Signer.load_or_create(tmp_path)
    assert second.active_kid == first.active_kid
    assert second.verify_link("abc", EXP, sig)


@pytest.mark.parametrize("bits", [0o644, 0o640, 0o604, 0o660, 0o601])
def test_refuses_key_file_with_group_or_other_bits(tmp_path: Path, bits: int) -> None:
    Signer.load_or_create(tmp_path)
    (tmp_path / KEY_FILE_NAME).chmod(bits)
    with pytest.raises(ConfigError) as info:
        Signer.load_or_create(tmp_path)
    assert info.value.key == "state_dir"
    assert "chmod 600" in info.value.message


def test_refuses_symlinked_key_file(tmp_path: Path) -> None:
    real = tmp_path / "real"
    Signer.load_or_create(real)
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    (other / KEY_FILE_NAME).symlink_to(real / KEY_FILE_NAME)
    with pytest.raises(ConfigError):
        Signer.load_or_create(other)


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"not json",
        b"[]",
        b'{"format": "x"}',
        b'{"format": "artifact-gateway-signing-keys",'
        b' "version": 1, "active": "00000000", "principal_salt": "AA", "keys": []}',
    ],
)
def test_refuses_malformed_key_file(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / KEY_FILE_NAME
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, content)
    os.close(fd)
    with pytest.raises(ConfigError) as info:
        Signer.load_or_create(tmp_path)
    assert info.value.key == "state_dir"


def test_refuses_short_secret(tmp_path: Path) -> None:
    Signer.load_or_create(tmp_path)
    path = tmp_path / KEY_FILE_NAME
    doc = json.loads(path.read_text())
    doc["keys"][0]["secret"] = "AAAA"
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigError):
        Signer.load_or_create(tmp_path)


def test_repr_reveals_no_secret(tmp_path: Path) -> None:
    signer = Signer.load_or_create(tmp_path)
    doc = json.loads((tmp_path / KEY_FILE_NAME).read_text())
    text = repr(signer)
    assert doc["keys"][0]["secret"] not in text
    assert doc["principal_salt"] not in text


# -- link signatures ----------------------------------------------------------------------


def test_sign_verify_round_trip() -> None:
    signer = Signer.generate()
    aid = new_artifact_id()
    sig = signer.sign_link(aid, EXP)
    kid, _, mac = sig.partition(".")
    assert kid == signer.active_kid
    assert len(mac) == 43 and "=" not in mac
    assert signer.verify_link(aid, EXP, sig)
    assert signer.sign_link(aid, EXP) == sig  # deterministic


def test_signature_binds_id_and_exp() -> None:
    signer = Signer.generate()
    sig = signer.sign_link("abc", EXP)
    assert not signer.verify_link("abd", EXP, sig)
    assert not signer.verify_link("abc", EXP + 1, sig)
    # The separator keeps (id, exp) pairs from colliding.
    assert signer.sign_link("a1", 23) != signer.sign_link("a", 123)


def test_every_flipped_character_fails() -> None:
    signer = Signer.generate()
    aid = new_artifact_id()
    sig = signer.sign_link(aid, EXP)
    for bad in flips(sig):
        assert not signer.verify_link(aid, EXP, bad), bad
    for bad in flips(aid):
        assert not signer.verify_link(bad, EXP, sig), bad
    for bad in flips(str(EXP), "019"):
        assert not signer.verify_link(aid, int(bad), sig), bad


def test_padding_bits_of_the_last_character_matter() -> None:
    """A non-canonical base64 spelling of the right MAC is refused too."""
    signer = Signer.generate()
    sig = signer.sign_link("abc", EXP)
    b64 = string.ascii_uppercase + string.ascii_lowercase + string.digits + "-_"
    last = b64.index(sig[-1])
    for low in range(1, 4):  # 32 bytes -> the final char carries 2 unused bits
        twin = sig[:-1] + b64[last ^ low]
        assert not signer.verify_link("abc", EXP, twin)


@pytest.mark.parametrize(
    "sig",
    [
        "",
        ".",
        "nokid",
        "deadbeef.",
        "deadbeef." + "A" * 43,  # unknown kid
        "x" * 10_000,
        "é" * 52,
        "\x00" * 52,
        "a.b.c",
    ],
)
def test_garbage_signatures_are_false(sig: str) -> None:
    signer = Signer.generate()
    assert not signer.verify_link("abc", EXP, sig)


def test_wrong_lengths_and_types_are_false() -> None:
    signer = Signer.generate()
    sig = signer.sign_link("abc", EXP)
    assert not signer.verify_link("abc", EXP, sig[:-1])
    assert not signer.verify_link("abc", EXP, sig + "A")
    assert not signer.verify_link("abc", EXP, sig + "=")
    assert not signer.verify_link("", EXP, sig)
    assert not signer.verify_link("a\x00bc", EXP, sig)
    assert not signer.verify_link("\udcff", EXP, sig)
    assert not signer.verify_link("abc", True, sig)  # bool is an int subclass
    assert not signer.verify_link("abc", "1900000000", sig)  # type: ignore[arg-type]
    assert not signer.verify_link("abc", EXP, None)  # type: ignore[arg-type]
    assert not signer.verify_link("abc", 10**5000, sig)


def test_unknown_kid_and_other_signers_key() -> None:
    one, two = Signer.generate(), Signer.generate()
    sig = two.sign_link("abc", EXP)
    assert not one.verify_link("abc", EXP, sig)
    mac = sig.partition(".")[2]
    assert not one.verify_link("abc", EXP, f"{one.active_kid}.{mac}")


def test_sign_rejects_bad_arguments() -> None:
    signer = Signer.generate()
    with pytest.raises(TypeError):
        signer.sign_link("abc", 1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        signer.sign_link("", EXP)
    with pytest.raises(ValueError):
        signer.sign_link("a\x00b", EXP)


# -- rotation -----------------------------------------------------------------------------


def test_rotation_keeps_old_signatures_until_retired(tmp_path: Path) -> None:
    signer = Signer.load_or_create(tmp_path)
    old_kid = signer.active_kid
    old_sig = signer.sign_link("abc", EXP)

    new_kid = signer.rotate()
    assert new_kid != old_kid
    assert signer.active_kid == new_kid
    assert signer.kids == (old_kid, new_kid)
    assert signer.sign_link("abc", EXP).startswith(new_kid + ".")
    assert signer.verify_link("abc", EXP, old_sig)
    assert mode(tmp_path / KEY_FILE_NAME) == 0o600

    reloaded = Signer.load_or_create(tmp_path)  # rotation is persisted
    assert reloaded.active_kid == new_kid
    assert reloaded.verify_link("abc", EXP, old_sig)

    signer.retire(old_kid)
    assert not signer.verify_link("abc", EXP, old_sig)
    assert signer.verify_link("abc", EXP, signer.sign_link("abc", EXP))
    assert not Signer.load_or_create(tmp_path).verify_link("abc", EXP, old_sig)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_retire_refuses_active_and_unknown() -> None:
    signer = Signer.generate()
    with pytest.raises(ValueError):
        signer.retire(signer.active_kid)
    with pytest.raises(ValueError):
        signer.retire("00000000" if signer.active_kid != "00000000" else "11111111")


# -- principal ids ------------------------------------------------------------------------


def test_principal_id_stable_opaque_and_distinct(tmp_path: Path) -> None:
    signer = Signer.load_or_create(tmp_path)
    alice = signer.principal_id("alice")
    assert alice.startswith("p_") and len(alice) == 26
    assert all(c in "0123456789abcdef" for c in alice[2:])
    assert "alice" not in alice
    assert signer.principal_id("bob") != alice
    assert signer.principal_id("openwebui:alice") != alice

    old_kid = signer.active_kid
    signer.rotate()
    assert signer.principal_id("alice") == alice
    signer.retire(old_kid)
    assert signer.principal_id("alice") == alice
    assert Signer.load_or_create(tmp_path).principal_id("alice") == alice

    doc = (tmp_path / KEY_FILE_NAME).read_text()
    for secret in [k["secret"] for k in json.loads(doc)["keys"]]:
        assert secret not in alice


def test_principal_id_differs_between_installations(tmp_path: Path) -> None:
    one = Signer.load_or_create(tmp_path / "one")
    two = Signer.load_or_create(tmp_path / "two")
    assert one.principal_id("alice") != two.principal_id("alice")


# -- artifact ids -------------------------------------------------------------------------


def test_new_artifact_id() -> None:
    ids = {new_artifact_id() for _ in range(1000)}
    assert len(ids) == 1000
    for aid in ids:
        assert len(aid) == 32
        assert set(aid) <= set(string.ascii_letters + string.digits + "-_")


# -- keys in the state store (shared by instances) ----------------------------------------


class Ticks:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_store_signer_rotation_and_retirement_across_instances(backend: Backend) -> None:
    ticks = Ticks()
    a = Signer.from_store(backend.open(), clock=ticks)
    b = Signer.from_store(backend.open(), clock=ticks)
    assert a.store_backed and a.active_kid == b.active_kid
    assert a.principal_id("alice") == b.principal_id("alice")
    old_kid = a.active_kid
    old_sig = a.sign_link("abc", EXP)
    assert b.verify_link("abc", EXP, old_sig)

    new_kid = a.rotate()
    assert a.active_kid == new_kid != old_kid
    assert b.kids == (old_kid, new_kid)
    assert b.verify_link("abc", EXP, old_sig)  # old links keep working
    assert b.verify_link("abc", EXP, a.sign_link("abc", EXP))  # b knows the new key at once
    # b signs with its cached key until it is ACTIVE_KEY_MAX_AGE old, then with the new one
    assert b.sign_link("abc", EXP).startswith(old_kid + ".")
    b.refresh()
    assert b.active_kid == old_kid  # not stale yet: no read
    ticks.now += ACTIVE_KEY_MAX_AGE
    b.refresh()
    assert b.active_kid == new_kid and b.sign_link("abc", EXP).startswith(new_kid + ".")

    with pytest.raises(ValueError):
        b.retire(new_kid)  # the active key
    with pytest.raises(ValueError):
        b.retire("0badc0de")
    b.retire(old_kid)
    assert not a.verify_link("abc", EXP, old_sig)  # no cache outlives a retirement
    assert a.kids == (new_kid,)
    assert a.principal_id("alice") == b.principal_id("alice")  # the salt never rotates
    assert "secret" not in repr(a) and "store" in repr(a)


def test_two_instances_seeding_at_once_agree(backend: Backend) -> None:
    import threading

    signers: list[Signer] = []
    start = threading.Barrier(4)

    def work() -> None:
        start.wait()
        signers.append(Signer.from_store(backend.open()))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(signers) == 4
    assert len({s.active_kid for s in signers}) == 1
    assert len({s.principal_id("alice") for s in signers}) == 1


def test_key_file_is_imported_once(backend: Backend, tmp_path: Path) -> None:
    state = tmp_path / "keys"
    file_signer = Signer.load_or_create(state)
    old_kid = file_signer.active_kid
    file_signer.rotate()
    sig_old = Signer._load(state / KEY_FILE_NAME)._mac(
        old_kid, file_signer._keys[old_kid], "abc", EXP
    )
    sig_new = file_signer.sign_link("abc", EXP)

    signer = Signer.from_store(backend.open(), state_dir=state)
    assert signer.kids == file_signer.kids and signer.active_kid == file_signer.active_kid
    assert signer.verify_link("abc", EXP, sig_old) and signer.verify_link("abc", EXP, sig_new)
    assert signer.principal_id("alice") == file_signer.principal_id("alice")  # ids stay stable
    assert not (state / KEY_FILE_NAME).exists()
    imported = state / (KEY_FILE_NAME + ".imported")
    assert imported.exists() and mode(imported) == 0o600
    # the next instance (or restart) finds the keys in the store, and no file to warn about
    assert Signer.from_store(backend.open(), state_dir=state).active_kid == signer.active_kid


def test_a_differing_key_file_is_warned_about_and_ignored(
    backend: Backend, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = Signer.from_store(backend.open())
    other_dir = tmp_path / "other-instance"
    stray = Signer.load_or_create(other_dir)  # an instance that had its own key file
    with caplog.at_level("WARNING", logger="gateway.signing"):
        signer = Signer.from_store(backend.open(), state_dir=other_dir)
    assert signer.active_kid == first.active_kid != stray.active_kid
    assert any("differs" in r.getMessage() for r in caplog.records)
    assert (other_dir / KEY_FILE_NAME).exists()  # left for the operator to check
    secret = json.loads((other_dir / KEY_FILE_NAME).read_text())["keys"][0]["secret"]
    assert all(secret not in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level("WARNING", logger="gateway.signing"):
        Signer.from_store(backend.open(), state_dir=tmp_path / "no-file-here")
    assert caplog.records == []


def test_principal_ids_are_remembered_within_a_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """principal_id keeps its answers (an HMAC per request was ~10 k instructions), at
    most PRINCIPAL_IDS of them (a proxy may assert any number of owners); a remembered
    id is the one computed afresh."""
    import gateway.links.signing as signing

    monkeypatch.setattr(signing, "PRINCIPAL_IDS", 3)
    signer = Signer.load_or_create(tmp_path)
    fresh = Signer.load_or_create(tmp_path)
    names = [f"openwebui:user{i}" for i in range(10)]
    for name in names * 2:
        assert signer.principal_id(name) == fresh.principal_id(name)
        assert len(signer._ids) <= 3
    assert signer.principal_id("alice") == signer.principal_id("alice")
