"""Tokens minted by Open WebUI 0.12.4's own code (``_mint_forward_user_jwt`` in its
cached venv, with a fresh lifetime) verify in the proxy, end to end: the run on the
gateway belongs to the token's user.

Needs the Open WebUI install (marker ``openwebui``; ``python3 dev.py test`` installs it
for this test): skipped without it, failed under ``CI=true``. The recorded tokens of
tests/data/openwebui_jwt.json cover the same ground without it (tests/unit).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio

from gateway.proxy.identity import verify_openwebui_jwt
from tests.e2e.owui import install
from tests.e2e.test_proxy import owui_body, owui_jwt_headers, owui_stream, start_chain

pytestmark = pytest.mark.openwebui
SECRET = "test-openwebui-jwt-secret-live-0123456789abcd"
USERS = [
    ("6f0c6a0e-3b1f-4e0a-9a59-2f2d3c4b5a61", "ada@example.org", "Ada Lovelace"),
    ("b1e2c3d4-0000-4111-8222-333344445555", "zoë@example.org", "Zoë Ünïcode 李"),
]
MINT = """
import json, sys, types
from open_webui.utils.headers import _mint_forward_user_jwt
users = json.loads(sys.argv[1])
print(json.dumps([_mint_forward_user_jwt(types.SimpleNamespace(id=u, email=e, name=n, role="user"))
                  for u, e, n in users]))
"""


@pytest.fixture(scope="module")
def minted(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    if not install.openwebui_installed():
        message = f"Open WebUI {install.OPENWEBUI_VERSION} is not installed (python3 tests/e2e/owui/install.py)"
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true and " + message, pytrace=False)
        pytest.skip(message)
    data = tmp_path_factory.mktemp("owui-data")
    if install.data_template().exists():  # skips the migrations (~6 s)
        shutil.copytree(install.data_template(), data, dirs_exist_ok=True)
    env = {
        **os.environ,
        "DATA_DIR": str(data),
        "FROM_INIT_PY": "true",
        "OFFLINE_MODE": "true",
        "HF_HUB_OFFLINE": "1",
        "WEBUI_SECRET_KEY": "only-for-this-test",
        "FORWARD_USER_INFO_HEADER_JWT_SECRET": SECRET,
    }
    proc = subprocess.run(
        [str(install.venv_python()), "-c", MINT, json.dumps(USERS)],
        capture_output=True,
        text=True,
        env=env,
        cwd=data,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    tokens: list[str] = json.loads(proc.stdout.strip().splitlines()[-1])
    return tokens


def test_open_webui_tokens_verify(minted: list[str]) -> None:
    for (user_id, email, name), token in zip(USERS, minted, strict=True):
        claims: dict[str, Any] = verify_openwebui_jwt(token, SECRET)
        assert (claims["sub"], claims["email"], claims["name"]) == (user_id, email, name)
        assert claims["exp"] - claims["iat"] == 300  # Open WebUI's default lifetime


async def test_a_proxy_run_belongs_to_the_tokens_user(
    minted: list[str], nursery: trio.Nursery, tmp_path: Path
) -> None:
    chain = await start_chain(nursery, tmp_path, proxy={"openwebui_jwt_secret": SECRET})
    async with chain.proxy.client(key=None) as client:
        got = await owui_stream(client, owui_body(mode="private"), owui_jwt_headers(minted[1]))
    assert got.status == 200, got.text
    (run,) = chain.runs()
    assert run.owner == "openwebui:" + USERS[1][0]
