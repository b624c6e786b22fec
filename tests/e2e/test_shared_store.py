"""The shared store end to end: `gateway db` and `gateway keys` on real configs, real
links through a key rotation and retirement, two gateway instances on one PostgreSQL,
and readiness while the database is down."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from gateway.cli import main
from gateway.links.signing import ACTIVE_KEY_MAX_AGE
from gateway.store import EXPECTED_VERSION as V
from harness.pgcluster import PgCluster
from tests.conftest import ALICE_KEY, BOB_KEY, Gateway, Upstream, make_config, start_gateway


def write_config(tmp: Path, name: str = "gateway.toml") -> Path:
    path = tmp / name
    path.write_text(
        f'state_dir = "{tmp / "state"}"\n[artifacts]\nroots = ["{tmp / "artifacts"}"]\n'
    )
    (tmp / "artifacts").mkdir(exist_ok=True)
    return path


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(list(argv))
    out, errs = capsys.readouterr()
    return rc, out, errs


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The backend of the test: an empty URL (SQLite) or a migrated PostgreSQL database,
    handed to every store the test opens through $GATEWAY_DATABASE_URL."""
    url = "" if request.param == "sqlite" else str(request.getfixturevalue("pg_url"))
    if url:
        monkeypatch.setenv("GATEWAY_DATABASE_URL", url)
    else:
        monkeypatch.delenv("GATEWAY_DATABASE_URL", raising=False)
    return url


# -- gateway db ---------------------------------------------------------------------------


def test_db_check_and_upgrade_sqlite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GATEWAY_DATABASE_URL", raising=False)
    config = write_config(tmp_path)
    rc, out, _ = cli(capsys, "db", "upgrade", "--config", str(config))
    assert rc == 0 and "sqlite" in out and f"schema 0 -> {V}" in out
    rc, out, _ = cli(capsys, "db", "check", "--config", str(config))
    assert rc == 0, out
    assert "backend:      sqlite" in out and f"schema:       {V} (expected {V}) ok" in out
    assert "writable:     yes" in out and out.rstrip().endswith("result:       ok")


def test_db_check_and_upgrade_postgres(
    tmp_path: Path,
    pg_empty_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    password = urllib.parse.urlsplit(pg_empty_url).password
    assert password
    monkeypatch.setenv("GATEWAY_DATABASE_URL", pg_empty_url)
    config = write_config(tmp_path)
    rc, out, errs = cli(capsys, "run", "--config", str(config))
    assert rc == 2 and "gateway db upgrade" in errs and "schema version 0" in errs
    rc, out, _ = cli(capsys, "db", "check", "--config", str(config))
    assert rc == 1 and "OLD, run `gateway db upgrade`" in out and "connectivity: ok" in out
    rc, out, _ = cli(capsys, "db", "upgrade", "--config", str(config))
    assert rc == 0 and f"schema 0 -> {V}" in out
    rc, out, _ = cli(capsys, "db", "upgrade", "--config", str(config))
    assert rc == 0 and "is current" in out
    rc, out, _ = cli(capsys, "db", "check", "--config", str(config), "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["ok"] and doc["backend"] == "postgresql"
    assert (doc["schema_version"], doc["expected_version"], doc["writable"]) == (V, V, True)
    for text in (out, errs):
        assert password not in text


def test_db_check_unreachable_postgres(
    tmp_path: Path,
    pg_cluster: PgCluster,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = pg_cluster.url("gw").replace(f":{pg_cluster.port}/", ":1/")
    monkeypatch.setenv("GATEWAY_DATABASE_URL", url)
    config = write_config(tmp_path)
    rc, out, errs = cli(capsys, "db", "check", "--config", str(config))
    assert rc == 1
    assert "connectivity: FAILED" in out and "cannot reach the database" in out
    assert "127.0.0.1:1/gw" in out and pg_cluster.password not in out + errs


# -- gateway keys, with real links -------------------------------------------------------


async def get(gw: Gateway, url: str, **kw: Any) -> httpx.Response:
    """GET a minted link (its origin is the configured public_base_url) on ``gw``."""
    parts = urllib.parse.urlsplit(url)
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as client:
        return await client.get(parts.path + ("?" + parts.query if parts.query else ""), **kw)


async def mint(gw: Gateway, name: str, owner: str = "alice", mode: str = "public") -> str:
    st = gw.app.gateway
    path = Path(st.artifacts.scope(owner)[0]) / name

    def do() -> str:
        path.write_text(f"contents of {name}\n")
        facts = st.artifacts.inspect(str(path), owner)
        assert facts is not None
        return str(st.artifacts.url(st.artifacts.mint(facts, owner, mode)))

    return await trio.to_thread.run_sync(do)


def kid_of(url: str) -> str:
    return urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)["sig"][0].partition(".")[0]


async def test_keys_rotate_and_retire_with_real_links(
    nursery: trio.Nursery,
    tmp_path: Path,
    database: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config_file = write_config(tmp_path)
    gw = await start_gateway(
        nursery, make_config(tmp_path, "http://127.0.0.1:9/v1", database_url=database)
    )
    assert gw.app.gateway.store.backend == ("postgresql" if database else "sqlite")
    old_link = await mint(gw, "report.txt")
    old_kid = kid_of(old_link)
    resp = await get(gw, old_link)
    assert resp.status_code == 200 and resp.text == "contents of report.txt\n"
    assert resp.headers["content-type"] == "text/plain; charset=utf-8"

    rc, out, errs = await trio.to_thread.run_sync(
        cli, capsys, "keys", "rotate", "--config", str(config_file)
    )
    new_kid = out.strip()
    assert rc == 0 and len(new_kid) == 8 and new_kid != old_kid and old_kid in errs
    assert (await get(gw, old_link)).status_code == 200  # old links keep working

    rc, out, _ = await trio.to_thread.run_sync(
        cli, capsys, "keys", "list", "--config", str(config_file)
    )
    lines = out.strip().splitlines()
    assert rc == 0 and lines[0].split() == ["KID", "CREATED", "(UTC)", "ACTIVE"]
    assert [line.split()[0] for line in lines[1:]] == [old_kid, new_kid]
    assert lines[-1].endswith("yes") and not lines[1].endswith("yes")
    secrets_ = [k.secret for k in gw.app.gateway.store.list_signing_keys()]
    for secret in secrets_:
        from gateway.store.base import b64e

        assert b64e(secret) not in out and secret.hex() not in out

    # the running instance signs with the new key once its cached key is
    # ACTIVE_KEY_MAX_AGE old (that bound itself: test_signing.py); don't wait for it here
    gw.app.gateway.signer._loaded_at -= ACTIVE_KEY_MAX_AGE
    new_link = await mint(gw, "later.txt")
    assert kid_of(new_link) == new_kid
    assert (await get(gw, new_link)).status_code == 200

    rc, _, errs = await trio.to_thread.run_sync(
        cli, capsys, "keys", "retire", new_kid, "--config", str(config_file)
    )
    assert rc == 1 and "active" in errs
    rc, _, errs = await trio.to_thread.run_sync(
        cli, capsys, "keys", "retire", "0badf00d", "--config", str(config_file)
    )
    assert rc == 1 and "unknown" in errs
    rc, _, _ = await trio.to_thread.run_sync(
        cli, capsys, "keys", "retire", old_kid, "--config", str(config_file)
    )
    assert rc == 0
    gone = await get(gw, old_link)  # at once: no cache outlives a retirement
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "artifact_not_found"
    assert (await get(gw, new_link)).status_code == 200


# -- two instances on one PostgreSQL ------------------------------------------------------


async def test_two_instances_share_links_revocations_and_sessions(
    nursery: trio.Nursery,
    tmp_path: Path,
    upstream: Upstream,
    pg_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GATEWAY_DATABASE_URL", pg_url)
    artifacts = tmp_path / "artifacts"
    configs = []
    for name in ("a", "b"):
        cfg = make_config(
            tmp_path / name,
            upstream.url + "/v1",
            artifacts={"shared_roots": [str(artifacts)]},
            database_url=pg_url,
        )
        configs.append(cfg)
    artifacts.mkdir(exist_ok=True)
    a = await start_gateway(nursery, configs[0])
    b = await start_gateway(nursery, configs[1])
    assert a.app.gateway.signer.active_kid == b.app.gateway.signer.active_kid
    assert a.app.gateway.signer.principal_id("alice") == b.app.gateway.signer.principal_id("alice")

    public = await mint(a, "shared.txt")
    private = await mint(a, "mine.txt", mode="private")
    assert (await get(b, public)).status_code == 200  # minted on A, served by B
    alice = {"Authorization": f"Bearer {ALICE_KEY}"}
    bob = {"Authorization": f"Bearer {BOB_KEY}"}
    assert (await get(b, private, headers=alice)).status_code == 200
    assert (await get(b, private, headers=bob)).status_code == 404

    aid = urllib.parse.urlsplit(public).path.rsplit("/", 1)[1]
    async with b.client() as client:
        assert (await client.delete(f"/v1/artifacts/{aid}")).status_code == 200
    gone = await get(a, public)  # revoked on B, refused by A at once
    assert gone.status_code == 410 and gone.json()["error"]["code"] == "artifact_revoked"
    async with a.client() as client:
        listing = (await client.get("/v1/artifacts")).json()["data"]
    assert {x["id"]: x["revoked"] for x in listing}[aid] is True

    # a session written through A is continued through B
    async with a.client() as ca, b.client() as cb:
        body = {"model": "demo", "messages": [{"role": "user", "content": "hello"}]}
        r1 = await ca.post("/v1/chat/completions", json=body, headers={"X-Session-Id": "s1"})
        assert r1.status_code == 200, r1.text
        r2 = await cb.post("/v1/chat/completions", json=body, headers={"X-Session-Id": "s1"})
        assert r2.status_code == 200
        session = (await cb.get("/v1/sessions/s1")).json()
        assert session["messages"][0]["content"] == "hello" and len(session["messages"]) == 4
        async with b.client(BOB_KEY) as cbob:
            assert (await cbob.get("/v1/sessions/s1")).status_code == 404


async def test_readiness_shows_the_database_down(
    nursery: trio.Nursery,
    tmp_path: Path,
    upstream: Upstream,
    pg_cluster: PgCluster,
    pg_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GATEWAY_DATABASE_URL", pg_url)
    gw = await start_gateway(
        nursery, make_config(tmp_path, upstream.url + "/v1", database_url=pg_url)
    )
    async with gw.client() as client:
        ready = await client.get("/health/ready")
        assert ready.status_code == 200 and ready.json()["checks"]["store"] == "ok"
        await trio.to_thread.run_sync(pg_cluster.stop_server)
        try:
            down = await client.get("/health/ready")
            assert down.status_code == 503
            assert down.json()["checks"]["store"] == "not writable"
            listing = await client.get("/v1/artifacts")
            assert listing.status_code == 503
            assert listing.json()["error"]["code"] == "store_unavailable"
            assert (
                pg_cluster.password not in listing.text
                and "/" not in listing.json()["error"]["message"]
            )
        finally:
            await trio.to_thread.run_sync(pg_cluster.start_server)
        with trio.fail_after(10):
            while (await client.get("/health/ready")).status_code != 200:  # noqa: ASYNC110 - polls a server
                await trio.sleep(0.1)
