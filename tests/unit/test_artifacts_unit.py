"""ArtifactService, ResponseLinks, FileBody, parse_range and content_disposition without HTTP.

Real files under ``tmp_path``, a real SQLite store and a real :class:`Signer`.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.errors import NotFound, StoreError
from gateway.links.artifacts import (
    READ_CHUNK,
    ArtifactService,
    DeniedNames,
    FileBody,
    Gone,
    content_disposition,
    download_content_type,
    etag,
    parse_range,
)
from gateway.links.signing import Signer
from gateway.store import ArtifactRecord, SQLiteStore
from tests.conftest import make_config

T0 = 1_780_000_000


class Clock:
    def __init__(self) -> None:
        self.now: float = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def service(
    tmp_path: Path, clock: Clock, *, allow_hard_links: bool | None = None, **artifacts: Any
) -> ArtifactService:
    config = make_config(
        tmp_path, "http://upstream.invalid/v1", artifacts={"public_ttl_seconds": 60, **artifacts}
    )
    store = SQLiteStore(tmp_path / "state" / "gateway.sqlite3")
    return ArtifactService(
        config, store, Signer.generate(), clock=clock, allow_hard_links=allow_hard_links
    )


@pytest.fixture
def svc(tmp_path: Path, clock: Clock) -> ArtifactService:
    return service(tmp_path, clock)


@pytest.fixture
def root(tmp_path: Path, svc: ArtifactService) -> Path:
    return tmp_path / "artifacts"


# --------------------------------------------------------------------------- parse_range


@pytest.mark.parametrize(
    ("header", "size", "expected"),
    [
        (None, 100, None),
        ("", 100, None),
        ("bytes=0-9", 100, (0, 9)),
        ("bytes=-5", 100, (95, 99)),
        ("bytes=10-", 100, (10, 99)),
        ("bytes=90-1000", 100, (90, 99)),
        ("bytes=-1000", 100, (0, 99)),
        ("bytes=99-99", 100, (99, 99)),
        ("BYTES = 0-0", 100, (0, 0)),
        ("bytes=99999-", 100, False),
        ("bytes=100-", 100, False),
        ("bytes=-0", 100, False),
        # RFC 9110 §14.2: an invalid range is ignored (200, the whole file) ...
        ("bytes=5-3", 100, None),
        ("bytes=5-2", 100, None),
        ("bytes=5-2", 3, None),
        # ... and so is anything but ASCII digits, which int() would take
        ("bytes=\u0661\u0662-", 100, None),
        ("bytes=-\u0661", 100, None),
        ("bytes=0-\u0669", 100, None),
        ("bytes=+5-", 100, None),
        ("bytes=-+5", 100, None),
        ("bytes= 5-9 ", 100, (5, 9)),  # the whole spec is stripped; inside it no space
        ("bytes=5 -9", 100, None),
        ("bytes=5- 9", 100, None),
        ("bytes=5_0-", 100, None),
        ("bytes=0-5_0", 100, None),
        ("bytes=--5", 100, None),
        ("bytes=\uff15-", 100, None),  # fullwidth 5
        ("bytes=-", 100, None),
        ("bytes=0-", 0, False),
        ("bytes=-5", 0, False),
        ("bytes=0-1,4-5", 100, None),  # multiple ranges: whole file
        ("items=0-1", 100, None),
        ("bytes=abc", 100, None),
        ("bytes=a-b", 100, None),
        ("bytes", 100, None),
    ],
)
def test_parse_range(header: str | None, size: int, expected: object) -> None:
    assert parse_range(header, size) == expected


# --------------------------------------------------------------------------- disposition


@pytest.mark.parametrize(
    ("name", "fallback", "encoded"),
    [
        ("report.pdf", "report.pdf", "report.pdf"),
        ("r\u00e9sum\u00e9 2026.txt", "r_sum_ 2026.txt", "r%C3%A9sum%C3%A9%202026.txt"),
        ('a "b" \\c.txt', "a _b_ _c.txt", "a%20%22b%22%20%5Cc.txt"),
        ("x\r\nSet-Cookie: y.txt", "x__Set-Cookie: y.txt", "x%0D%0ASet-Cookie%3A%20y.txt"),
        ("\u4e2d\u6587", "__", "%E4%B8%AD%E6%96%87"),
        ("", "download", ""),
        ("a;b=c.txt", "a;b=c.txt", "a%3Bb%3Dc.txt"),
    ],
)
def test_content_disposition(name: str, fallback: str, encoded: str) -> None:
    cd = content_disposition(name)
    assert cd == f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{encoded}"
    assert cd.isascii() and "\r" not in cd and "\n" not in cd


# --------------------------------------------------------------------------- inspect


def test_inspect_regular_file_records_identity(svc: ArtifactService, root: Path) -> None:
    f = root / "a b" / "report.pdf"
    f.parent.mkdir()
    f.write_bytes(b"%PDF-1.4 hi")
    facts = svc.inspect(str(f), "alice")
    assert facts is not None
    st = f.stat()
    assert (facts.path, facts.filename, facts.size) == (str(f), "report.pdf", 11)
    assert (facts.device, facts.inode, facts.mtime_ns) == (st.st_dev, st.st_ino, st.st_mtime_ns)
    assert facts.content_type == "application/pdf"
    # a symlink inside the root to a file inside the root: the resolved file's identity
    (root / "alias.pdf").symlink_to(f)
    alias = svc.inspect(str(root / "alias.pdf"), "alice")
    assert alias is not None and alias.path == str(f) and alias.filename == "report.pdf"
    assert svc.inspect(str(root / "a b" / ".." / "a b" / "report.pdf"), "alice") == facts


@pytest.mark.parametrize(
    "name",
    [
        ".env",
        ".env.local",
        ".ENV.production",
        "prod.env",
        ".pgpass",
        ".git-credentials",
        "id_ecdsa",
        "id_dsa",
        ".kube/config",
        ".ssh/id_rsa",
        ".config/gcloud/creds.json",
    ],
)
def test_the_default_deny_list_keeps_secrets_unlinked(
    tmp_path: Path, clock: Clock, name: str
) -> None:
    svc = service(tmp_path, clock)  # the default artifacts.denied
    f = tmp_path / "artifacts" / "project" / name
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text("SECRET=1\n")
    assert svc.inspect(str(f), "alice") is None
    ok = tmp_path / "artifacts" / "project" / "environment.txt"  # only looks alike: fine
    ok.write_text("notes\n")
    assert svc.inspect(str(ok), "alice") is not None


def test_inspect_refusals(tmp_path: Path, clock: Clock) -> None:
    svc = service(tmp_path, clock, max_bytes=10, denied=[".ssh", "*.pem", ".config/gcloud"])
    root, outside = tmp_path / "artifacts", tmp_path / "outside"
    outside.mkdir()
    (outside / "o.txt").write_text("o")
    (root / "ok.txt").write_text("ok")
    (root / "big.bin").write_bytes(b"x" * 11)
    (root / "exact.bin").write_bytes(b"x" * 10)
    (root / ".SSH").mkdir()
    (root / ".SSH" / "config").write_text("c")
    (root / "Keys.PEM").write_text("k")
    (root / ".config" / "gcloud").mkdir(parents=True)
    (root / ".config" / "gcloud" / "creds.json").write_text("{}")
    (root / ".config" / "other.json").write_text("{}")
    (root / "to-denied").symlink_to(root / "Keys.PEM")
    (root / "to-outside").symlink_to(outside / "o.txt")
    (root / "loop").symlink_to(root / "loop")
    (root / "dir").mkdir()
    os.mkfifo(root / "fifo")

    assert svc.inspect(str(root / "ok.txt"), "alice") is not None
    assert svc.inspect(str(root / "exact.bin"), "alice") is not None  # max_bytes is inclusive
    assert (
        svc.inspect(str(root / ".config" / "other.json"), "alice") is not None
    )  # only the run is denied
    for refused in (
        f"{root}/big.bin",
        f"{root}/.SSH/config",  # case-insensitive
        f"{root}/Keys.PEM",
        f"{root}/.config/gcloud/creds.json",
        f"{root}/to-denied",
        f"{root}/to-outside",
        f"{root}/loop",
        f"{root}/dir",
        f"{root}/fifo",
        f"{root}/missing",
        f"{root}/../outside/o.txt",
        f"{root}/dir/../../outside/o.txt",
        f"{outside}/o.txt",
        str(root),
        "relative/ok.txt",
        "C:\\Users\\bob\\ok.txt",
        "c:/Users/bob/ok.txt",
        "\\\\server\\share\\ok.txt",
        "//server/share/ok.txt",
        f"{root}/ok\x00.txt",  # NUL: realpath raises ValueError
        f"{root}/ok\ud800.txt",  # lone surrogate (from a JSON "\\ud800"): UnicodeEncodeError
    ):
        assert svc.inspect(refused, "alice") is None, refused


def test_mounts_and_home(tmp_path: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "artifacts"
    (root / "out").mkdir(parents=True)
    (root / "out" / "a.txt").write_text("a")
    svc = service(
        tmp_path,
        clock,
        mounts=[
            {"agent_prefix": "/workspace", "host_dir": str(root)},
            {"agent_prefix": "D:\\agent\\", "host_dir": str(root / "out")},
        ],
    )
    assert svc.to_host_path("/workspace/out/a.txt") == str(root / "out" / "a.txt")
    assert svc.to_host_path("/workspace") == str(root)
    assert svc.to_host_path("/workspaces/x") == "/workspaces/x"  # not the prefix
    assert svc.to_host_path("D:\\agent\\a.txt") == str(root / "out" / "a.txt")
    assert svc.to_host_path("D:/agent/a.txt") == str(root / "out" / "a.txt")
    assert svc.to_host_path("E:\\agent\\a.txt") is None
    assert svc.inspect("/workspace/out/a.txt", "alice") is not None
    assert svc.inspect("D:\\agent\\a.txt", "alice") is not None
    assert svc.inspect("/workspace/../outside.txt", "alice") is None
    monkeypatch.setenv("HOME", str(tmp_path))
    assert svc.to_host_path("~/artifacts/out/a.txt") == str(root / "out" / "a.txt")
    assert svc.inspect("~/artifacts/out/a.txt", "alice") is not None


# --------------------------------------------------------------------------- links


def test_mint_url_describe(svc: ArtifactService, root: Path, clock: Clock) -> None:
    (root / "r.csv").write_text("a,b\n")
    facts = svc.inspect(str(root / "r.csv"), "alice")
    assert facts is not None
    priv = svc.mint(facts, "alice", "private")
    pub = svc.mint(facts, "alice", "public")
    assert priv.id != pub.id and len(priv.id) >= 22
    assert priv.expires is None and pub.expires == T0 + 60
    assert svc.url(priv) == f"http://127.0.0.1:8642/v1/artifacts/{priv.id}"
    base, _, query = svc.url(pub).partition("?")
    assert base.endswith("/" + pub.id)
    exp, sig = (kv.split("=", 1)[1] for kv in query.split("&"))
    assert exp == str(T0 + 60) and svc.signer.verify_link(pub.id, T0 + 60, sig)
    assert svc.describe(pub) == {
        "id": pub.id,
        "filename": "r.csv",
        "url": svc.url(pub),
        "link_mode": "public",
        "bytes": 4,
    }
    assert svc.store.get_artifact(pub.id) == pub
    assert str(root) not in etag(pub)


async def test_authorize_public(svc: ArtifactService, root: Path, clock: Clock) -> None:
    (root / "r.csv").write_text("a,b\n")
    facts = svc.inspect(str(root / "r.csv"), "alice")
    assert facts is not None
    pub = svc.mint(facts, "alice", "public")
    priv = svc.mint(facts, "alice", "private")
    exp = str(T0 + 60)
    sig = svc.signer.sign_link(pub.id, T0 + 60)
    assert (await svc.authorize_public(pub.id, exp, sig)).id == pub.id

    for bad_exp in ("0" + exp, "\u00b2", "\u0661" * 10, " " + exp, "+" + exp, "", "9" * 13):
        with pytest.raises(NotFound):
            await svc.authorize_public(pub.id, bad_exp, sig)
    # a signature for the record's id but a later exp than minted: still the record's expiry
    later = T0 + 10_000
    with pytest.raises(NotFound):
        await svc.authorize_public(pub.id, str(later), sig)
    # a private record never answers to a signature, even a valid one
    with pytest.raises(NotFound):
        await svc.authorize_public(priv.id, exp, svc.signer.sign_link(priv.id, T0 + 60))
    with pytest.raises(NotFound):
        await svc.authorize_public("x" * 32, exp, svc.signer.sign_link("x" * 32, T0 + 60))

    clock.now = T0 + 61
    with pytest.raises(Gone) as gone:
        await svc.authorize_public(pub.id, exp, sig)
    assert gone.value.code == "artifact_expired" and gone.value.status == 410
    with pytest.raises(NotFound):  # tampered and expired: tampering wins
        await svc.authorize_public(pub.id, exp, sig[:-1] + ("A" if sig[-1] != "A" else "B"))
    clock.now = T0
    assert svc.store.revoke_artifact(pub.id, "alice")
    with pytest.raises(Gone) as gone:
        await svc.authorize_public(pub.id, exp, sig)
    assert gone.value.code == "artifact_revoked"


async def test_authorize_owner(svc: ArtifactService, root: Path) -> None:
    (root / "r.csv").write_text("a,b\n")
    facts = svc.inspect(str(root / "r.csv"), "alice")
    assert facts is not None
    rec = svc.mint(facts, "alice", "private")
    assert (await svc.authorize_owner(rec.id, "alice")).id == rec.id
    for owner, art_id in (
        ("bob", rec.id),
        ("alice", "y" * 32),
        ("alice", "short"),
        ("alice", "a/b" * 8),
    ):
        with pytest.raises(NotFound):
            await svc.authorize_owner(art_id, owner)
    svc.store.revoke_artifact(rec.id, "alice")
    with pytest.raises(Gone):
        await svc.authorize_owner(rec.id, "alice")
    with pytest.raises(NotFound):
        await svc.authorize_owner(rec.id, "bob")


async def test_open_verified_and_file_body(svc: ArtifactService, root: Path) -> None:
    data = os.urandom(READ_CHUNK * 2 + 123)
    f = root / "big.bin"
    f.write_bytes(data)
    facts = svc.inspect(str(f), "alice")
    assert facts is not None
    rec = svc.mint(facts, "alice", "private")

    for start, length in (
        (0, len(data)),
        (5, 10),
        (READ_CHUNK - 1, READ_CHUNK + 2),
        (len(data) - 1, 1),
    ):
        fd = await svc.open_verified(rec)
        body = FileBody(fd, start, length)
        async with body as it:
            got = b"".join([c async for c in it])
        assert got == data[start : start + length]
        with pytest.raises(OSError):
            os.fstat(fd)  # closed by __aexit__
        body.close()  # idempotent

    f.write_bytes(data[:-1])  # other size
    with pytest.raises(Gone) as gone:
        await svc.open_verified(rec)
    assert gone.value.code == "artifact_changed"
    assert str(root) not in gone.value.message


async def test_response_links(svc: ArtifactService, root: Path, tmp_path: Path) -> None:
    (root / "a.txt").write_text("a")
    (root / "b.txt").write_text("bb")
    links = svc.for_response("alice", "public")
    assert links.download_link_mode == "public"
    u1 = await links.resolve(f"{root}/a.txt")
    assert u1 is not None and "?exp=" in u1
    assert await links.resolve(f"{root}/a.txt") == u1
    # realpath takes ".." lexically once the part before it exists (even a file): a.txt
    assert await links.resolve(f"{root}/./b.txt/../a.txt") == u1
    assert await links.resolve(f"{root}/x/../a.txt") is None  # x does not exist
    (root / "x").mkdir()
    # "not there" is not final within an answer: now x exists, and it is the same file
    assert await links.resolve(f"{root}/x/../a.txt") == u1
    assert await links.resolve(f"{root}/x/./../a.txt") == u1
    u2 = await links.resolve(f"{root}/b.txt")
    assert u2 is not None and u2 != u1
    assert await links.resolve(f"{tmp_path}/outside/none.txt") is None
    await links.seal()
    manifest = links.manifest()
    assert manifest["download_link_mode"] == "public"
    assert [(a["filename"], a["url"], a["bytes"]) for a in manifest["artifacts"]] == [
        ("a.txt", u1, 1),
        ("b.txt", u2, 2),
    ]
    assert len(svc.store.list_artifacts("alice")) == 2
    other = svc.for_response("bob", "private")
    u3 = await other.resolve(f"{root}/a.txt")
    assert u3 is not None and u3 != u1 and "?" not in u3
    assert [r.owner for r in svc.store.list_artifacts("bob")] == ["bob"]


async def _download(svc: ArtifactService, url: str, owner: str = "alice") -> bytes:
    rec = await svc.authorize_owner(url.rsplit("/", 1)[1].split("?")[0], owner)
    fd = await svc.open_verified(rec)
    try:
        return os.pread(fd, rec.size + 1, 0)
    finally:
        os.close(fd)


async def test_a_path_named_before_its_file_exists_gets_its_link_later(
    svc: ArtifactService, root: Path
) -> None:
    """The agent names the file before its tool writes it: that mention is the name,
    a later one the link; the manifest lists it once."""
    links = svc.for_response("alice", "private")
    path = f"{root}/report.md"
    assert await links.resolve(path) is None
    (root / "report.md").write_text("# report")
    url = await links.resolve(path)
    assert url is not None
    assert await links.resolve(path) == url
    await links.seal()
    assert [a["url"] for a in links.manifest()["artifacts"]] == [url]
    assert await _download(svc, url) == b"# report"


@pytest.mark.parametrize("how", ["in place", "atomically (temp + rename)"])
async def test_a_link_made_before_an_overwrite_serves_what_the_answer_left(
    svc: ArtifactService, root: Path, how: str
) -> None:
    """The file existed (an earlier answer wrote it): its link went out when the tool
    started, then the tool rewrote it. The same link serves the new bytes once the
    answer is sealed, and nothing after that."""
    f = root / "plan.txt"
    f.write_text("old plan")
    links = svc.for_response("alice", "private")
    url = await links.resolve(str(f))
    assert url is not None
    if how == "in place":
        f.write_text("the new, longer plan")
    else:
        tmp = root / ".tmp-plan"
        tmp.write_text("the new, longer plan")
        os.replace(tmp, f)
    assert await links.resolve(str(f)) == url  # re-checked: re-bound, same link
    assert await _download(svc, url) == b"the new, longer plan"
    f.write_text("third version")  # after the last mention, before the end
    await links.seal()
    assert await _download(svc, url) == b"third version"
    (entry,) = links.manifest()["artifacts"]
    assert entry["url"] == url and entry["bytes"] == len("third version")
    f.write_text("changed after the answer")  # sealed: no swap
    with pytest.raises(Gone):
        await _download(svc, url)


async def test_reported_files_join_the_manifest_when_servable_at_the_end(
    svc: ArtifactService, root: Path, tmp_path: Path
) -> None:
    """Paths the agent reports writing need no mention; only servable files in the
    owner's roots at the end are linked (a missing or outside one is not)."""
    links = svc.for_response("alice", "private")
    links.report([f"{root}/out.csv", f"{root}/never.txt", f"{tmp_path}/elsewhere.txt"])
    (root / "out.csv").write_text("a,b\n")
    (tmp_path / "elsewhere.txt").write_text("not in a root")
    await links.seal()
    (entry,) = links.manifest()["artifacts"]
    assert entry["filename"] == "out.csv"
    assert await _download(svc, entry["url"]) == b"a,b\n"
    assert [r.filename for r in svc.store.list_artifacts("alice")] == ["out.csv"]


async def test_a_link_whose_file_is_gone_at_the_end_is_dead(
    svc: ArtifactService, root: Path
) -> None:
    """Deleted (or moved away) before the answer ended: the link answers 410 and the
    manifest leaves it out, even if a file appears at the path afterwards."""
    f = root / "tmp.txt"
    f.write_text("scratch")
    links = svc.for_response("alice", "private")
    url = await links.resolve(str(f))
    assert url is not None
    f.unlink()
    await links.seal()
    assert links.manifest()["artifacts"] == []
    f.write_text("scratch")
    with pytest.raises(Gone) as gone:
        await _download(svc, url)
    assert gone.value.code == "artifact_changed"


async def test_sealing_twice_and_after_a_store_failure(
    svc: ArtifactService, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store that fails while sealing leaves the links as they were (the answer is
    complete); seal() runs once."""
    f = root / "a.txt"
    f.write_text("one")
    links = svc.for_response("alice", "private")
    url = await links.resolve(str(f))
    assert url is not None
    f.write_text("two!")

    def down(*args: Any) -> None:
        raise StoreError("the state store failed (OperationalError)")

    monkeypatch.setattr(svc.store, "save_artifacts", down)
    await links.seal()  # logged, not raised
    monkeypatch.undo()
    await links.seal()  # once: nothing happens
    with pytest.raises(Gone):
        await _download(svc, url)  # still bound to "one"


async def test_resolve_many_is_resolve_one_by_one(
    svc: ArtifactService, root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch gives what one-by-one resolution gives (same links, same manifest order)
    and stores its new records in one transaction."""
    for name in ("a.txt", "b.txt", "c.txt"):
        (root / name).write_text(name)
    paths = [f"{root}/a.txt", f"{tmp_path}/outside.txt", f"{root}/b.txt", f"{root}/a.txt"]
    one = svc.for_response("alice", "private")
    expected = [await one.resolve(p) for p in paths]
    batch = svc.for_response("alice", "private")
    calls: list[int] = []
    real_save = svc.store.save_artifacts

    def save_artifacts(new: Any, rebound: Any) -> None:
        calls.append(len(new) + len(rebound))
        real_save(new, rebound)

    monkeypatch.setattr(svc.store, "save_artifacts", save_artifacts)
    answers = await batch.resolve_many(paths)
    assert calls == [2]
    got = [answers[p] for p in paths]
    assert [await batch.resolve(p) for p in paths] == got  # unchanged files: same links
    assert calls == [2]  # and no write
    # ids are random per mint: compare which paths got links and which share one
    assert [u is None for u in got] == [u is None for u in expected] == [0, 1, 0, 0]
    assert got[0] == got[3] != got[2]
    names = [(a["filename"], a["url"]) for a in batch.manifest()["artifacts"]]
    assert names == [("a.txt", got[0]), ("b.txt", got[2])]
    stored = {r.id for r in svc.store.list_artifacts("alice")}
    assert {u.rsplit("/", 1)[1] for u in got if u} <= stored


async def test_resolve_many_stops_where_one_by_one_would_fail(
    svc: ArtifactService, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A path whose inspection fails stops the batch there (resolve() raises it in its
    place, nothing after it is minted); a failing store keeps none of the batch's new
    records, and resolve() then meets the failure at the first path that needs one."""
    for name in ("a.txt", "b.txt", "c.txt"):
        (root / name).write_text(name)
    abc = [f"{root}/a.txt", f"{root}/b.txt", f"{root}/c.txt"]
    real_inspect = svc.inspect

    def inspect(path: str, owner: str) -> Any:
        if path.endswith("b.txt"):
            raise PermissionError("no")
        return real_inspect(path, owner)

    monkeypatch.setattr(svc, "inspect", inspect)
    failing = svc.for_response("carol", "private")
    answers = await failing.resolve_many(abc)
    assert list(answers) == [abc[0]] and answers[abc[0]] is not None
    with pytest.raises(PermissionError):
        await failing.resolve(abc[1])
    assert [a["filename"] for a in failing.manifest()["artifacts"]] == ["a.txt"]
    assert [r.filename for r in svc.store.list_artifacts("carol")] == ["a.txt"]
    monkeypatch.setattr(svc, "inspect", real_inspect)

    real_save = svc.store.save_artifacts

    def save_artifacts(new: Any, rebound: Any) -> None:
        if len(new) + len(rebound) > 1 or any(r.filename == "b.txt" for r in new):
            raise StoreError("the state store failed (OperationalError)")
        real_save(new, rebound)

    monkeypatch.setattr(svc.store, "save_artifacts", save_artifacts)
    down = svc.for_response("dave", "private")
    assert await down.resolve_many(abc) == {}  # the first path needed the failed write
    assert svc.store.list_artifacts("dave") == []
    assert await down.resolve(abc[0]) is not None  # one by one now, as it comes
    with pytest.raises(StoreError):
        await down.resolve(abc[1])
    assert [a["filename"] for a in down.manifest()["artifacts"]] == ["a.txt"]


# --------------------------------------------------------------------------- identity


async def test_rewritten_in_place_with_size_and_mtime_restored_is_gone(
    svc: ArtifactService, root: Path
) -> None:
    """Same inode, size and mtime (``os.utime`` puts it back), other bytes: the ctime
    moved, and no unprivileged process can set it back."""
    f = root / "r.txt"
    f.write_bytes(b"original")
    facts = svc.inspect(str(f), "alice")
    assert facts is not None and facts.ctime_ns == f.stat().st_ctime_ns
    rec = svc.mint(facts, "alice", "private")
    assert svc.store.get_artifact(rec.id) == rec and rec.ctime_ns == facts.ctime_ns
    os.close(await svc.open_verified(rec))  # unchanged: served

    before = f.stat()
    fd = os.open(f, os.O_WRONLY)  # same inode, same length
    os.write(fd, b"REPLACED")
    os.close(fd)
    os.utime(f, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = f.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )
    assert after.st_ctime_ns != before.st_ctime_ns
    with pytest.raises(Gone) as gone:
        await svc.open_verified(rec)
    assert gone.value.code == "artifact_changed"


async def test_records_without_ctime_compare_the_old_way(svc: ArtifactService, root: Path) -> None:
    """A record minted before ctime was recorded (ctime_ns None) is still served while
    device, inode, size and mtime match, and refused when they do not."""
    f = root / "old.txt"
    f.write_bytes(b"old record")
    st = f.stat()
    rec = ArtifactRecord(
        id="o" * 32,
        owner="alice",
        link_mode="private",
        path=str(f),
        filename="old.txt",
        device=st.st_dev,
        inode=st.st_ino,
        size=st.st_size,
        mtime_ns=st.st_mtime_ns,
        created=T0,
        expires=None,
    )
    svc.store.create_artifact(rec)
    assert svc.store.get_artifact(rec.id) == rec and rec.ctime_ns is None
    os.chmod(f, 0o640)  # changes the ctime only
    os.close(await svc.open_verified(rec))
    f.write_bytes(b"new record")  # same size, new mtime
    with pytest.raises(Gone):
        await svc.open_verified(rec)


async def test_hard_links_are_refused_unless_allowed(tmp_path: Path, clock: Clock) -> None:
    svc = service(tmp_path, clock)
    root, outside = tmp_path / "artifacts", tmp_path / "outside"
    outside.mkdir()
    secret = outside / "id_rsa.txt"
    secret.write_text("secret outside every root")
    os.link(secret, root / "innocent.txt")  # the same file, named under the root
    assert svc.inspect(str(root / "innocent.txt"), "alice") is None

    # a file minted alone, hard-linked afterwards: refused at download
    (root / "later.txt").write_text("mine")
    facts = svc.inspect(str(root / "later.txt"), "alice")
    assert facts is not None
    rec = svc.mint(facts, "alice", "private")
    os.close(await svc.open_verified(rec))
    os.link(root / "later.txt", outside / "copy.txt")
    with pytest.raises(Gone) as gone:
        await svc.open_verified(rec)
    assert gone.value.code == "artifact_changed"

    allowing = service(tmp_path, clock, allow_hard_links=True)
    assert allowing.allow_hard_links
    allowed = allowing.inspect(str(root / "innocent.txt"), "alice")
    assert allowed is not None
    os.close(await allowing.open_verified(allowing.mint(allowed, "alice", "private")))
    os.unlink(outside / "copy.txt")  # one link again, but linking moved the ctime
    with pytest.raises(Gone):
        await svc.open_verified(rec)


def test_allow_hard_links_is_read_from_the_config(tmp_path: Path, clock: Clock) -> None:
    """``artifacts.allow_hard_links`` defaults to False and turns the check off when true."""
    store = SQLiteStore(tmp_path / "state" / "gateway.sqlite3")
    for flag in (True, False):
        config = make_config(
            tmp_path, "http://upstream.invalid/v1", artifacts={"allow_hard_links": flag}
        )
        assert ArtifactService(config, store, Signer.generate()).allow_hard_links is flag
    default = make_config(tmp_path, "http://upstream.invalid/v1")
    assert ArtifactService(default, store, Signer.generate()).allow_hard_links is False
    store.close()


@pytest.mark.parametrize(
    ("stored", "sent"),
    [
        ("text/plain", "text/plain; charset=utf-8"),
        ("text/csv", "text/csv; charset=utf-8"),
        ("text/markdown", "text/markdown; charset=utf-8"),
        ("TEXT/HTML", "TEXT/HTML; charset=utf-8"),
        ("text/plain; charset=iso-8859-1", "text/plain; charset=iso-8859-1"),
        ("application/pdf", "application/pdf"),
        ("application/json", "application/json"),
        ("image/svg+xml", "image/svg+xml"),
    ],
)
def test_download_content_type(stored: str, sent: str) -> None:
    rec = ArtifactRecord(
        id="x" * 32,
        owner="a",
        link_mode="private",
        path="/x",
        filename="x",
        device=1,
        inode=1,
        size=1,
        mtime_ns=1,
        created=0.0,
        expires=None,
        content_type=stored,
    )
    assert download_content_type(rec) == sent


# --------------------------------------------------------------------------- denied names


def _denied_reference(patterns: list[str], parts: tuple[str, ...]) -> bool:
    """The definition, spelled out: some pattern's components fnmatch a run of
    consecutive components, case-insensitively."""
    low = tuple(x.lower() for x in parts)
    for d in patterns:
        pattern = [c.lower() for c in d.replace("\\", "/").strip("/").split("/") if c]
        n = len(pattern)
        for i in range(len(low) - n + 1):
            if all(fnmatch.fnmatchcase(low[i + j], pattern[j]) for j in range(n)):
                return True
    return False


_COMPONENT = st.text(alphabet="aAbB.*?[]!-_/\\é", max_size=6)


@settings(max_examples=400, deadline=None)
@given(
    patterns=st.lists(_COMPONENT, max_size=4),
    parts=st.lists(st.text(alphabet="aAbB.-_[]!é*?", max_size=5), max_size=5),
)
def test_denied_names_is_the_definition(patterns: list[str], parts: list[str]) -> None:
    assert DeniedNames(patterns)(tuple(parts)) == _denied_reference(patterns, tuple(parts))


def test_denied_names_examples() -> None:
    denied = DeniedNames([".ssh", "*.PEM", ".config/gcloud", "id_*"])
    assert denied(("home", ".SSH", "x"))
    assert denied(("key.pem",))
    assert denied(("a", ".config", "gcloud", "creds.json"))
    assert not denied(("a", ".config", "x", "gcloud"))
    assert denied(("id_rsa",)) and not denied(("xid_rsa",))
    assert not denied(())
    assert DeniedNames(["/"])(())  # no component: every path, as before
    assert not DeniedNames([])(("anything",))


@pytest.mark.parametrize(
    "header", ["bytes=" + "9" * 5000 + "-", "bytes=0-" + "9" * 5000, "bytes=-" + "9" * 5000]
)
def test_a_range_with_a_huge_number_is_ignored(header: str) -> None:
    """int() refuses 4,300 digits and more (a 500 before, red team): no range then."""
    assert parse_range(header, 100) is None


def write_non_utf8(root: Path) -> Path:
    raw = os.fsencode(str(root)) + b"/\xff\xfename\xe9.txt"
    Path(os.fsdecode(raw)).write_bytes(b"x")
    (root / "clean-name.txt").symlink_to(os.fsdecode(raw))
    return root / "clean-name.txt"


async def test_a_file_whose_name_is_not_utf8_gets_no_link(svc: ArtifactService, root: Path) -> None:
    """Its name cannot go into a link record or a manifest (the answer was cut off)."""
    link = write_non_utf8(root)
    assert svc.inspect(str(link), "alice") is None
    assert await svc.for_response("alice", "private").resolve(str(link)) is None
