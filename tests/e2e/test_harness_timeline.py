"""The harness learns time (issue 32 item 3): file-system timelines and checked capture.

* :func:`harness.timeline.refine` puts every op exactly at its event boundary for
  every chunking (every split point, seeded random cuts, Hypothesis);
* a replay applies the ops at the right point of the stream under every strategy
  (a file that appears before its only mention gets its link; one deleted before
  it is a bare name; one that appears only after is a bare name, whatever the cut);
* ``harness capture`` refuses a stream of another API than the one named, and
  records the API and the upstream;
* the recorded Hermes streams kept for the native relay load, say what they are, and
  are refused for replay.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.sse import DONE, encode_json
from harness import cassette as cassette_mod
from harness import timeline
from harness.__main__ import main as harness_main
from harness.replay import replay_cassette, table
from harness.strategies import DEFAULT
from tests.helpers import SDK_WARNINGS

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "cassettes" / "recorded"
HOST = "/Users/alice/.agent/artifacts"


def _chunk(content: str) -> str:
    return encode_json(
        {
            "id": "c1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}],
        }
    ).decode()


def _finish() -> str:
    return encode_json(
        {
            "id": "c1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        }
    ).decode()


BODY = (
    _chunk("Writing it now. ")
    + 'event: hermes.tool.progress\ndata: {"tool": "write_file", "status": "completed"}\n\n'
    + _chunk(f"Saved {HOST}/out/a.txt and ")
    + _chunk(f"{HOST}/out/b.txt.")
    + _finish()
    + DONE.decode()
).encode()
N_EVENTS = len(cassette_mod.split_events(BODY.decode()))


def _check_refined(chunking: list[bytes], at: int) -> None:
    op = timeline.Op(at, "write", "root/x.txt", "x")
    chunks, before = timeline.refine(chunking, [op])
    assert b"".join(chunks) == BODY
    offsets = timeline.event_offsets(BODY)
    [(index, ops)] = before.items()
    assert ops == [op]
    handed = sum(len(c) for c in chunks[:index])
    assert handed == offsets[at]  # every byte before event `at`, none of it


@pytest.mark.parametrize("at", range(N_EVENTS + 1))
def test_refine_places_the_op_at_its_event_for_every_split_point(at: int) -> None:
    _check_refined([BODY], at)
    for cut in range(1, len(BODY)):
        _check_refined([BODY[:cut], BODY[cut:]], at)
    _check_refined([BODY[i : i + 1] for i in range(len(BODY))], at)
    rnd = random.Random(at)
    for _ in range(50):
        cuts = sorted(rnd.sample(range(1, len(BODY)), rnd.randint(1, 30)))
        bounds = [0, *cuts, len(BODY)]
        _check_refined([BODY[a:b] for a, b in itertools.pairwise(bounds)], at)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, len(BODY) - 1), max_size=40), st.data())
def test_refine_property(cuts: list[int], data: st.DataObject) -> None:
    bounds = [0, *sorted(set(cuts)), len(BODY)]
    chunking = [BODY[a:b] for a, b in itertools.pairwise(bounds)]
    ats = sorted(data.draw(st.lists(st.integers(0, N_EVENTS), min_size=1, max_size=4)))
    ops = [timeline.Op(a, "write", f"root/f{i}", "") for i, a in enumerate(ats)]
    chunks, before = timeline.refine(chunking, ops)
    assert b"".join(chunks) == BODY
    assert all(chunks)
    offsets = timeline.event_offsets(BODY)
    placed = [(sum(len(c) for c in chunks[:i]), op) for i, got in before.items() for op in got]
    assert sorted(placed, key=lambda p: p[1].path) == sorted(
        ((offsets[op.at_event], op) for op in ops), key=lambda p: p[1].path
    )


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"at_event": 1, "op": "write", "path": "root/a", "when": 2}, "unknown key"),
        ({"at_event": 99, "op": "write", "path": "root/a"}, "at_event must be"),
        ({"at_event": True, "op": "write", "path": "root/a"}, "at_event must be"),
        ({"at_event": 1, "op": "chmod", "path": "root/a"}, "op must be one of"),
        ({"at_event": 1, "op": "write", "path": "/etc/passwd"}, "relative to the sandbox"),
        ({"at_event": 1, "op": "write", "path": "root/../../x"}, "relative to the sandbox"),
        ({"at_event": 1, "op": "write", "path": "root/a", "mode": "rw"}, "mode must be"),
        ({"at_event": 1, "op": "write", "path": "root/a", "content": 3}, "content must be"),
    ],
)
def test_timeline_ops_are_checked(raw: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        timeline.parse([raw], 5, "x.expect.yaml")


def test_timeline_ops_must_be_in_order() -> None:
    ops = [
        {"at_event": 3, "op": "delete", "path": "root/a"},
        {"at_event": 1, "op": "write", "path": "root/a"},
    ]
    with pytest.raises(ValueError, match="at_event order"):
        timeline.parse(ops, 5, "x.expect.yaml")


def test_apply_write_keeps_the_inode_replace_makes_a_new_one(tmp_path: Path) -> None:
    timeline.apply(timeline.Op(0, "write", "root/a.txt", "one"), tmp_path)
    ino = (tmp_path / "root/a.txt").stat().st_ino
    timeline.apply(timeline.Op(0, "write", "root/a.txt", "two!"), tmp_path)
    assert (tmp_path / "root/a.txt").read_text() == "two!"
    assert (tmp_path / "root/a.txt").stat().st_ino == ino
    timeline.apply(timeline.Op(0, "replace", "root/a.txt", "3", 0o600), tmp_path)
    st_ = (tmp_path / "root/a.txt").stat()
    assert (tmp_path / "root/a.txt").read_text() == "3"
    assert st_.st_mode & 0o777 == 0o600
    timeline.apply(timeline.Op(0, "delete", "root/a.txt"), tmp_path)
    assert not (tmp_path / "root/a.txt").exists()
    assert sorted(p.name for p in (tmp_path / "root").iterdir()) == []


def _write_cassette(tmp: Path, name: str, exp: dict[str, object]) -> Path:
    path = tmp / f"{name}.yaml"
    cassette_mod.write(
        path,
        request_body={"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]},
        body=BODY.decode(),
    )
    path.with_name(f"{name}.expect.yaml").write_text(cassette_mod.dump_yaml(exp))
    return path


#: events: 0 text, 1 progress, 2 "Saved a.txt and", 3 "b.txt.", 4 finish, 5 [DONE]
TIMED = {
    # a.txt appears before its mention; b.txt is deleted before its mention
    "appear-and-vanish": (
        [
            {"at_event": 2, "op": "replace", "path": "root/out/a.txt", "content": "A"},
            {"at_event": 3, "op": "delete", "path": "root/out/b.txt"},
        ],
        "Writing it now. Saved [a.txt](<link:root/out/a.txt>) and b.txt.",
        ["root/out/a.txt"],
    ),
    # a.txt appears only once the text has named it: its mention keeps the name, and the
    # manifest links it at the answer's end (the agent said it and wrote it), whatever
    # the cut
    "appears-too-late": (
        [{"at_event": 3, "op": "write", "path": "root/out/a.txt", "content": "A"}],
        "Writing it now. Saved a.txt and [b.txt](<link:root/out/b.txt>).",
        ["root/out/b.txt", "root/out/a.txt"],
    ),
    # a.txt never appears: its name, no link, nothing in the manifest
    "never-appears": (
        [],
        "Writing it now. Saved a.txt and [b.txt](<link:root/out/b.txt>).",
        ["root/out/b.txt"],
    ),
}


@SDK_WARNINGS
@pytest.mark.parametrize("name", list(TIMED))
async def test_replay_applies_the_timeline_under_every_strategy(name: str, tmp_path: Path) -> None:
    ops, text, artifacts = TIMED[name]
    path = _write_cassette(
        tmp_path,
        name,
        {
            "mounts": {HOST: "root"},
            "files": {"root/out/b.txt": "B"},
            "timeline": ops,
            "expect": {"text": text, "artifacts": artifacts, "never": [HOST]},
        },
    )
    cas = cassette_mod.load(path)
    assert [op.at_event for op in cas.timeline] == [op["at_event"] for op in ops]
    outcomes = await replay_cassette(cas, DEFAULT, ci=True)
    assert all(o.ok for o in outcomes), "\n" + table(outcomes)
    assert outcomes[-1].strategy == "links"


def test_an_expectation_with_a_bad_timeline_is_refused(tmp_path: Path) -> None:
    path = _write_cassette(
        tmp_path,
        "bad",
        {
            "timeline": [{"at_event": N_EVENTS + 1, "op": "write", "path": "root/a"}],
            "expect": {"never": ["x"]},
        },
    )
    with pytest.raises(ValueError, match=r"bad\.expect\.yaml: timeline\[0\]: at_event"):
        cassette_mod.load(path)
    assert harness_main(["replay", str(path)]) == 2


# --------------------------------------------------------------------------- capture


RESPONSES_SSE = (
    'event: response.created\ndata: {"type": "response.created", "response": {"id": "r1"}}\n\n'
    'event: response.completed\ndata: {"type": "response.completed", "response": {"id": "r1"}}\n\n'
)
RUNS_SSE = 'data: {"event": "message.delta", "run_id": "r", "delta": "hi"}\n\n: stream closed\n\n'


@pytest.mark.parametrize(("body", "found"), [(RESPONSES_SSE, "responses"), (RUNS_SSE, "runs")])
def test_capture_refuses_a_chat_cassette_from_another_api(
    body: str, found: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sse = tmp_path / "t.sse"
    sse.write_text(body)
    out = tmp_path / "c.yaml"
    assert harness_main(["capture", "--sse", str(sse), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert not out.exists()
    assert f"pass --api {found}" in err and "not a chat completions stream" in err
    assert len(err.strip().splitlines()) == 1
    rc = harness_main(
        ["capture", "--sse", str(sse), "--out", str(out), "--api", found, "--upstream", "hermes"]
    )
    assert rc == 0
    cas = cassette_mod.load(out, require_expectation=False)
    assert (cas.api, cas.upstream) == (found, "hermes")
    assert cas.body == body.encode()
    with pytest.raises(ValueError, match=f"a native {found} stream"):
        cassette_mod.load(out)


def test_capture_records_a_chat_stream_as_chat(tmp_path: Path) -> None:
    sse = tmp_path / "t.sse"
    sse.write_text(BODY.decode())
    out = tmp_path / "c.yaml"
    assert harness_main(["capture", "--sse", str(sse), "--out", str(out)]) == 0
    cas = cassette_mod.load(out, require_expectation=False)
    assert (cas.api, cas.upstream) == ("chat", "unknown")
    assert cassette_mod.detect_api(RESPONSES_SSE.encode() + BODY) == "mixed"
    assert cassette_mod.detect_api(b'{"error": {"code": "x"}}') is None


# ------------------------------------------------------------ recorded Hermes streams


RECORDED_FILES = sorted(p for p in RECORDED.glob("*.yaml") if not p.name.endswith(".expect.yaml"))


def test_the_recorded_hermes_streams_are_all_there() -> None:
    names = {p.stem for p in RECORDED_FILES}
    assert {
        "hermes-responses-fresh-file",
        "hermes-responses-chain-overwrite",
        "hermes-runs-fresh-file",
        "hermes-chat-non-streamed",
    } <= names


@pytest.mark.parametrize("path", [pytest.param(p, id=p.stem) for p in RECORDED_FILES])
def test_recorded_hermes_streams_load_and_round_trip(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    data = cassette_mod.SSEYamlSerializer.deserialize(text)
    assert cassette_mod.SSEYamlSerializer.serialize(data) == text
    cas = cassette_mod.load(path, require_expectation=False)
    assert cas.upstream == "hermes-agent 0.19.0"
    if cas.api == "chat":
        assert json.loads(cas.body)["object"] == "chat.completion"
        return
    assert cassette_mod.detect_api(cas.body) == cas.api
    with pytest.raises(ValueError, match="kept for the native relay"):
        cassette_mod.load(path)
    raw = cassette_mod.split_events(cas.body.decode())
    exp = cassette_mod.load(path, require_expectation=False).expect
    ops = timeline.parse(exp.timeline, len(raw), path.name)
    assert ops, "every recorded native stream wrote a file"
