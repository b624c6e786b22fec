"""OpenAPI 3.1 documents of the API server (``gateway run``) and the runs proxy
(``gateway proxy``), served by each at ``GET /openapi.json``.

Written by hand from the routes (docs/api.md is the prose): every operation with its
parameters, request body, and every status it answers with its body. Kept equal to the
code by ``tests/unit/test_openapi.py`` (each rule of the app's ``url_map`` with its
methods is a path and operation here, and nothing else is) and to the behaviour by the
property-based fuzzer ``tests/e2e/test_api_fuzz.py`` (schemathesis against real
``gateway run`` and ``gateway proxy`` processes: no 5xx but the documented ones, every
answer conforms).

Schemas describe what a client may rely on: required fields and their types; objects
stay open (a field added later does not break a client), and requests are described as
the server accepts them (unknown body keys are allowed and ignored or passed on).
Every error body is ``{"error": {"message", "type", "code"}}`` (docs/api.md).
``HEAD`` (for each ``GET``) and ``OPTIONS`` (the allowed methods, no body) are
answered by the framework for every route and are listed as such.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from gateway import __version__

__all__ = ["api_document", "proxy_document"]

JSON = "application/json"
SSE = "text/event-stream"
Obj = dict[str, Any]

ERROR: Obj = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "code": {"type": "string"},
            },
        }
    },
}

#: what each status means, for the error responses' descriptions
STATUS_TEXT = {
    400: "Bad request (`invalid_json`, `invalid_request`, `missing_*`, `invalid_*`, `bad_request`)",
    401: "Missing or invalid credentials (`missing_api_key`, `invalid_api_key`, ...)",
    403: "Not allowed (`forbidden_assertion`, `forbidden_owner`, `invalid_form_token`)",
    404: "Unknown, or another principal's (`not_found`, `*_not_found`)",
    405: "The route does not take this method (`method_not_allowed`)",
    408: "The request did not arrive in time (`request_timeout`)",
    410: "The link no longer serves (`artifact_expired`, `artifact_revoked`, `artifact_changed`)",
    413: "The body is too large (`request_too_large`)",
    416: "The range is outside the file (`range_not_satisfiable`)",
    429: "The upstream is rate limiting (`upstream_rate_limited`)",
    502: "The upstream (or, for the proxy, the gateway) failed (`upstream_*`, `gateway_*`)",
    503: "Unavailable for now (`gateway_overloaded`, `gateway_draining`, `store_unavailable`)",
    504: "The upstream did not answer in time (`upstream_timeout`)",
}
#: statuses any request can get before its route runs (connection limits, drain, body)
ALWAYS = (400, 408, 413, 503)
AUTH = (401,)


def _error(status: int | str) -> Obj:
    text = STATUS_TEXT.get(status, "An error") if isinstance(status, int) else "An error"
    return {
        "description": text,
        "content": {JSON: {"schema": {"$ref": "#/components/schemas/Error"}}},
    }


def _json(schema: Obj, description: str = "OK") -> Obj:
    return {"description": description, "content": {JSON: {"schema": schema}}}


def _ref(name: str) -> Obj:
    return {"$ref": f"#/components/schemas/{name}"}


def _op(
    summary: str,
    ok: dict[int, Obj],
    errors: tuple[int | str, ...] = (),
    *,
    auth: bool = True,
    body: Obj | None = None,
    parameters: list[Obj] | None = None,
) -> Obj:
    """One operation: its successful answers, and the error statuses it can give."""
    responses: Obj = {str(s): r for s, r in ok.items()}
    if any(p.get("name", "").startswith("X-Gateway-") for p in parameters or ()):
        errors = (*errors, 403)  # a user key asserting, or a proxy key outside its prefix
    for status in sorted({*ALWAYS, *(AUTH if auth else ()), *errors}, key=str):
        responses.setdefault(str(status), _error(status))
    op: Obj = {"summary": summary, "responses": responses}
    if auth:
        op["security"] = [{"bearer": []}]
    if body is not None:
        op["requestBody"] = body
    if parameters:
        op["parameters"] = parameters
    return op


def _path_param(name: str) -> Obj:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


def _query(name: str, schema: Obj, description: str) -> Obj:
    return {"name": name, "in": "query", "schema": schema, "description": description}


def _header(name: str, schema: Obj, description: str) -> Obj:
    return {"name": name, "in": "header", "schema": schema, "description": description}


def _json_body(schema: Obj, required: bool = True) -> Obj:
    return {"required": required, "content": {JSON: {"schema": schema}}}


def _with_head_and_options(paths: Obj) -> Obj:
    """HEAD beside every GET (headers of the GET, no body) and OPTIONS on every path;
    the path's parameters declared on the path (OPTIONS has them too)."""
    for path, item in paths.items():
        names = re.findall(r"{(\w+)}", path)
        if names:
            item["parameters"] = [_path_param(name) for name in names]
        if "get" in item:
            head = copy.deepcopy(item["get"])
            head["summary"] = (
                "Headers of " + item["get"]["summary"][0].lower() + item["get"]["summary"][1:]
            )
            for response in head["responses"].values():
                response.pop("content", None)
            item["head"] = head
        item["options"] = {
            "summary": "The methods this path allows (Allow header)",
            "responses": {
                "200": {
                    "description": "No body; `Allow` lists the methods",
                    "headers": {"Allow": {"schema": {"type": "string"}}},
                },
                **{str(s): _error(s) for s in ALWAYS},
            },
        }
    return paths


def _document(title: str, description: str, paths: Obj, schemas: Obj) -> Obj:
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": __version__, "description": description},
        "paths": _with_head_and_options(paths),
        "components": {
            "schemas": {"Error": ERROR, **schemas},
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A key of [[auth.keys]] (API server) or of "
                    "proxy.client_keys (runs proxy)",
                }
            },
        },
    }


# --------------------------------------------------------------------------- schemas

MESSAGE: Obj = {
    "type": "object",
    "required": ["role"],
    "properties": {
        "role": {"type": "string"},
        "content": {"type": ["string", "array", "null"]},
    },
}
CHAT_REQUEST: Obj = {
    "type": "object",
    "required": ["model", "messages"],
    "properties": {
        "model": {"type": "string", "minLength": 1},
        "messages": {"type": "array", "minItems": 1, "items": _ref("Message")},
        "stream": {"type": "boolean"},
        "session_id": {"type": "string", "pattern": "^[A-Za-z0-9._:-]{1,128}$"},
        "download_link_mode": {"enum": ["private", "public"]},
    },
}
MANIFEST: Obj = {
    "type": "object",
    "required": ["download_link_mode", "artifacts"],
    "properties": {
        "download_link_mode": {"enum": ["private", "public"]},
        "artifacts": {"type": "array", "items": {"type": "object"}},
    },
}
CHAT_COMPLETION: Obj = {
    "type": "object",
    "required": ["id", "object", "model", "choices"],
    "properties": {
        "id": {"type": "string"},
        "object": {"const": "chat.completion"},
        "created": {"type": "integer"},
        "model": {"type": "string"},
        "choices": {"type": "array", "items": {"type": "object"}},
        "usage": {"type": ["object", "null"]},
        "gateway": _ref("Manifest"),
    },
}
MODEL_LIST: Obj = {
    "type": "object",
    "required": ["object", "data"],
    "properties": {
        "object": {"const": "list"},
        "data": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id"],
                "properties": {"id": {"type": "string"}, "object": {"type": "string"}},
            },
        },
    },
}
HEALTH: Obj = {
    "type": "object",
    "required": ["status", "version"],
    "properties": {"status": {"const": "ok"}, "version": {"type": "string"}},
}
READY: Obj = {
    "type": "object",
    "required": ["status", "version", "checks"],
    "properties": {
        "status": {"enum": ["ready", "unready"]},
        "version": {"type": "string"},
        "checks": {"type": "object"},
    },
}
LIST: Obj = {
    "type": "object",
    "required": ["object", "data"],
    "properties": {
        "object": {"const": "list"},
        "data": {"type": "array", "items": {"type": "object"}},
    },
}
OBJECT: Obj = {"type": "object"}
#: one server-sent event (OpenAPI 3.1 reads a text/event-stream schema per event; 3.2's
#: event object): JSON in ``data`` (``[DONE]`` ends a chat stream), keep-alives are
#: comments, not events (docs/api.md, Streams)
SSE_STREAM: Obj = {
    "type": "object",
    "required": ["data"],
    "properties": {
        "data": {"type": "string"},
        "event": {"type": "string"},
        "id": {"type": "string"},
        "retry": {"type": "integer"},
    },
}


def _stream_or_json(schema: Obj, description: str) -> Obj:
    return {
        "description": description,
        "content": {JSON: {"schema": schema}, SSE: {"schema": SSE_STREAM}},
    }


OPENAPI_OP = _op("This OpenAPI 3.1 document", {200: _json(OBJECT, "The document")}, auth=False)
METRICS_OP = _op(
    "Prometheus metrics",
    {
        200: {
            "description": "Prometheus text format",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        }
    },
    auth=False,
)

OWNER_HEADERS = [
    _header("X-Gateway-Owner", {"type": "string"}, "proxy keys only: the owner to act for"),
    _header("X-Gateway-Link-Mode", {"enum": ["private", "public"]}, "proxy keys only"),
]
SESSION_HEADER = _header(
    "X-Session-Id", {"type": "string"}, "a stored conversation to continue (1-128 of A-Za-z0-9._:-)"
)
UPSTREAM_ERRORS = (400, 403, "4XX", 429, 502, 504)


def _ops_paths() -> Obj:
    return {
        "/health": {"get": _op("Liveness", {200: _json(HEALTH)}, auth=False)},
        "/health/ready": {
            "get": _op(
                "Readiness: upstream answers, store writable, not draining",
                {200: _json(READY, "Ready"), 503: _json(READY, "Not ready (the failing check)")},
                auth=False,
            )
        },
        "/metrics": {"get": METRICS_OP},
        "/openapi.json": {"get": OPENAPI_OP},
        "/v1/models": {
            "get": _op("The upstream's models (cached)", {200: _json(MODEL_LIST)}, UPSTREAM_ERRORS)
        },
    }


#: what a Responses request or a run may set for the agent (checked: 400 otherwise)
OPTIONS: Obj = {
    "instructions": {"type": ["string", "null"]},
    "temperature": {"type": ["number", "null"], "minimum": 0, "maximum": 2},
    "top_p": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
    "max_output_tokens": {"type": ["integer", "null"], "minimum": 1, "maximum": 2**31 - 1},
}


def _chat_paths() -> Obj:
    responses_request: Obj = {
        "type": "object",
        "required": ["model", "input"],
        "properties": {
            "model": {"type": "string", "minLength": 1},
            "input": {"type": ["string", "array"], "items": {"type": "object"}},
            **OPTIONS,
            "store": {"type": "boolean"},
            "stream": {"type": "boolean"},
            "background": {"type": "boolean"},
            "previous_response_id": {"type": "string"},
        },
    }
    response_id = [_path_param("response_id")]
    return {
        "/v1/chat/completions": {
            "post": _op(
                "OpenAI chat completions, streamed (SSE) or not",
                {200: _stream_or_json(_ref("ChatCompletion"), "A completion, or its stream")},
                (*UPSTREAM_ERRORS, 403),
                body=_json_body(_ref("ChatRequest")),
                parameters=[
                    SESSION_HEADER,
                    *OWNER_HEADERS,
                    _header(
                        "X-Gateway-Links",
                        {"const": "names"},
                        "proxy keys only: file names, no links",
                    ),
                ],
            )
        },
        "/v1/responses": {
            "post": _op(
                "OpenAI Responses: create (streamed, stored, in the background)",
                {200: _stream_or_json(OBJECT, "The response object, or its stream")},
                (*UPSTREAM_ERRORS, 404),
                body=_json_body(responses_request),
                parameters=[SESSION_HEADER, *OWNER_HEADERS],
            )
        },
        "/v1/responses/{response_id}": {
            "get": _op(
                "A stored response (stream=true: its events, from starting_after)",
                {200: _stream_or_json(OBJECT, "The response object, or its events")},
                (404,),
                parameters=[
                    *response_id,
                    _query("stream", {"type": "string"}, "true: replay and follow the events"),
                    _query("starting_after", {"type": "string"}, "a sequence_number"),
                ],
            ),
            "delete": _op(
                "Delete a stored response", {200: _json(OBJECT)}, (404,), parameters=response_id
            ),
        },
        "/v1/responses/{response_id}/cancel": {
            "post": _op(
                "Cancel a background response", {200: _json(OBJECT)}, (404,), parameters=response_id
            )
        },
    }


def _runs_paths() -> Obj:
    run_request: Obj = {
        "type": "object",
        # a run needs one of them (``messages`` wins when both are there)
        "anyOf": [{"required": ["input"]}, {"required": ["messages"]}],
        "properties": {
            "model": {"type": "string", "minLength": 1},
            "input": {"type": "string", "minLength": 1},
            "messages": {"type": "array", "minItems": 1, "items": _ref("Message")},
            **OPTIONS,
            "session_id": {"type": "string", "pattern": "^[A-Za-z0-9._:-]{1,128}$"},
            "download_link_mode": {"enum": ["private", "public"]},
            "metadata": {"type": "object"},
        },
    }
    started: Obj = {
        "type": "object",
        "required": ["run_id", "status"],
        "properties": {"run_id": {"type": "string"}, "status": {"type": "string"}},
    }
    run_id = [_path_param("run_id")]
    return {
        "/v1/runs": {
            "post": _op(
                "Start a background run",
                {202: _json(started, "Started")},
                (403,),
                body=_json_body(run_request),
                parameters=[SESSION_HEADER, *OWNER_HEADERS],
            )
        },
        "/v1/runs/{run_id}": {
            "get": _op("A run's state", {200: _json(OBJECT)}, (404,), parameters=run_id)
        },
        "/v1/runs/{run_id}/stop": {
            "post": _op("Stop a run", {200: _json(OBJECT)}, (404,), parameters=run_id)
        },
        "/v1/runs/{run_id}/events": {
            "get": _op(
                "A run's events (SSE), replayed after Last-Event-ID / after, then live",
                {200: {"description": "The events", "content": {SSE: {"schema": SSE_STREAM}}}},
                (404,),
                parameters=[
                    *run_id,
                    _query("after", {"type": "string"}, "replay after this seq"),
                    _header("Last-Event-ID", {"type": "string"}, "replay after this seq"),
                ],
            )
        },
    }


def _artifacts_paths() -> Obj:
    artifact_id = [_path_param("artifact_id")]
    html = {"text/html": {"schema": {"type": "string"}}}
    either: list[Obj] = [{"bearer": []}, {}]  # a public link, or a browser's Open WebUI session
    download = _op(
        "Download an artifact (private: its owner; public: exp and sig)",
        {
            200: {"description": "The file", "content": {"*/*": {"schema": {}}}},
            206: {"description": "A range of the file", "content": {"*/*": {"schema": {}}}},
        },
        (403, 404, 410, 416),
        parameters=[
            *artifact_id,
            _query("exp", {"type": "string"}, "public links: expiry (unix seconds)"),
            _query("sig", {"type": "string"}, "public links: signature"),
            _header("Range", {"type": "string"}, "one byte range"),
            *OWNER_HEADERS[:1],
        ],
    )
    download["security"] = either
    share_form = _op(
        "The share page (JSON with a form token; HTML for a browser)",
        {200: {"description": "OK", "content": {JSON: {"schema": OBJECT}, **html}}},
        (403, 404, 410),
        parameters=[*artifact_id, *OWNER_HEADERS[:1]],
    )
    share_form["security"] = either
    share = _op(
        "Make a public link to an artifact of the caller's",
        {
            201: _json(OBJECT, "The public link"),
            200: {"description": "The page with the link (browser)", "content": html},
        },
        (403, 404, 410),
        parameters=[*artifact_id, *OWNER_HEADERS[:1]],
    )
    share["security"] = either
    return {
        "/v1/artifacts": {
            "get": _op("The caller's links", {200: _json(LIST)}, parameters=OWNER_HEADERS[:1])
        },
        "/v1/artifacts/{artifact_id}": {
            "get": download,
            "delete": _op(
                "Revoke a link of the caller's",
                {200: _json(OBJECT)},
                (403, 404),
                parameters=[*artifact_id, *OWNER_HEADERS[:1]],
            ),
        },
        "/v1/artifacts/{artifact_id}/share": {"get": share_form, "post": share},
    }


def _sessions_paths() -> Obj:
    session_id = [_path_param("session_id"), *OWNER_HEADERS[:1]]
    return {
        "/v1/sessions": {
            "get": _op("The caller's sessions", {200: _json(LIST)}, parameters=OWNER_HEADERS[:1])
        },
        "/v1/sessions/{session_id}": {
            "get": _op("A session", {200: _json(OBJECT)}, (403, 404), parameters=session_id),
            "delete": _op(
                "Delete a session", {200: _json(OBJECT)}, (403, 404), parameters=session_id
            ),
        },
        "/v1/selftest": {
            "post": _op(
                "The built-in self-test stream (gateway smoke)",
                {200: {"description": "A chat stream", "content": {SSE: {"schema": SSE_STREAM}}}},
                (403,),
                body=_json_body(
                    {
                        "type": "object",
                        "required": ["nonce"],
                        "properties": {
                            "nonce": {"type": "string", "pattern": "^[0-9a-f]{16,64}$"},
                            "download_link_mode": {"enum": ["private", "public"]},
                        },
                    }
                ),
                parameters=OWNER_HEADERS,
            )
        },
    }


SCHEMAS: Obj = {
    "Message": MESSAGE,
    "ChatRequest": CHAT_REQUEST,
    "ChatCompletion": CHAT_COMPLETION,
    "Manifest": MANIFEST,
}


def api_document() -> Obj:
    """The API server's document (``gateway run``)."""
    paths = {
        **_ops_paths(),
        **_chat_paths(),
        **_runs_paths(),
        **_artifacts_paths(),
        **_sessions_paths(),
    }
    return _document(
        "artifact gateway API server",
        "Chat completions, Responses, background runs and managed downloads; host paths "
        "in every stream become managed-download links. Errors: docs/api.md.",
        paths,
        SCHEMAS,
    )


def proxy_document() -> Obj:
    """The runs proxy's document (``gateway proxy``)."""
    paths = {
        "/health": {
            "get": _op(
                "Liveness, with the gateway's state",
                {
                    200: _json(
                        {
                            **HEALTH,
                            "properties": {
                                **HEALTH["properties"],
                                "gateway": {"type": "string"},
                                "draining": {"type": "boolean"},
                            },
                        }
                    )
                },
                auth=False,
            )
        },
        "/health/ready": {
            "get": _op(
                "Readiness: the gateway answers, not draining",
                {200: _json(READY, "Ready"), 503: _json(READY, "Not ready (the failing check)")},
                auth=False,
            )
        },
        "/metrics": {"get": METRICS_OP},
        "/openapi.json": {"get": OPENAPI_OP},
        "/v1/models": {
            "get": _op("The gateway's models", {200: _json(MODEL_LIST)}, (403, "4XX", 502))
        },
        "/v1/chat/completions": {
            "post": _op(
                "A chat as the Open WebUI user (streamed: a run on the gateway)",
                {200: _stream_or_json(_ref("ChatCompletion"), "A completion, or its stream")},
                (403, "4XX", 502, 504),
                body=_json_body(_ref("ChatRequest")),
                parameters=[
                    _header(
                        "X-OpenWebUI-User-Id", {"type": "string"}, "the user (trusted headers)"
                    ),
                    _header("X-OpenWebUI-User-Jwt", {"type": "string"}, "the user (signed)"),
                ],
            )
        },
    }
    return _document(
        "artifact gateway runs proxy (Open WebUI)",
        "Open WebUI's OpenAI connection: each chat runs on the gateway as the Open WebUI "
        "user. Errors: docs/api.md.",
        paths,
        SCHEMAS,
    )
