"""The whole pipeline, generated: upstream SSE of any shape → every front.

Hypothesis builds upstream bodies (:func:`tests.pipegen.bodies`: chunks of arbitrary
shape, host paths of every class in arbitrary string positions, every ending), reads
them in arbitrary splits through the real SSE source and :class:`ChatPipeline` the
way the relay does, and encodes the result with every front: chat, Responses (live
SSE), runs (journal → SSE), Open WebUI directly and through the proxy's stage over
the run's SSE. Properties, for every body and every split:

- no client-visible byte, decoded string or assembled text holds a secret folder
  token in any spelling (:func:`tests.pathgen.leaked`);
- only the allowlist passes: every key at every level of every JSON object belongs to
  that front's wire format (:mod:`tests.pipegen` writes the formats down), plus the
  ``gateway`` manifest and the operator's ``extra_chunk_keys``; structural values
  have their shape (ids, finish reasons, roles, indexes, token counts);
- the output is strict SSE with one line of strict JSON per event (no NaN);
- links are only the resolver's, and the manifest lists exactly those the events carry;
- the terminal event is last, agrees with the deltas and carries the manifest;
- the stage's events do not depend on the read splits (one read gives the same), nor
  do the chat, Responses and Open WebUI bytes; choice 0's assembled content equals
  the one-shot rewrite of what the pipeline consumed;
- nothing raises except the :class:`GatewayError` that ends a stream.

CI runs 10,000 bodies (and 400 through the real relay), ~55 s of CPU; ``-m slow`` runs
10^6 (``GATEWAY_PIPELINE_EXAMPLES`` and ``GATEWAY_PIPELINE_SOAK_EXAMPLES`` change them).
"""

from __future__ import annotations

import os
import time
from typing import Any
from unittest import mock

import pytest
import trio
from hypothesis import HealthCheck, given, settings

import gateway.fronts.responses as responses_module
from gateway.core.events import Meta
from gateway.core.rewrite import rewrite
from gateway.fronts.chat import ChatEncoder
from gateway.fronts.openwebui import OpenWebUIEncoder, private_note
from gateway.fronts.responses import ResponsesEncoder
from gateway.fronts.runs import RunEncoder, run_sse
from gateway.stream.pipeline import Scrubber
from tests import pathgen, pipegen
from tests.pipegen import Body, Trace

CI = settings(
    max_examples=int(os.environ.get("GATEWAY_PIPELINE_EXAMPLES", "10000")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
SLOW = settings(
    max_examples=1_000_000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
RUN_ID = "run_" + "ab" * 16


@pytest.fixture(scope="module", autouse=True)
def corpus() -> None:
    pipegen.build_corpus(2000)


class Ids:
    """Deterministic stand-in for ``secrets`` in the Responses front (its random ids):
    outputs compare byte for byte."""

    def __init__(self) -> None:
        self.n = 0

    def token_hex(self, nbytes: int = 16) -> str:
        self.n += 1
        return f"{self.n:0{2 * nbytes}x}"


def responses_bytes(trace: Trace) -> bytes:
    with mock.patch.object(responses_module, "secrets", Ids()):
        enc = ResponsesEncoder("resp_" + "0" * 32, "gpt-test", created_at=1_700_000_000)
        return b"".join(pipegen.replay(trace, enc))


def owui_front() -> OpenWebUIEncoder:
    enc = OpenWebUIEncoder("owui-model", "private")
    enc.meta = Meta(id="chatcmpl-owui", created=1_700_000_000, model="owui-model")
    return enc


def check_body(body: Body) -> None:
    trace = pipegen.run_pipeline(body, body.splits)
    whole = pipegen.run_pipeline(body, ())

    # the stage: the same events whatever the reads
    assert trace.events() == whole.events()
    assert (trace.terminal, trace.manifest) == (whole.terminal, whole.manifest)
    if trace.terminal == "fail":
        assert trace.error is not None and whole.error is not None
        assert trace.error.code == whole.error.code == body.error_code
    expected = {"completed": "end", "failed": "fail", "cancelled": "cancel"}[body.outcome]
    assert trace.terminal == expected, (trace.terminal, trace.error)

    # chat: the allowlist, no leak, links, terminal; the same bytes for any reads
    extra = sorted(body.settings.extra_chunk_keys)
    chat = b"".join(pipegen.replay(trace, ChatEncoder()))
    view = pipegen.check_chat(chat, trace, body, extra_keys=extra)
    assert chat == b"".join(pipegen.replay(whole, ChatEncoder()))
    held = pipegen.texts(trace.final)
    # text still held when a stream fails or is stopped goes out as names only (a
    # path held by the rewriter, or inside an unclosed markdown "[" of the link joiner)
    if (0, "content") not in held or trace.terminal == "end":
        one_shot = pipegen.run_sync(
            Scrubber(pipegen.StubLinks(), body.settings).text(body.content0)
        )
        assert view.texts.get((0, "content"), "") == one_shot

    # Responses (live SSE): the same bytes for any reads too
    resp = responses_bytes(trace)
    pipegen.check_responses(resp, trace, body)
    assert resp == responses_bytes(whole)

    # runs: the journal as followers read it
    journal = [e for out in pipegen.replay(trace, RunEncoder(RUN_ID, "gpt-test")) for e in out]
    runs_raw = run_sse(journal)
    evs = pipegen.check_runs(runs_raw, trace, body, RUN_ID)

    # Open WebUI, fed by the pipeline directly
    owui = b"".join(pipegen.replay(trace, owui_front()))
    pipegen.check_chat(owui, trace, body, named=False, all_links=False)
    assert owui == b"".join(pipegen.replay(whole, owui_front()))

    # Open WebUI through the proxy: the run's SSE, split anew, through RunEventStage
    ptrace = pipegen.run_proxy(runs_raw, body.splits, trace.links)
    proxied = b"".join(pipegen.replay(ptrace, owui_front()))
    pview = pipegen.check_chat(proxied, ptrace, body, named=False, all_links=False)
    assert ptrace.manifest == trace.manifest
    # the proxy's own (name-only) pass is the one-shot rewrite of the run's text; it
    # is not always the identity: the gateway's "~" for a home directory followed by
    # a JSON escape ("~\\nmore") reads as a Windows home path again (see the report)
    text = pview.texts.get((0, "content"), "")
    output = rewrite(evs[-1]["output"], extra_roots=pathgen.CONFIG_ROOTS)
    if trace.manifest["artifacts"] and ptrace.terminal == "end":
        output += private_note(trace.manifest["artifacts"])
    assert text == output, "the proxy's text is not the rewrite of the run's"


@CI
@given(pipegen.bodies())
def test_every_front_relays_only_the_allowlist_and_no_path(body: Body) -> None:
    check_body(body)


# --- the driver is the relay ------------------------------------------------------------


def concat(parts: list[list[Any]]) -> list[Any]:
    return [e for p in parts for e in p]


@settings(CI, max_examples=max(1, CI.max_examples // 25))
@given(pipegen.bodies())
def test_the_driver_writes_what_the_relay_writes(body: Body) -> None:
    """The sync driver of the properties above is ``Relay``: the same bytes for chat, the
    same run events (terminal included: ``finish()``, ``manifest()``, drain, stop)."""
    trace = pipegen.run_pipeline(body, body.splits)
    chat = trio.run(pipegen.relay_outputs, body, ChatEncoder())
    assert b"".join(chat) == b"".join(pipegen.replay(trace, ChatEncoder()))
    runs = trio.run(pipegen.relay_outputs, body, RunEncoder(RUN_ID, "gpt-test"), concat)
    assert concat(runs) == concat(pipegen.replay(trace, RunEncoder(RUN_ID, "gpt-test")))


@pytest.mark.slow
def test_soak_every_front_relays_only_the_allowlist_and_no_path() -> None:
    """The CI property at 10^6 bodies (``GATEWAY_PIPELINE_SOAK_EXAMPLES``), from a larger
    corpus of host paths."""
    pipegen.build_corpus(int(os.environ.get("GATEWAY_PIPELINE_SOAK_CORPUS", "20000")))
    examples = int(os.environ.get("GATEWAY_PIPELINE_SOAK_EXAMPLES", "1000000"))

    progress = os.environ.get("GATEWAY_PIPELINE_SOAK_PROGRESS")  # a file: a line per 10^4
    done = [0]
    t0 = time.monotonic()

    @settings(SLOW, max_examples=examples)
    @given(pipegen.bodies(max_events=16))
    def soak(body: Body) -> None:
        check_body(body)
        done[0] += 1
        if progress and done[0] % 10_000 == 0:
            with open(progress, "a") as fh:
                fh.write(f"{done[0]} bodies in {time.monotonic() - t0:.0f} s\n")

    soak()
