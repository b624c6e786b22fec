"""Identifiers (model ids, ``root``, ``parent``) are not prose: a host path glued after a
word in them is a path too (``local/Users/alice/m``), and is shown as its name."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from gateway.core.rewrite import MAX_GLUED, MAX_IDENTIFIER, rewrite, scrub_identifier
from tests import pathgen


def scrub(text: str) -> str:
    return rewrite(text, extra_roots=pathgen.CONFIG_ROOTS)


@pytest.mark.parametrize(
    ("model", "shown"),
    [
        ("local/Users/zqalice/zqproj/f.gguf", "local/f.gguf"),
        ("m/Users/zqalice", "m/~"),
        ("x\\Users\\zqbob\\m", "x/m"),
        ("m%2FUsers%2Fzqalice%2Ff.txt", "m/f.txt"),
        ("hf:org/repo@/home/zqbob/cache/q4.gguf", "hf:org/repo@q4.gguf"),
        ("v2C:\\Users\\zqbob\\m.gguf", "v2C:m.gguf"),
        ("xfile:///home/zqbob/m.gguf", "xfile:m.gguf"),
        ("a/home/zqbob/x/y.gguf", "a/y.gguf"),
        ("/Users/zqalice/models/llama", "llama"),
    ],
)
def test_a_glued_path_is_its_name(model: str, shown: str) -> None:
    assert scrub_identifier(model, scrub) == shown


@pytest.mark.parametrize(
    "model",
    ["gpt-4o", "meta-llama/Llama-3-8B", "org/model:v1", "Qwen/Qwen2.5-7B-Instruct", "a/b/c"],
)
def test_ids_without_a_host_path_are_unchanged(model: str) -> None:
    assert scrub_identifier(model, scrub) == model


def test_a_long_value_is_a_stand_in() -> None:
    shown = scrub_identifier("q" * MAX_IDENTIFIER + "/Users/zqalice/m", scrub)
    assert shown.startswith("id_") and "zqalice" not in shown
    assert shown == scrub_identifier("q" * MAX_IDENTIFIER + "/Users/zqalice/m", scrub)


@pytest.mark.parametrize("word", ["m", "local", "org/model", "x_", "v2"])
@given(path=pathgen.host_paths(), sep=st.sampled_from(["", "/", ":", "@"]))
def test_every_path_class_glued_after_a_word(word: str, path: pathgen.HostPath, sep: str) -> None:
    # "m:" before "\\srv\share" would be a drive before a UNC path: no spelling
    # software writes (docs/rewriting.md: mixed spellings glued together)
    assume(not (sep == ":" and path.text.startswith("\\")))
    # "m:" before a POSIX path is a drive: the text is a Windows path then, with Windows
    # rules (a backslash there is a separator, not a shell escape of a space)
    assume(not (sep == ":" and len(word) == 1))
    shown = scrub_identifier(word + sep + path.text, scrub)
    assert not pathgen.leaked(shown, path.secrets), (path.text, shown)


@pytest.mark.parametrize(
    "value", ["&" * 256, "%2F" * 85, "&#" * 128, "a/" * 128, "C:" * 128, "/~" * 128, "m/" * 12]
)
def test_the_rewrites_an_identifier_costs_are_bounded(value: str) -> None:
    """One rewrite per place a glued path may start, at most MAX_GLUED of them (a
    fourth red-team finding: ``&`` × 256 cost 256 rewrites, 0.6 s per chunk)."""
    calls: list[str] = []

    def counting(text: str) -> str:
        calls.append(text)
        return scrub(text)

    shown = scrub_identifier(value, counting)
    assert len(calls) <= 1 + MAX_GLUED
    assert shown == value or shown.startswith("id_")


@pytest.mark.parametrize(
    ("model", "shown"),
    [
        # a Hypothesis find: JSON text glued after "v2"; its folder ends in CJK letters,
        # after which the prose pass read "\\zq…b\\report.pdf" (a UNC path) on its own
        # and put "report.pdf" after the folder: "v2/zqaaaaaaaaaa数据report.pdf"
        (r"v2\\SystemRoot\\zqaaaaaaaaaa数据\\zqaaaaaaaaab\\report.pdf", "v2/report.pdf"),
        # other scripts written without spaces, an escaped letter, escaped twice
        (r"v2\\SystemRoot\\zqaaaaaaaaaaデータ\\zqaaaaaaaaab\\report.pdf", "v2/report.pdf"),
        (r"v2\\SystemRoot\\zqaaaaaaaaaa데이터\\zqaaaaaaaaab\\report.pdf", "v2/report.pdf"),
        (r"v2\\SystemRoot\\zqaaaaaaaaaaไทย\\zqaaaaaaaaab\\report.pdf", "v2/report.pdf"),
        (r"v2\\SystemRoot\\zqaaaaaaaaaa\u6570\u636e\\zqaaaaaaaaab\\report.pdf", "v2/report.pdf"),
        (r"v2\\\\SystemRoot\\\\zqaaaaaaaaaa数据\\\\zqaaaaaaaaab\\\\report.pdf", "v2/report.pdf"),
        # punctuation ends a word as well
        (r"v2\\SystemRoot\\zqaaaaaaaaaa-\\zqaaaaaaaaab\\report.pdf", "v2/report.pdf"),
        (r"v2\\SystemRoot\\zqaaaaaaaaaa(1)\\zqaaaaaaaaab\\report.pdf", "v2/report.pdf"),
        (r"v2/\\SystemRoot\\zqaaaaaaaaaa_\\zqaaaaaaaaab\\report.pdf", "v2//report.pdf"),
        # single backslashes: the inner path needs a root of its own
        (r"v2\SystemRoot\zqaaaaaaaaaa数据\Users\zqaaaaaaaaab\report.pdf", "v2/report.pdf"),
        (r"local%APPDATA%\zqaaaaaaaaaa@\Users\zqaaaaaaaaab\report.pdf", "local/report.pdf"),
        # other roots, other separators
        ("m/home/zqaaaaaaaaaa-/tmp/zqaaaaaaaaab/report.pdf", "m/report.pdf"),
        ("local/Users/zqaaaaaaaaac/zqaaaaaaaaaaデータ/tmp/zqaaaaaaaaab/r.pdf", "local/r.pdf"),
        ("org/model~/zqaaaaaaaaaa,/home/zqaaaaaaaaab/report.pdf", "org/model/report.pdf"),
        ("v2$HOME/zqaaaaaaaaaa+/tmp/zqaaaaaaaaab/report.pdf", "v2/report.pdf"),
        (r"v2\/home\/zqaaaaaaaaaa=\/home\/zqaaaaaaaaab\/report.pdf", "v2/report.pdf"),
        # the prose pass's path cut off the glued start: after the drive's colon,
        # "\\.\\Documents" (JSON text) is a share's root, which ends at the space
        (r"v2c:\\.\\Documents and Settings/zqaaaaaaaaaa/zqaaaaaaaaab/notes.md", "v2/notes.md"),
        # the prose pass read an escaped letter after the folder as a share ("u76ee")
        (r"localc:\\Program Files\\zqaaaaaaaaaa\u6570\u636e\\\u9879\u76ee", "local/项目"),
        # a Git Bash drive after "//" (here a path in prose too, after "_"): \b of
        # \build is a separator, no escape
        ("x_//cygdrive/c/users\\build\\zqaaaaaaaaaa\\zqaaaaaaaaab\\out", "x_out"),
        # a second glued path: after one already read, after a prose path
        (
            "m/tmp/zqaaaaaaaaac/x.gguf m/tmp/zqaaaaaaaaaa数据/tmp/zqaaaaaaaaab/y.gguf",
            "m/x.gguf m/y.gguf",
        ),
        ("/tmp/zqaaaaaaaaac/x.txt b/tmp/zqaaaaaaaaaa数据/tmp/zqaaaaaaaaab/y.txt", "x.txt b/y.txt"),
        # a name put in with places of its own (%E6...) is not tried: the budget of
        # places is left for the next glued path
        (
            "m%7E%2Fzqaaaaaaaaac%2F报告.pdf x&#126;zqaaaaaaaaab&#47;zqaaaaaaaaaa&#47;y.pdf",
            "m/%E6%8A%A5%E5%91%8A.pdf x/y.pdf",
        ),
    ],
)
def test_a_glued_path_is_read_as_written(model: str, shown: str) -> None:
    """A path the prose pass finds inside a glued one (after a folder that ends in a
    boundary) must not be rewritten first: its name would continue the folder."""
    assert scrub_identifier(model, scrub) == shown


#: a folder that ends in a boundary: a path may start right after it in prose
_BOUNDARY_ENDS = ("数据", "データ", "데이터", "ไทย", "-", "_", "(1)", "+", "@", ",", "=", "#")
#: a root and its separator (a folder with a boundary at its end goes below it)
_GLUED_ROOTS = (
    ("\\SystemRoot", "\\"),
    ("\\Users", "\\"),
    ("\\Device\\HarddiskVolume3", "\\"),
    ("C:\\Users", "\\"),
    ("%APPDATA%", "\\"),
    ("\\\\zqserver0001", "\\"),
    ("/home", "/"),
    ("/Users", "/"),
    ("/tmp", "/"),
    ("~", "/"),
    ("$HOME", "/"),
)


def _json(s: str) -> str:
    return json.dumps(s)[1:-1]


#: the path as written: plain, JSON text (once, twice, with ``\/``)
_SPELLINGS = [
    pytest.param(lambda s: s, id="plain"),
    pytest.param(_json, id="json"),
    pytest.param(lambda s: _json(_json(s)), id="json2"),
    pytest.param(lambda s: _json(s).replace("/", "\\/"), id="json_slash"),
]


@pytest.mark.parametrize(("root", "sep"), _GLUED_ROOTS)
@pytest.mark.parametrize("spell", _SPELLINGS)
def test_no_folder_of_a_glued_path_shows_past_a_path_inside_it(
    root: str, sep: str, spell: Callable[[str], str]
) -> None:
    """Every root, every boundary a folder may end in, every word and glue before it."""
    secrets = ("zqaaaaaaaaaa", "zqaaaaaaaaab", "zqaaaaaaaaac", "zqserver0001")
    leaks = []
    for end, inner in itertools.product(_BOUNDARY_ENDS, ["zqaaaaaaaaab", "Users", "tmp"]):
        path = sep.join(
            [root, "zqaaaaaaaaac", "zqaaaaaaaaaa" + end, inner, "zqaaaaaaaaab", "r.pdf"]
        )
        for word, glue in itertools.product(["v2", "local", "org/model", "x_"], ["", "/", "@"]):
            shown = scrub_identifier(word + glue + spell(path), scrub)
            if pathgen.leaked(shown, secrets):
                leaks.append((word + glue + spell(path), shown))
    assert not leaks, leaks[:5]


def test_the_pipelines_cache_of_scrubbed_ids_gives_what_scrubbing_gives() -> None:
    """Model ids are scrubbed once per app (PipelineSettings.identifiers): a cached
    answer is the scrubber's, the cache stays bounded and long ids are not kept."""
    from gateway.stream import pipeline as pl
    from tests import pipegen

    settings = pl.PipelineSettings()
    ids = [
        "gpt-4o",
        "/Users/alice/models/secret/llama.gguf",
        "C:\\Users\\bob\\m\\x.bin",
        "org/model:latest",
        "a" * 300 + "/home/carol/private/m.bin",
    ]
    for _ in range(2):  # the second round from the cache
        for text in ids:
            scrubber = pl.ChatPipeline(pipegen.StubLinks(), settings)
            assert scrubber.identifier(text) == scrub_identifier(text, scrubber.names)
    assert not any(n in v for v in settings.identifiers.values() for n in ("alice", "bob"))
    assert ids[-1] not in settings.identifiers  # longer than IDENTIFIER_CACHE_CHARS
    scrubber = pl.ChatPipeline(pipegen.StubLinks(), settings)
    for i in range(pl.IDENTIFIER_CACHE_SIZE * 2 + 5):
        scrubber.identifier(f"model-{i}")
    assert len(settings.identifiers) <= pl.IDENTIFIER_CACHE_SIZE
