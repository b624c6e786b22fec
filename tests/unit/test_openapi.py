"""The OpenAPI documents (gateway/api/openapi.py) are equal to the apps' routes: every rule of
each Quart app's ``url_map`` is a path of its document with exactly its methods, and the
document has nothing else; both are valid OpenAPI 3.1; every error answer is the
stable error body; each server serves its own at ``/openapi.json``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from openapi_spec_validator import validate

from gateway.api.app import create_app
from gateway.api.openapi import api_document, proxy_document
from gateway.proxy import create_proxy_app
from tests.conftest import proxy_config

METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


def app_routes(app: Any) -> set[tuple[str, str]]:
    """(path in OpenAPI's spelling, METHOD) for every rule of ``app.url_map``."""
    out = set()
    for rule in app.url_map.iter_rules():
        path = re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule.rule)
        out.update((path, method) for method in rule.methods)
    return out


def document_routes(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (path, method.upper())
        for path, item in doc["paths"].items()
        for method in item
        if method in METHODS
    }


@pytest.fixture
def apps(tmp_path: Path) -> dict[str, Any]:
    cfg = proxy_config(tmp_path, "http://127.0.0.1:9/v1", "http://127.0.0.1:8642")
    return {"api": create_app(cfg), "proxy": create_proxy_app(cfg)}


@pytest.mark.parametrize(("name", "document"), [("api", api_document), ("proxy", proxy_document)])
def test_the_document_lists_exactly_the_apps_routes(
    apps: dict[str, Any], name: str, document: Any
) -> None:
    routes, documented = app_routes(apps[name]), document_routes(document())
    assert routes - documented == set(), "routes missing from the document"
    assert documented - routes == set(), "documented operations the app does not have"


@pytest.mark.parametrize("document", [api_document, proxy_document])
def test_the_document_is_valid_openapi_3_1(document: Any) -> None:
    doc = document()
    assert doc["openapi"].startswith("3.1.")
    validate(doc)


@pytest.mark.parametrize("document", [api_document, proxy_document])
def test_every_error_answer_is_the_stable_error_body(document: Any) -> None:
    doc = document()
    error = doc["components"]["schemas"]["Error"]
    assert error["properties"]["error"]["required"] == ["message", "type", "code"]
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method not in METHODS or method == "head":
                continue
            for status, response in op["responses"].items():
                if path == "/health/ready" and status == "503":
                    continue  # not ready: the readiness body, naming the failing check
                if status.startswith(("4", "5")):
                    content = response["content"]
                    assert list(content) == ["application/json"], (path, method, status)
                    assert content["application/json"]["schema"] == {
                        "$ref": "#/components/schemas/Error"
                    }
                if status == "500":
                    raise AssertionError(f"{method} {path}: a 500 is a bug, not a contract")


async def test_each_server_serves_its_document(apps: dict[str, Any]) -> None:
    for name, document in (("api", api_document), ("proxy", proxy_document)):
        async with apps[name].test_app() as app:
            resp = await app.test_client().get("/openapi.json")
            assert resp.status_code == 200
            assert resp.content_type == "application/json"
            assert await resp.get_json() == document()


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"model": "m", "messages": []}),
        ("/v1/responses", {"input": "hi"}),
        ("/v1/responses", {"model": "m", "input": [["not", "an", "item"]]}),
        ("/v1/runs", {}),
        ("/v1/runs", {"input": "x", "session_id": "a b"}),
    ],
)
def test_requests_the_server_refuses_are_invalid_by_the_document(
    path: str, body: dict[str, object]
) -> None:
    """A schema-valid request the server answers 400 is a broken promise (a new
    operator's stock schemathesis run found empty messages, Responses without a model,
    a run with neither input nor messages)."""
    import jsonschema

    doc = api_document()
    schema = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    validator = jsonschema.Draft202012Validator({**schema, "components": doc["components"]})
    assert not validator.is_valid(body), (path, body)
    good = {
        "/v1/chat/completions": {"model": "m", "messages": [{"role": "user", "content": "x"}]},
        "/v1/responses": {"model": "m", "input": "x"},
        "/v1/runs": {"input": "x"},
    }[path]
    assert validator.is_valid(good)
