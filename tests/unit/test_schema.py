"""The schema machinery, the example file, docs/configuration.md and ``config check``'s text.

The docs and the example are checked against the schema here, so neither can drift:
every key must appear in its table with its default and its environment variable.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

from gateway.cli.config import config_warnings, effective_text, example_text
from gateway.core.errors import ConfigError
from gateway.ops import schema
from gateway.ops.config import (
    DEPRECATED_ALIASES,
    ENV_OVERRIDES,
    Config,
    config_from_dict,
    inspect_config,
    mask_database_url,
)
from gateway.ops.schema import Ctx, mask_secret, setting, to_toml_value, toml_literal

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"

ALICE_KEY = "alice-key-0123456789abcdef"
PROXY_KEY = "proxy-key-0123456789abcdef"
OWUI_KEY = "openwebui-key-0123456789"


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    return h.resolve()


def all_keys() -> list[tuple[schema.Table, schema.Key]]:
    return list(schema.iter_keys(Config))


def default_text(key: schema.Key) -> str:
    if key.required:
        return "required"
    if key.setting.default_doc:
        return key.setting.default_doc
    return f"`{toml_literal(to_toml_value(key.default))}`"


# --------------------------------------------------------------------------- the schema


def test_every_field_is_declared_and_documented() -> None:
    keys = all_keys()
    assert len(keys) >= 52
    for table, key in keys:
        assert key.setting.doc, key.dotted
        assert not key.setting.doc.endswith("."), key.dotted  # one line, reads in a comment
        if key.required:
            assert table.array, f"{key.dotted}: only array-of-tables entries have required keys"
            assert key.setting.example is not None, key.dotted


def test_env_overrides_come_from_the_schema() -> None:
    assert dict(ENV_OVERRIDES) == {
        "GATEWAY_STATE_DIR": "state_dir",
        "GATEWAY_DATABASE_URL": "database_url",
        "GATEWAY_BIND": "server.bind",
        "GATEWAY_PUBLIC_BASE_URL": "server.public_base_url",
        "GATEWAY_UPSTREAM_URL": "upstream.base_url",
        "GATEWAY_ARTIFACT_ROOTS": "artifacts.roots",
        "GATEWAY_PROXY_BIND": "proxy.bind",
        "GATEWAY_OPENWEBUI_URL": "proxy.openwebui_url",
        "GATEWAY_LOG_FORMAT": "log.format",
        "GATEWAY_LOG_LEVEL": "log.level",
    }


def test_secrets_are_hidden_from_repr() -> None:
    secret = {k.dotted for _, k in all_keys() if k.setting.secret}
    assert secret == {
        "database_url",
        "upstream.api_key",
        "auth.keys.key",
        "proxy.gateway_key",
        "proxy.client_keys",
        "proxy.openwebui_jwt_secret",
    }


def test_mask_secret() -> None:
    assert mask_secret("") == ""
    assert mask_secret("short") == "****"
    assert mask_secret("x" * 15) == "****"
    assert mask_secret("0123456789abcdefWXYZ") == "****WXYZ"


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("", ""),
        ("postgresql://gw:s3cr3t@db:5432/gateway", "postgresql://gw:****@db:5432/gateway"),
        ("postgres://gw@db/gateway", "postgres://gw@db/gateway"),
        ("postgresql://:s3cr3t@db/gateway", "postgresql://:****@db/gateway"),
        (
            "postgresql:///gateway?host=/run/pg&password=s3cr3t",
            "postgresql:///gateway?host=/run/pg&password=****",
        ),
    ],
)
def test_mask_database_url(url: str, masked: str) -> None:
    assert mask_database_url(url) == masked
    assert "s3cr3t" not in mask_database_url(url)


# --------------------------------------------------------------------------- a toy schema


@dataclass(frozen=True, slots=True, kw_only=True)
class _Item:
    """``[[toy.items]]``: one item."""

    name: str = setting(doc="its name", unique=True, example="a")
    weight: float = setting(1.0, "its weight", allow_zero=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Section:
    """``[toy]``: a section."""

    colour: Literal["red", "blue", "green"] = setting("red", "a colour")
    count: int = setting(3, "how many")
    tags: tuple[str, ...] = setting((), "tags", unique=True, min_items=0)
    where: Path = setting(Path("~/toy"), "a path", env="TOY_WHERE")
    items: tuple[_Item, ...] = setting((), "items")


@dataclass(frozen=True, slots=True, kw_only=True)
class _Root:
    """The toy root."""

    toy: _Section


def load_toy(data: dict[str, Any], env: dict[str, str] | None = None) -> _Root:
    root: _Root = schema.load(_Root, data, env or {}, Ctx())
    return root


def test_toy_schema_defaults_and_conversion(home: Path) -> None:
    root = load_toy({})
    assert root.toy.where == home / "toy"
    assert root.toy.colour == "red" and root.toy.count == 3 and root.toy.items == ()
    root = load_toy({"toy": {"items": [{"name": "a"}, {"name": "b", "weight": 0}]}})
    assert root.toy.items == (_Item(name="a", weight=1.0), _Item(name="b", weight=0.0))
    assert load_toy({}, {"TOY_WHERE": "~/elsewhere"}).toy.where == home / "elsewhere"


@pytest.mark.parametrize(
    ("data", "key", "words"),
    [
        ({"toy": {"colour": "pink"}}, "toy.colour", "one of 'red', 'blue', 'green', not 'pink'"),
        ({"toy": {"count": 2.5}}, "toy.count", "expected an integer, got a float"),
        ({"toy": {"count": 0}}, "toy.count", "must be positive"),
        ({"toy": {"tags": ["x", "x"]}}, "toy.tags[1]", "duplicates toy.tags[0]"),
        ({"toy": {"items": [{"name": "a"}, {"name": "a"}]}}, "toy.items[1].name", "duplicates"),
        ({"toy": {"items": [{"weight": 1}]}}, "toy.items[0].name", "is required"),
        ({"toy": {"items": [{"name": "a", "weight": -1}]}}, "toy.items[0].weight", "negative"),
        ({"toy": {"items": [{"name": "a", "wieght": 1}]}}, "toy.items[0].wieght", "did you mean"),
        ({"colour": "red"}, "colour", "under [toy]"),
    ],
)
def test_toy_schema_refusals(data: dict[str, Any], key: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_toy(data)
    assert info.value.key == key
    assert words in str(info.value)


def test_a_field_without_setting_is_a_schema_bug() -> None:
    @dataclass(frozen=True)
    class Bad:
        plain: int = 3

    with pytest.raises(TypeError, match="setting"):
        schema.load(Bad, {}, {}, Ctx())


def test_describe_type() -> None:
    assert schema.describe_type(int) == "integer"
    assert schema.describe_type(tuple[Path, ...]) == "array of paths"
    assert schema.describe_type(Literal["a", "b"]) == '"a" | "b"'


def test_toml_literal_round_trips() -> None:
    values = ["plain", 'q"uote\\back', "tab\tnl\n\x7f", "naïve", 3, 2.5, True, ["a", 1]]
    for value in values:
        assert tomllib.loads(f"v = {toml_literal(value)}")["v"] == value


# --------------------------------------------------------------------------- the example


def test_example_loads_as_the_defaults() -> None:
    data = tomllib.loads(example_text())
    assert config_from_dict(data) == config_from_dict({})


def test_example_shows_every_key_with_its_default() -> None:
    text = example_text()
    for table, key in all_keys():
        block = _example_block(text, table)
        line = f"{key.name} = {toml_literal(_example_value(key))}"
        assert re.search(rf"^(# )*{re.escape(line)}$", block, re.M), (key.dotted, block)
        if key.setting.env:
            assert key.setting.env in block, key.dotted
    for old in DEPRECATED_ALIASES:
        section, _, name = old.rpartition(".")
        assert f"# {name}: deprecated" in _example_block(text, _table(section)), old


def test_example_arrays_of_tables_are_commented_out() -> None:
    text = example_text()
    assert "# [[auth.keys]]" in text and "# [[artifacts.mounts]]" in text
    assert "\n[[" not in text
    # uncommented, the first array entries make a valid, loadable config
    active = "\n".join(
        line[2:] if line.startswith("# [[") or re.match(r"# [a-z_]+ = ", line) else line
        for line in text.splitlines()
    )
    cfg = config_from_dict(tomllib.loads(active))
    assert cfg.auth.keys[0].principal == "alice"
    assert cfg.artifacts.mounts[0].agent_prefix == "/workspace"


def _example_value(key: schema.Key) -> Any:
    return key.setting.example if key.required else to_toml_value(key.default)


def _table(name: str) -> schema.Table:
    return next(t for t in schema.tables(Config) if t.name == name)


def _example_block(text: str, table: schema.Table) -> str:
    """The lines of the example that belong to ``table``."""
    header = f"# [[{table.name}]]" if table.array else f"[{table.name}]"
    if not table.name:
        return text.split("\n[", 1)[0]
    start = text.index("\n" + header) + 1
    nxt = re.search(r"^(\[|# \[\[)", text[start + len(header) :], re.M)
    return text[start : start + len(header) + (nxt.start() if nxt else len(text))]


# --------------------------------------------------------------------------- the docs


def _doc_section(doc: str, table: schema.Table) -> str:
    title = (
        "### Top level"
        if not table.name
        else (f"### `[[{table.name}]]`" if table.array else f"### `[{table.name}]`")
    )
    assert title in doc, f"docs/configuration.md has no section {title!r}"
    start = doc.index(title) + len(title)
    end = doc.find("\n##", start)
    return doc[start : end if end != -1 else len(doc)]


def test_docs_list_every_key_with_its_default_and_variable() -> None:
    doc = DOC.read_text(encoding="utf-8")
    for table, key in all_keys():
        section = _doc_section(doc, table)
        rows = [r for r in section.splitlines() if r.startswith(f"| `{key.name}` |")]
        assert len(rows) == 1, f"docs: {key.dotted} has {len(rows)} rows in its table"
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", rows[0].strip().strip("|"))]
        assert cells[2] == default_text(key), (key.dotted, cells[2])
        assert cells[3] == (f"`{key.setting.env}`" if key.setting.env else ""), key.dotted
        assert cells[4], key.dotted
    for var, dotted in ENV_OVERRIDES.items():
        assert f"| `{var}` | `{dotted}` |" in doc, var
    for old, new in DEPRECATED_ALIASES.items():
        section, _, name = old.rpartition(".")
        assert f"| `{name}` |" in _doc_section(doc, _table(section)) and new in doc


def test_docs_and_schema_have_the_same_tables() -> None:
    doc = DOC.read_text(encoding="utf-8")
    titles = set(re.findall(r"^### `(\[\[?[a-z_.]+\]\]?)`", doc, re.M))
    names = {f"[[{t.name}]]" if t.array else f"[{t.name}]" for t in schema.tables(Config) if t.name}
    assert titles == names


# --------------------------------------------------------------------------- config check


def full(tmp_path: Path) -> dict[str, Any]:
    (tmp_path / "art").mkdir(exist_ok=True)
    return {
        "database_url": "postgresql://gw:pg-s3cr3t-pw@db.internal/gateway",
        "server": {"bind": "0.0.0.0:8642"},
        "upstream": {"api_key": "sk-upstream-0123456789"},
        "artifacts": {"roots": [], "shared_roots": [str(tmp_path / "art")]},
        "auth": {
            "keys": [
                {"key": ALICE_KEY, "principal": "alice"},
                {"key": PROXY_KEY, "principal": "owui", "role": "proxy"},
            ]
        },
        "proxy": {
            "gateway_key": PROXY_KEY,
            "client_keys": [OWUI_KEY],
            "openwebui_jwt_secret": "jwt-secret",
            "trust_user_headers": True,
        },
        "limits": {"run_retention_seconds": 60},
    }


def test_effective_text_masks_every_secret(tmp_path: Path) -> None:
    loaded = inspect_config(full(tmp_path), {"GATEWAY_UPSTREAM_URL": "http://up:9/v1"})
    text = effective_text(loaded)
    for secret in (ALICE_KEY, PROXY_KEY, OWUI_KEY, "jwt-secret", "sk-upstream", "pg-s3cr3t"):
        assert secret not in text
    assert 'database_url = "postgresql://gw:****@db.internal/gateway"' in text
    assert f'key = "****{ALICE_KEY[-4:]}"' in text
    assert 'openwebui_jwt_secret = "****"' in text  # shorter than 16: nothing shown
    assert 'base_url = "http://up:9/v1"  # from $GATEWAY_UPSTREAM_URL' in text
    assert "runs_seconds = 60.0  # written as limits.run_retention_seconds (deprecated)" in text
    direct = effective_text(inspect_config({"retention": {"runs_seconds": 60}}))
    assert "runs_seconds = 60.0\n" in direct
    # valid TOML with the same shape (the masked keys are too short to load back)
    assert tomllib.loads(text)["auth"]["keys"][1]["role"] == "proxy"


def test_warnings(tmp_path: Path) -> None:
    warnings = config_warnings(inspect_config(full(tmp_path)))
    text = "\n".join(warnings)
    assert "refuse every request" not in text
    assert "public_base_url points at loopback" in text
    assert "trust_user_headers is true although openwebui_jwt_secret is set" in text
    assert "limits.run_retention_seconds is deprecated" in text
    bare = "\n".join(
        config_warnings(inspect_config({"artifacts": {"roots": [str(tmp_path / "no")]}}))
    )
    assert "no [[auth.keys]]" in bare and "the API server will refuse every request" in bare
    # a config without [proxy] is for `gateway run` alone: nothing about the proxy
    assert "proxy." not in bare
    assert "is not a directory" in bare
    with_proxy = {"artifacts": {"roots": [str(tmp_path)]}, "proxy": {"bind": "127.0.0.1:1"}}
    proxy_text = "\n".join(config_warnings(inspect_config(with_proxy)))
    assert "proxy.client_keys is empty" in proxy_text
    assert "proxy.gateway_key is empty" in proxy_text
    user_key = full(tmp_path) | {"proxy": {"gateway_key": ALICE_KEY, "client_keys": [OWUI_KEY]}}
    assert "role = \"user\" key of 'alice'" in "\n".join(config_warnings(inspect_config(user_key)))
    for warning in warnings:
        assert ALICE_KEY not in warning and PROXY_KEY not in warning
