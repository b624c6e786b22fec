"""Property-based API fuzzing driven by the OpenAPI documents (schemathesis): real
``gateway run`` and ``gateway proxy`` processes in front of the demo upstream process,
every documented operation called with generated requests, valid (positive) and
invalid (negative) ones, with a user key and with a proxy key.

Every answer must be no 5xx and conform to the document: a documented status, a
documented content type, a body that validates against the documented schema (the
stable error body for every error), documented headers. Failures are bugs (of the
server or of the document), never flakes: the examples are derived from a fixed seed.

CI runs :data:`EXAMPLES` examples per operation, mode and key (a few minutes on 2
cores); ``-m slow`` runs the soak (:data:`SOAK_EXAMPLES`, random seeds).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from gateway.api.openapi import api_document, proxy_document
from tests.procs import Proc, clean_env, free_port

USER_KEY = "fuzz-user-key-0123456789ab"
PROXY_KEY = "fuzz-proxy-key-0123456789a"
CLIENT_KEY = "fuzz-owui-client-key-01234"
EXAMPLES = int(os.environ.get("GATEWAY_FUZZ_EXAMPLES", "8"))
SOAK_EXAMPLES = 200
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]
SCHEMAS = {
    "api": schemathesis.openapi.from_dict(api_document()),
    "proxy": schemathesis.openapi.from_dict(proxy_document()),
}


def _operations(server: str) -> list[str]:
    return [op.ok().label for op in SCHEMAS[server].get_all_operations()]


@dataclass
class Servers:
    api: str
    proxy: str


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """The demo upstream, ``gateway run`` and ``gateway proxy``, each its own process."""
    tmp = tmp_path_factory.mktemp("fuzz")
    root = tmp / "artifacts"  # a folder per principal; the demo writes alice's
    (root / "alice").mkdir(parents=True)
    ports = {name: free_port() for name in ("upstream", "api", "proxy")}
    config = tmp / "gateway.toml"
    config.write_text(
        f'state_dir = "{tmp / "state"}"\n'
        f'[server]\nbind = "127.0.0.1:{ports["api"]}"\n'
        f'public_base_url = "http://127.0.0.1:{ports["api"]}"\n'
        f'[upstream]\nbase_url = "http://127.0.0.1:{ports["upstream"]}/v1"\n'
        f'[artifacts]\nroots = ["{root}/{{principal}}"]\n'
        f'[[auth.keys]]\nkey = "{USER_KEY}"\nprincipal = "alice"\n'
        f'[[auth.keys]]\nkey = "{PROXY_KEY}"\nprincipal = "fuzz-proxy"\nrole = "proxy"\n'
        f'[proxy]\nbind = "127.0.0.1:{ports["proxy"]}"\n'
        f'gateway_url = "http://127.0.0.1:{ports["api"]}"\n'
        f'gateway_key = "{PROXY_KEY}"\nclient_keys = ["{CLIENT_KEY}"]\n',
        encoding="utf-8",
    )
    env = clean_env(GATEWAY_CONFIG=str(config))
    upstream_args = ["--port", str(ports["upstream"]), "--root", str(root / "alice")]
    upstream_args += ["--chunk-delay", "0"]
    procs = [
        Proc(["-m", "gateway.cli.demo_upstream", *upstream_args], tmp / "upstream.log", env),
        Proc(["-m", "gateway.cli", "run"], tmp / "gateway.log", env),
        Proc(["-m", "gateway.cli", "proxy"], tmp / "proxy.log", env),
    ]
    try:
        for proc in procs[1:]:
            proc.wait_for(r"listening on http://", timeout=60)
        yield Servers(f"http://127.0.0.1:{ports['api']}", f"http://127.0.0.1:{ports['proxy']}")
    finally:
        for proc in procs:
            proc.stop()
        for proc in procs:  # a traceback in a server's log is a bug the answers may hide
            text = proc.text()
            assert "Traceback" not in text, f"{proc.log.name}:\n{text[-4000:]}"


def _fuzz(
    server: str, label: str, base_url: str, key: str, mode: GenerationMode, examples: int
) -> None:
    operation = SCHEMAS[server].find_operation_by_label(label)
    assert operation is not None, label
    session = requests.Session()
    seen: list[int] = []

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=examples <= EXAMPLES,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(mode))
    def call(case: Any) -> None:
        headers = {"Authorization": f"Bearer {key}"}
        if case.operation.method.upper() in ("POST",) and case.body is schemathesis.core.NOT_SET:
            headers["Content-Type"] = "application/json"
        response = case.call(base_url=base_url, session=session, headers=headers, timeout=30)
        seen.append(response.status_code)
        assert response.status_code < 500, _describe(case, response)
        case.validate_response(response, checks=CHECKS)

    try:
        call()
    except Unsatisfiable:
        if mode is GenerationMode.NEGATIVE:  # nothing of it can be invalid (a bare GET)
            pytest.skip("no invalid request exists for this operation")
        raise
    assert seen, f"{label}: no request was made"


def _describe(case: Any, response: requests.Response) -> str:
    body = case.body if case.body is not schemathesis.core.NOT_SET else None
    return (
        f"{case.operation.label} -> {response.status_code} {response.text[:500]!r}\n"
        f"request: path={case.path_parameters} query={case.query} headers={case.headers} "
        f"body={json.dumps(body, default=repr)[:500]}"
    )


KEYS = {"user": USER_KEY, "proxy": PROXY_KEY}


def _cases(server: str) -> list[tuple[str, GenerationMode]]:
    """Every operation positive; negative too where something can be invalid (a body,
    a query or header parameter: a bare GET has no invalid form)."""
    out = []
    for op in SCHEMAS[server].get_all_operations():
        operation = op.ok()
        out.append((operation.label, GenerationMode.POSITIVE))
        definition = operation.definition.raw
        params = [p for p in definition.get("parameters", ()) if p.get("in") != "path"]
        if "requestBody" in definition or params:
            out.append((operation.label, GenerationMode.NEGATIVE))
    return out


@pytest.mark.parametrize("key", sorted(KEYS))
@pytest.mark.parametrize(("label", "mode"), _cases("api"))
def test_the_api_server_answers_as_documented(
    servers: Servers, label: str, key: str, mode: GenerationMode
) -> None:
    _fuzz("api", label, servers.api, KEYS[key], mode, EXAMPLES)


@pytest.mark.parametrize(("label", "mode"), _cases("proxy"))
def test_the_proxy_answers_as_documented(
    servers: Servers, label: str, mode: GenerationMode
) -> None:
    _fuzz("proxy", label, servers.proxy, CLIENT_KEY, mode, EXAMPLES)


@pytest.mark.slow
def test_soak(servers: Servers) -> None:
    """The long run: random seeds, :data:`SOAK_EXAMPLES` per operation and mode."""
    for server, base, key in (
        ("api", servers.api, USER_KEY),
        ("api", servers.api, PROXY_KEY),
        ("proxy", servers.proxy, CLIENT_KEY),
    ):
        for label, mode in _cases(server):
            with contextlib.suppress(pytest.skip.Exception):
                _fuzz(server, label, base, key, mode, SOAK_EXAMPLES)


def test_every_operation_is_fuzzed() -> None:
    """The parametrization covers both documents whole (HEAD and OPTIONS too)."""
    for server, doc in (("api", api_document()), ("proxy", proxy_document())):
        count = sum(1 for item in doc["paths"].values() for m in item if m != "parameters")
        assert len(_operations(server)) == count


def _known_good(server: str, base_url: str, key: str, label: str, **parts: Any) -> Any:
    """One hand-made valid request (generated ones rarely name the demo's model or a
    run that exists): its answer must conform too. Through the proxy it names an Open
    WebUI user (a chat without one is refused unless proxy.allow_anonymous)."""
    operation = SCHEMAS[server].find_operation_by_label(label)
    assert operation is not None
    case = operation.Case(**parts)
    headers = {"Authorization": f"Bearer {key}"}
    if server == "proxy":
        headers["X-OpenWebUI-User-Id"] = "fuzz-user"
    response = case.call(base_url=base_url, headers=headers, timeout=30)
    assert response.status_code < 400, _describe(case, response)
    case.validate_response(response, checks=CHECKS)
    return response


def test_successful_answers_conform(servers: Servers) -> None:
    chat = {"model": "demo", "messages": [{"role": "user", "content": "make me a report"}]}
    api = servers.api
    for stream in (False, True):
        _known_good(
            "api", api, USER_KEY, "POST /v1/chat/completions", body={**chat, "stream": stream}
        )
        _known_good(
            "api",
            api,
            USER_KEY,
            "POST /v1/responses",
            body={"model": "demo", "input": "hi", "stream": stream},
        )
        _known_good("proxy", servers.proxy, CLIENT_KEY, "POST /v1/chat/completions",
                    body={**chat, "stream": stream, "download_link_mode": "public"})  # fmt: skip
    started = _known_good(
        "api", api, USER_KEY, "POST /v1/runs", body={"model": "demo", "input": "hi"}
    )
    run_id = {"run_id": started.json()["run_id"]}
    _known_good("api", api, USER_KEY, "GET /v1/runs/{run_id}/events", path_parameters=run_id)
    _known_good("api", api, USER_KEY, "GET /v1/runs/{run_id}", path_parameters=run_id)
    listed = _known_good("api", api, USER_KEY, "GET /v1/artifacts").json()["data"]
    assert listed, "the demo's answers minted links"
    one = {"artifact_id": listed[0]["id"]}
    _known_good("api", api, USER_KEY, "GET /v1/artifacts/{artifact_id}", path_parameters=one)
    _known_good("api", api, USER_KEY, "GET /v1/artifacts/{artifact_id}/share", path_parameters=one)
    _known_good("api", api, USER_KEY, "POST /v1/artifacts/{artifact_id}/share", path_parameters=one)
    _known_good("api", api, USER_KEY, "DELETE /v1/artifacts/{artifact_id}", path_parameters=one)
    nonce = {"nonce": "0123456789abcdef"}
    _known_good("api", api, USER_KEY, "POST /v1/selftest", body=nonce)
    for server, base in (("api", api), ("proxy", servers.proxy)):
        for label in ("GET /health", "GET /health/ready", "GET /metrics", "GET /openapi.json"):
            _known_good(server, base, USER_KEY, label)
