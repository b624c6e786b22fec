"""Identifiers (model ids, ``root``, ``parent``) are not prose: a host path glued after a
word in them is a path too (``local/Users/alice/m``), and is shown as its name."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from gateway.rewrite import MAX_GLUED, MAX_IDENTIFIER, rewrite, scrub_identifier
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
