"""Tests for gateway.ops.config: defaults, file + env precedence, and every refusal."""

from __future__ import annotations

import copy
import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

from gateway.core.errors import ConfigError
from gateway.ops.config import (
    DEFAULT_DENIED,
    ENV_OVERRIDES,
    Config,
    KeyEntry,
    Mount,
    config_from_dict,
    inspect_config,
    load,
    load_config,
    parse_bind,
)

# Copied verbatim from DESIGN.md, section "Configuration".
DESIGN_EXAMPLE = """\
state_dir = "~/.local/state/artifact-gateway"   # sqlite db, signing secret (0600, made on first run)

[server]
bind = "127.0.0.1:8642"
public_base_url = "http://127.0.0.1:8642"      # absolute origin used in every minted link

[upstream]
base_url = "http://127.0.0.1:9000/v1"          # OpenAI-compatible; /chat/completions is called
api_key = ""                                   # optional bearer sent upstream

[artifacts]
roots = ["~/.agent/artifacts"]                 # only files under these roots get links
default_link_mode = "private"                  # private | public
public_ttl_seconds = 604800
max_bytes = 104857600

[[artifacts.mounts]]                           # the agent sees /workspace, the host has the files elsewhere
agent_prefix = "/workspace"
host_dir = "/srv/agent/workspace"

[[auth.keys]]                                  # bearer keys accepted by the API server
key = "change-me-alice-0123456789"
principal = "alice"
role = "user"                                  # user | proxy (proxy may assert an owner)

[proxy]
bind = "127.0.0.1:8653"
gateway_url = "http://127.0.0.1:8642"
gateway_key = "change-me-proxy-0123456789"     # a role=proxy key of the gateway
client_keys = ["change-me-openwebui-0123456789"]  # keys Open WebUI uses to call the proxy
openwebui_jwt_secret = ""                      # verifies X-OpenWebUI-User-Jwt when set
"""

ALICE_KEY = "alice-key-0123456789abcdef"
BOB_KEY = "bob-key-0123456789abcdef"
PROXY_KEY = "proxy-key-0123456789abcdef"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake home directory, so '~' expands somewhere predictable."""
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    for var in [*ENV_OVERRIDES, "GATEWAY_CONFIG"]:
        monkeypatch.delenv(var, raising=False)
    return h.resolve()


def valid_data(tmp_path: Path) -> dict[str, Any]:
    """A complete, valid configuration touching every section."""
    return {
        "state_dir": str(tmp_path / "state"),
        "server": {"bind": "127.0.0.1:9100", "public_base_url": "https://gw.example.com"},
        "upstream": {"base_url": "http://127.0.0.1:9200/v1", "api_key": "sk-up"},
        "artifacts": {
            "roots": [str(tmp_path / "art" / "{principal}")],
            "default_link_mode": "public",
            "public_ttl_seconds": 60,
            "max_bytes": 1000,
            "mounts": [{"agent_prefix": "/workspace", "host_dir": str(tmp_path / "ws")}],
        },
        "auth": {
            "keys": [
                {"key": ALICE_KEY, "principal": "alice", "role": "user"},
                {"key": PROXY_KEY, "principal": "proxy", "role": "proxy"},
            ]
        },
        "proxy": {
            "bind": "127.0.0.1:9300",
            "gateway_url": "http://127.0.0.1:9100",
            "gateway_key": PROXY_KEY,
            "client_keys": ["openwebui-key-0123456789"],
            "openwebui_jwt_secret": "s3cret",
            "trust_user_headers": False,
        },
        "limits": {"max_path_chars": 100, "max_event_bytes": 2000},
    }


def write_toml(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- defaults


def test_defaults(home: Path) -> None:
    cfg = load_config(env={})
    assert cfg == config_from_dict({})
    assert cfg.state_dir == home / ".local/state/artifact-gateway"
    assert cfg.server.bind == "127.0.0.1:8642"
    assert (cfg.server.host, cfg.server.port) == ("127.0.0.1", 8642)
    assert cfg.server.public_base_url == "http://127.0.0.1:8642"
    assert cfg.server.keepalive_seconds == 15.0
    assert cfg.server.drain_timeout_seconds == 10.0
    assert cfg.server.max_body_bytes == 4 * 1024 * 1024
    assert cfg.server.write_timeout_seconds == 10.0
    assert cfg.upstream.base_url == "http://127.0.0.1:9000/v1"
    assert cfg.upstream.api_key == ""
    assert cfg.upstream.connect_timeout_seconds == 10.0
    assert cfg.upstream.idle_timeout_seconds == 300.0
    assert cfg.upstream.models_cache_seconds == 60.0
    assert cfg.artifacts.roots == (home / ".agent/artifacts/{principal}",)
    assert cfg.artifacts.default_link_mode == "private"
    assert cfg.artifacts.public_ttl_seconds == 604800
    assert cfg.artifacts.max_bytes == 104857600
    assert cfg.artifacts.mounts == ()
    assert cfg.artifacts.denied == DEFAULT_DENIED
    assert {".ssh", ".gnupg", ".aws", ".config/gcloud", ".netrc", ".env"} <= set(DEFAULT_DENIED)
    assert cfg.auth.keys == ()
    assert cfg.proxy.bind == "127.0.0.1:8653"
    assert (cfg.proxy.host, cfg.proxy.port) == ("127.0.0.1", 8653)
    assert cfg.proxy.gateway_url == "http://127.0.0.1:8642"
    assert cfg.proxy.gateway_key == ""
    assert cfg.proxy.client_keys == ()
    assert cfg.proxy.openwebui_jwt_secret == ""
    assert cfg.proxy.trust_user_headers is True
    assert cfg.limits.max_path_chars == 4096
    assert cfg.limits.max_event_bytes == 1024 * 1024
    assert cfg.limits.run_log_max_events == 10000
    # keys added after DESIGN.md's list
    assert cfg.database_url == ""
    assert cfg.server.header_timeout_seconds == 10.0
    assert cfg.server.max_connections == 16384
    assert cfg.server.listen_backlog == 4096
    assert cfg.upstream.first_byte_timeout_seconds == 120.0
    assert cfg.artifacts.allow_hard_links is False
    assert cfg.proxy.openwebui_url == ""
    assert cfg.proxy.session_cache_seconds == 60.0
    assert cfg.proxy.native_delivery is True
    assert cfg.output.extra_chunk_keys == ()
    assert cfg.output.logprobs is False
    assert cfg.limits.max_json_depth == 64
    assert cfg.retention.runs_seconds == 86400.0
    assert cfg.retention.responses_seconds == 2592000.0
    assert cfg.retention.reaper_interval_seconds == 60.0
    assert cfg.database.pool_size == 8
    assert cfg.database.connect_timeout_seconds == 5.0
    assert cfg.runs.lease_seconds == 15.0
    assert cfg.log.format == "text"
    assert cfg.log.level == "info"


def test_defaults_use_os_environ_when_env_is_none(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATEWAY_BIND", "127.0.0.1:7000")
    assert load_config().server.port == 7000
    # config_from_dict is pure: env=None means no overrides at all.
    assert config_from_dict({}).server.port == 8642


def test_config_is_frozen_and_repr_hides_secrets(home: Path, tmp_path: Path) -> None:
    cfg = config_from_dict(valid_data(tmp_path))
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.server.bind = "0.0.0.0:1"  # type: ignore[misc]
    text = repr(cfg)
    for secret in (ALICE_KEY, PROXY_KEY, "openwebui-key-0123456789", "s3cret", "sk-up"):
        assert secret not in text


def test_loading_creates_nothing_on_disk(home: Path, tmp_path: Path) -> None:
    config_from_dict(valid_data(tmp_path))
    assert not (tmp_path / "state").exists()
    assert not (tmp_path / "art").exists()


# --------------------------------------------------------------------------- files


def test_file_loading(home: Path, tmp_path: Path) -> None:
    path = write_toml(
        tmp_path / "gw.toml",
        f"""
state_dir = "{tmp_path / "state"}"

[server]
bind = "0.0.0.0:9000"
public_base_url = "https://gw.example.com/prefix/"
keepalive_seconds = 5
max_body_bytes = 1024

[upstream]
base_url = "https://llm.example.com/v1/"
api_key = "sk-upstream"
idle_timeout_seconds = 12.5
models_cache_seconds = 0

[artifacts]
roots = ["~/a/{{principal}}"]
shared_roots = ["{tmp_path / "b"}"]
default_link_mode = "public"
public_ttl_seconds = 3600
max_bytes = 10
denied = [".ssh", "*.pem"]

[[artifacts.mounts]]
agent_prefix = "/workspace/"
host_dir = "~/ws"

[[artifacts.mounts]]
agent_prefix = 'C:\\Users\\bob\\'
host_dir = "{tmp_path / "bob"}"

[[auth.keys]]
key = "{ALICE_KEY}"
principal = "alice@example.com"

[[auth.keys]]
key = "{PROXY_KEY}"
principal = "proxy:openwebui"
role = "proxy"

[proxy]
trust_user_headers = false

[limits]
run_log_max_events = 5
run_retention_seconds = 1.5
""",
    )
    cfg = load_config(path, env={})
    assert cfg.state_dir == (tmp_path / "state").resolve()
    assert cfg.server.bind == "0.0.0.0:9000"
    assert cfg.server.public_base_url == "https://gw.example.com/prefix"
    assert cfg.server.keepalive_seconds == 5.0
    assert isinstance(cfg.server.keepalive_seconds, float)
    assert cfg.server.max_body_bytes == 1024
    assert cfg.upstream.base_url == "https://llm.example.com/v1"
    assert cfg.upstream.api_key == "sk-upstream"
    assert cfg.upstream.idle_timeout_seconds == 12.5
    assert cfg.upstream.models_cache_seconds == 0.0
    assert cfg.artifacts.roots == (home / "a" / "{principal}",)
    assert cfg.artifacts.shared_roots == ((tmp_path / "b").resolve(),)
    assert cfg.artifacts.default_link_mode == "public"
    assert cfg.artifacts.public_ttl_seconds == 3600
    assert cfg.artifacts.max_bytes == 10
    assert cfg.artifacts.denied == (".ssh", "*.pem")
    assert cfg.artifacts.mounts == (
        Mount(agent_prefix="/workspace", host_dir=home / "ws"),
        Mount(agent_prefix="C:\\Users\\bob", host_dir=(tmp_path / "bob").resolve()),
    )
    assert cfg.auth.keys == (
        KeyEntry(key=ALICE_KEY, principal="alice@example.com", role="user"),
        KeyEntry(key=PROXY_KEY, principal="proxy:openwebui", role="proxy"),
    )
    assert cfg.proxy.trust_user_headers is False
    assert cfg.proxy.bind == "127.0.0.1:8653"  # untouched default
    assert cfg.limits.run_log_max_events == 5
    assert cfg.retention.runs_seconds == 1.5  # the deprecated alias still works
    assert cfg.limits.max_path_chars == 4096


def test_design_example_loads(home: Path, tmp_path: Path) -> None:
    cfg = load_config(write_toml(tmp_path / "design.toml", DESIGN_EXAMPLE), env={})
    assert cfg.state_dir == home / ".local/state/artifact-gateway"
    assert cfg.server.bind == "127.0.0.1:8642"
    assert cfg.artifacts.roots == (home / ".agent/artifacts",)  # one user: its own
    assert cfg.artifacts.mounts == (
        Mount(agent_prefix="/workspace", host_dir=Path("/srv/agent/workspace").resolve()),
    )
    assert cfg.auth.keys == (
        KeyEntry(key="change-me-alice-0123456789", principal="alice", role="user"),
    )
    assert cfg.proxy.gateway_key == "change-me-proxy-0123456789"
    assert cfg.proxy.client_keys == ("change-me-openwebui-0123456789",)
    assert cfg.proxy.openwebui_jwt_secret == ""


def test_gateway_config_env_names_the_file(home: Path, tmp_path: Path) -> None:
    path = write_toml(tmp_path / "a.toml", '[server]\nbind = "127.0.0.1:1111"\n')
    other = write_toml(tmp_path / "b.toml", '[server]\nbind = "127.0.0.1:2222"\n')
    assert load_config(env={"GATEWAY_CONFIG": str(path)}).server.port == 1111
    # An explicit path beats $GATEWAY_CONFIG.
    assert load_config(other, env={"GATEWAY_CONFIG": str(path)}).server.port == 2222
    # An empty $GATEWAY_CONFIG counts as unset.
    assert load_config(env={"GATEWAY_CONFIG": ""}).server.port == 8642


def test_config_path_expands_tilde(home: Path) -> None:
    write_toml(home / "gw.toml", '[server]\nbind = "127.0.0.1:3333"\n')
    assert load_config("~/gw.toml", env={}).server.port == 3333


def test_missing_file(home: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "nope.toml", env={})
    assert info.value.key == "<file>"
    assert "not found" in str(info.value)
    with pytest.raises(ConfigError) as info:
        load_config(env={"GATEWAY_CONFIG": str(tmp_path / "nope.toml")})
    assert info.value.key == "<file>"


def test_directory_as_file(home: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, env={})
    assert info.value.key == "<file>"


def test_invalid_toml_reports_line_and_column(home: Path, tmp_path: Path) -> None:
    path = write_toml(tmp_path / "bad.toml", '[server]\nbind = "127.0.0.1:1\n')
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert info.value.key == "<file>"
    assert "line 2" in str(info.value)
    assert "column" in str(info.value)


def test_non_utf8_file(home: Path, tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'[upstream]\napi_key = "\xe9"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert info.value.key == "<file>"


# --------------------------------------------------------------------------- env


def test_env_overrides_beat_the_file(home: Path, tmp_path: Path) -> None:
    path = write_toml(
        tmp_path / "gw.toml",
        f"""
state_dir = "{tmp_path / "file-state"}"
[server]
bind = "127.0.0.1:1000"
public_base_url = "http://file.example.com"
[upstream]
base_url = "http://file.example.com/v1"
[artifacts]
roots = ["{tmp_path / "file-root"}"]
[proxy]
bind = "127.0.0.1:1001"
""",
    )
    env = {
        "GATEWAY_STATE_DIR": "~/env-state",
        "GATEWAY_BIND": "[::1]:2000",
        "GATEWAY_PUBLIC_BASE_URL": "https://env.example.com/",
        "GATEWAY_UPSTREAM_URL": "http://env.example.com:9000/v1",
        "GATEWAY_ARTIFACT_ROOTS": os.pathsep.join(
            [str(tmp_path / "r1"), "", "~/r2"]  # empty parts are skipped
        ),
        "GATEWAY_PROXY_BIND": "0.0.0.0:2001",
        "GATEWAY_DATABASE_URL": "postgresql://gw:pw@db.internal:5432/gateway",
        "GATEWAY_OPENWEBUI_URL": "https://chat.example.com/",
        "GATEWAY_LOG_FORMAT": "json",
        "GATEWAY_LOG_LEVEL": "debug",
    }
    assert set(env) == set(ENV_OVERRIDES)
    cfg = load_config(path, env=env)
    assert cfg.database_url == "postgresql://gw:pw@db.internal:5432/gateway"
    assert cfg.proxy.openwebui_url == "https://chat.example.com"
    assert cfg.log.format == "json"
    assert cfg.log.level == "debug"
    assert cfg.state_dir == home / "env-state"
    assert cfg.server.bind == "[::1]:2000"
    assert cfg.server.public_base_url == "https://env.example.com"
    assert cfg.upstream.base_url == "http://env.example.com:9000/v1"
    assert cfg.artifacts.roots == ((tmp_path / "r1").resolve(), home / "r2")
    assert cfg.proxy.bind == "0.0.0.0:2001"
    # Each variable alone overrides just its key.
    for var, dotted in ENV_OVERRIDES.items():
        one = load_config(path, env={var: env[var]})
        base = load_config(path, env={})
        section, _, key = dotted.rpartition(".")
        assert (getattr(getattr(one, section), key) if section else getattr(one, key)) == (
            getattr(getattr(cfg, section), key) if section else getattr(cfg, key)
        )
        assert one != base


def test_empty_env_var_counts_as_unset(home: Path) -> None:
    cfg = config_from_dict({}, env={var: "" for var in ENV_OVERRIDES})
    assert cfg == config_from_dict({})


def test_env_override_wins_over_a_bad_file_value(home: Path) -> None:
    cfg = config_from_dict({"server": {"bind": "nonsense"}}, env={"GATEWAY_BIND": "[::]:0"})
    assert (cfg.server.host, cfg.server.port) == ("::", 0)


@pytest.mark.parametrize(
    ("var", "value", "key"),
    [
        ("GATEWAY_BIND", "localhost", "server.bind"),
        ("GATEWAY_PUBLIC_BASE_URL", "gw.example.com", "server.public_base_url"),
        ("GATEWAY_UPSTREAM_URL", "ftp://x/v1", "upstream.base_url"),
        ("GATEWAY_PROXY_BIND", "127.0.0.1:99999", "proxy.bind"),
        ("GATEWAY_STATE_DIR", "~no-such-user-xyzzy/state", "state_dir"),
        ("GATEWAY_ARTIFACT_ROOTS", "~no-such-user-xyzzy/a", "artifacts.roots[0]"),
        ("GATEWAY_ARTIFACT_ROOTS", os.pathsep, "artifacts.roots"),
        ("GATEWAY_DATABASE_URL", "mysql://u:pw@h/db", "database_url"),
        ("GATEWAY_OPENWEBUI_URL", "chat.example.com", "proxy.openwebui_url"),
        ("GATEWAY_LOG_FORMAT", "xml", "log.format"),
        ("GATEWAY_LOG_LEVEL", "loud", "log.level"),
    ],
)
def test_bad_env_override_names_the_variable(home: Path, var: str, value: str, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(env={var: value})
    assert info.value.key == key
    assert var in str(info.value)


def test_file_error_does_not_name_an_env_var(home: Path) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_dict({"server": {"bind": "nope"}}, env={"GATEWAY_PROXY_BIND": "[::1]:1"})
    assert info.value.key == "server.bind"
    assert "GATEWAY" not in str(info.value)


# --------------------------------------------------------------------------- bind


@pytest.mark.parametrize(
    ("bind", "expected"),
    [
        ("127.0.0.1:8642", ("127.0.0.1", 8642)),
        ("[::1]:8642", ("::1", 8642)),
        ("[::]:0", ("::", 0)),
        ("localhost:65535", ("localhost", 65535)),
        ("0.0.0.0:0", ("0.0.0.0", 0)),
    ],
)
def test_parse_bind(bind: str, expected: tuple[str, int]) -> None:
    assert parse_bind(bind) == expected


@pytest.mark.parametrize(
    "bind",
    [
        "127.0.0.1",
        "127.0.0.1:",
        ":8642",
        "127.0.0.1:65536",
        "127.0.0.1:-1",
        "127.0.0.1:+1",
        "127.0.0.1:80a",
        "127.0.0.1:" + "0" * 5000,
        "::1:8642",
        "[::1]8642",
        "[::1:8642",
        "[not-v6]:8642",
        "bad host:80",
        "",
    ],
)
def test_parse_bind_refuses(bind: str) -> None:
    with pytest.raises(ValueError):
        parse_bind(bind)


def test_ipv6_bind_in_config(home: Path) -> None:
    cfg = config_from_dict({"server": {"bind": "[::1]:8642"}, "proxy": {"bind": "[::]:8653"}})
    assert cfg.server.bind == "[::1]:8642"
    assert (cfg.server.host, cfg.server.port) == ("::1", 8642)
    assert (cfg.proxy.host, cfg.proxy.port) == ("::", 8653)


# --------------------------------------------------------------------------- tilde


def test_tilde_expansion(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = config_from_dict(
        {
            "state_dir": "~/st",
            "artifacts": {
                "roots": ["~/out", "~"],
                "mounts": [{"agent_prefix": "/w", "host_dir": "~/w"}],
            },
        }
    )
    assert cfg.state_dir == home / "st"
    assert cfg.artifacts.roots == (home / "out", home)
    assert cfg.artifacts.mounts[0].host_dir == home / "w"
    assert all(p.is_absolute() for p in (cfg.state_dir, *cfg.artifacts.roots))


def test_relative_paths_are_made_absolute(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = config_from_dict({"state_dir": "rel/state", "artifacts": {"roots": ["out"]}})
    assert cfg.state_dir == (tmp_path / "rel/state").resolve()
    assert cfg.artifacts.roots == ((tmp_path / "out").resolve(),)


def test_symlinked_root_is_resolved(home: Path, tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    cfg = config_from_dict({"artifacts": {"roots": [str(tmp_path / "link")]}})
    assert cfg.artifacts.roots == (real.resolve(),)


@pytest.mark.parametrize(
    ("prefix", "normalised"),
    [
        ("/workspace", "/workspace"),
        ("/workspace//", "/workspace"),
        ("/", "/"),
        ("C:\\build", "C:\\build"),
        ("c:/build/", "c:/build"),
        ("D:\\", "D:\\"),
    ],
)
def test_mount_prefix_forms(home: Path, tmp_path: Path, prefix: str, normalised: str) -> None:
    cfg = config_from_dict(
        {"artifacts": {"mounts": [{"agent_prefix": prefix, "host_dir": str(tmp_path)}]}}
    )
    assert cfg.artifacts.mounts[0].agent_prefix == normalised


# --------------------------------------------------------------------------- refusals


def merged(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``patch`` applied; a value of ``...`` deletes the key."""
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        elif value is ...:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def keys(*entries: tuple[str, str, str]) -> dict[str, Any]:
    return {"auth": {"keys": [{"key": k, "principal": p, "role": r} for k, p, r in entries]}}


BAD_CASES: list[tuple[str, dict[str, Any], str]] = [
    # unknown keys
    ("unknown top-level section", {"sever": {}}, "sever"),
    ("unknown top-level key", {"statedir": "/x"}, "statedir"),
    ("unknown section key", {"server": {"bnd": "127.0.0.1:1"}}, "server.bnd"),
    ("unknown key, far from all", {"limits": {"zzz": 1}}, "limits.zzz"),
    ("unknown mount key", {"artifacts": {"mounts": [{"agent_prefix": "/w", "host_dir": "/w", "hostdir": "/x"}]}}, "artifacts.mounts[0].hostdir"),
    ("unknown auth key field", {"auth": {"keys": [{"key": ALICE_KEY, "principal": "a", "rol": "user"}]}}, "auth.keys[0].rol"),
    # wrong types
    ("section not a table", {"server": 5}, "server"),
    ("auth not a table", {"auth": []}, "auth"),
    ("state_dir not a string", {"state_dir": 5}, "state_dir"),
    ("bool is not int", {"server": {"max_body_bytes": True}}, "server.max_body_bytes"),
    ("float is not int", {"artifacts": {"max_bytes": 1.5}}, "artifacts.max_bytes"),
    ("bool is not a number", {"server": {"keepalive_seconds": False}}, "server.keepalive_seconds"),
    ("string is not a number", {"upstream": {"idle_timeout_seconds": "5"}}, "upstream.idle_timeout_seconds"),
    ("string is not a bool", {"proxy": {"trust_user_headers": "yes"}}, "proxy.trust_user_headers"),
    ("int is not a bool", {"proxy": {"trust_user_headers": 1}}, "proxy.trust_user_headers"),
    ("bind not a string", {"server": {"bind": 8642}}, "server.bind"),
    ("api_key not a string", {"upstream": {"api_key": 1}}, "upstream.api_key"),
    ("roots not an array", {"artifacts": {"roots": "/x"}}, "artifacts.roots"),
    ("root not a string", {"artifacts": {"roots": ["/x", 1]}}, "artifacts.roots[1]"),
    ("root empty", {"artifacts": {"roots": [""]}}, "artifacts.roots[0]"),
    ("roots empty", {"artifacts": {"roots": []}}, "artifacts.roots"),
    ("denied not strings", {"artifacts": {"denied": [True]}}, "artifacts.denied[0]"),
    ("mounts not an array", {"artifacts": {"mounts": {"agent_prefix": "/w"}}}, "artifacts.mounts"),
    ("mount not a table", {"artifacts": {"mounts": ["/w"]}}, "artifacts.mounts[0]"),
    ("auth.keys not an array", {"auth": {"keys": {"key": ALICE_KEY}}}, "auth.keys"),
    ("auth entry not a table", {"auth": {"keys": [ALICE_KEY]}}, "auth.keys[0]"),
    ("client_keys not an array", {"proxy": {"client_keys": "k" * 20}}, "proxy.client_keys"),
    # binds
    ("bind without port", {"server": {"bind": "127.0.0.1"}}, "server.bind"),
    ("bind port too big", {"server": {"bind": "127.0.0.1:65536"}}, "server.bind"),
    ("bind port negative", {"server": {"bind": "127.0.0.1:-1"}}, "server.bind"),
    ("bind bare ipv6", {"server": {"bind": "::1:8642"}}, "server.bind"),
    ("proxy bind bad", {"proxy": {"bind": "localhost"}}, "proxy.bind"),
    # URLs
    ("url no scheme", {"server": {"public_base_url": "gw.example.com"}}, "server.public_base_url"),
    ("url host:port only", {"server": {"public_base_url": "127.0.0.1:8642"}}, "server.public_base_url"),
    ("url ftp", {"upstream": {"base_url": "ftp://x/v1"}}, "upstream.base_url"),
    ("url no host", {"upstream": {"base_url": "http:///v1"}}, "upstream.base_url"),
    ("url empty", {"proxy": {"gateway_url": ""}}, "proxy.gateway_url"),
    ("url bad port", {"proxy": {"gateway_url": "http://h:99999"}}, "proxy.gateway_url"),
    ("url credentials", {"server": {"public_base_url": "https://u:p@gw.example.com"}}, "server.public_base_url"),
    ("url query", {"server": {"public_base_url": "https://gw.example.com/?a=1"}}, "server.public_base_url"),
    ("url fragment", {"server": {"public_base_url": "https://gw.example.com/#x"}}, "server.public_base_url"),
    ("url with space", {"upstream": {"base_url": "http://h/ v1"}}, "upstream.base_url"),
    # link mode
    ("link mode unknown", {"artifacts": {"default_link_mode": "shared"}}, "artifacts.default_link_mode"),
    ("link mode case", {"artifacts": {"default_link_mode": "Private"}}, "artifacts.default_link_mode"),
    # non-positive numbers
    ("ttl zero", {"artifacts": {"public_ttl_seconds": 0}}, "artifacts.public_ttl_seconds"),
    ("ttl negative", {"artifacts": {"public_ttl_seconds": -5}}, "artifacts.public_ttl_seconds"),
    ("max_bytes zero", {"artifacts": {"max_bytes": 0}}, "artifacts.max_bytes"),
    ("max_path_chars zero", {"limits": {"max_path_chars": 0}}, "limits.max_path_chars"),
    ("max_event_bytes negative", {"limits": {"max_event_bytes": -1}}, "limits.max_event_bytes"),
    ("retention zero", {"limits": {"run_retention_seconds": 0}}, "limits.run_retention_seconds"),
    ("run log zero", {"limits": {"run_log_max_events": 0}}, "limits.run_log_max_events"),
    ("body zero", {"server": {"max_body_bytes": 0}}, "server.max_body_bytes"),
    ("keepalive zero", {"server": {"keepalive_seconds": 0}}, "server.keepalive_seconds"),
    ("drain negative", {"server": {"drain_timeout_seconds": -1.0}}, "server.drain_timeout_seconds"),
    ("write timeout nan", {"server": {"write_timeout_seconds": float("nan")}}, "server.write_timeout_seconds"),
    ("connect timeout inf", {"upstream": {"connect_timeout_seconds": float("inf")}}, "upstream.connect_timeout_seconds"),
    ("models cache negative", {"upstream": {"models_cache_seconds": -1}}, "upstream.models_cache_seconds"),
    # auth keys
    ("duplicate key", keys((ALICE_KEY, "alice", "user"), (ALICE_KEY, "bob", "user")), "auth.keys[1].key"),
    ("short key", keys(("short-key-012345", "alice", "user"), ("x" * 15, "bob", "user")), "auth.keys[1].key"),
    ("key with space", keys(("alice key 0123456789abc", "alice", "user")), "auth.keys[0].key"),
    ("key missing", {"auth": {"keys": [{"principal": "alice"}]}}, "auth.keys[0].key"),
    ("principal missing", {"auth": {"keys": [{"key": ALICE_KEY}]}}, "auth.keys[0].principal"),
    ("principal empty", keys((ALICE_KEY, "", "user")), "auth.keys[0].principal"),
    ("principal space", keys((ALICE_KEY, "al ice", "user")), "auth.keys[0].principal"),
    ("principal slash", keys((ALICE_KEY, "alice/bob", "user")), "auth.keys[0].principal"),
    ("principal non-ascii", keys((ALICE_KEY, "alicé", "user")), "auth.keys[0].principal"),
    ("role unknown", keys((ALICE_KEY, "alice", "user"), (BOB_KEY, "bob", "admin")), "auth.keys[1].role"),
    ("proxy gateway_key short", {"proxy": {"gateway_key": "short"}}, "proxy.gateway_key"),
    ("proxy client key short", {"proxy": {"client_keys": ["short"]}}, "proxy.client_keys[0]"),
    ("proxy client key duplicate", {"proxy": {"client_keys": [BOB_KEY, BOB_KEY]}}, "proxy.client_keys[1]"),
    # mounts
    ("mount prefix relative", {"artifacts": {"mounts": [{"agent_prefix": "workspace", "host_dir": "/w"}]}}, "artifacts.mounts[0].agent_prefix"),
    ("mount prefix drive-relative", {"artifacts": {"mounts": [{"agent_prefix": "C:work", "host_dir": "/w"}]}}, "artifacts.mounts[0].agent_prefix"),
    ("mount prefix empty", {"artifacts": {"mounts": [{"agent_prefix": "", "host_dir": "/w"}]}}, "artifacts.mounts[0].agent_prefix"),
    ("mount prefix missing", {"artifacts": {"mounts": [{"host_dir": "/w"}]}}, "artifacts.mounts[0].agent_prefix"),
    ("mount prefix duplicate", {"artifacts": {"mounts": [{"agent_prefix": "/w", "host_dir": "/a"}, {"agent_prefix": "/w/", "host_dir": "/b"}]}}, "artifacts.mounts[1].agent_prefix"),
    ("mount host_dir relative", {"artifacts": {"mounts": [{"agent_prefix": "/w", "host_dir": "rel/dir"}]}}, "artifacts.mounts[0].host_dir"),
    ("mount host_dir missing", {"artifacts": {"mounts": [{"agent_prefix": "/w"}]}}, "artifacts.mounts[0].host_dir"),
    ("mount host_dir unknown user", {"artifacts": {"mounts": [{"agent_prefix": "/w", "host_dir": "~no-such-user-xyzzy/w"}]}}, "artifacts.mounts[0].host_dir"),
    # keys added after DESIGN.md's list
    ("database_url not a string", {"database_url": 5}, "database_url"),
    ("database_url scheme", {"database_url": "mysql://gw:pw@db/gateway"}, "database_url"),
    ("database_url sqlite", {"database_url": "sqlite:///x.db"}, "database_url"),
    ("database_url no host", {"database_url": "postgresql:///gateway"}, "database_url"),
    ("database_url bad port", {"database_url": "postgresql://db:99999/gateway"}, "database_url"),
    ("database_url space", {"database_url": "postgresql://db/gate way"}, "database_url"),
    ("header timeout zero", {"server": {"header_timeout_seconds": 0}}, "server.header_timeout_seconds"),
    ("max_connections zero", {"server": {"max_connections": 0}}, "server.max_connections"),
    ("listen_backlog float", {"server": {"listen_backlog": 10.5}}, "server.listen_backlog"),
    ("first byte negative", {"upstream": {"first_byte_timeout_seconds": -1}}, "upstream.first_byte_timeout_seconds"),
    ("hard links not a bool", {"artifacts": {"allow_hard_links": "yes"}}, "artifacts.allow_hard_links"),
    ("owner_prefix on a user key", {"auth": {"keys": [{"key": ALICE_KEY, "principal": "alice", "owner_prefix": "x:"}]}}, "auth.keys[0].owner_prefix"),
    ("owner_prefix empty", {"auth": {"keys": [{"key": PROXY_KEY, "principal": "p", "role": "proxy", "owner_prefix": ""}]}}, "auth.keys[0].owner_prefix"),
    ("owner_prefix space", {"auth": {"keys": [{"key": PROXY_KEY, "principal": "p", "role": "proxy", "owner_prefix": "open webui:"}]}}, "auth.keys[0].owner_prefix"),
    ("user in a proxy's owner space", keys((PROXY_KEY, "proxy", "proxy"), (ALICE_KEY, "openwebui:alice", "user")), "auth.keys[1].principal"),
    ("openwebui_url not a URL", {"proxy": {"openwebui_url": "chat.example.com"}}, "proxy.openwebui_url"),
    ("openwebui_url with a query", {"proxy": {"openwebui_url": "https://chat.example.com/?x=1"}}, "proxy.openwebui_url"),
    ("session cache negative", {"proxy": {"session_cache_seconds": -1}}, "proxy.session_cache_seconds"),
    ("native delivery not a bool", {"proxy": {"native_delivery": 1}}, "proxy.native_delivery"),
    ("trust headers derived, still typed", {"proxy": {"trust_user_headers": "no"}}, "proxy.trust_user_headers"),
    ("output not a table", {"output": []}, "output"),
    ("extra key not an identifier", {"output": {"extra_chunk_keys": ["x-trace"]}}, "output.extra_chunk_keys[0]"),
    ("extra key starts with a digit", {"output": {"extra_chunk_keys": ["1x"]}}, "output.extra_chunk_keys[0]"),
    ("extra key is the manifest", {"output": {"extra_chunk_keys": ["trace", "gateway"]}}, "output.extra_chunk_keys[1]"),
    ("extra key duplicate", {"output": {"extra_chunk_keys": ["trace", "trace"]}}, "output.extra_chunk_keys[1]"),
    ("extra key empty", {"output": {"extra_chunk_keys": [""]}}, "output.extra_chunk_keys[0]"),
    ("logprobs not a bool", {"output": {"logprobs": "true"}}, "output.logprobs"),
    ("json depth zero", {"limits": {"max_json_depth": 0}}, "limits.max_json_depth"),
    ("runs retention zero", {"retention": {"runs_seconds": 0}}, "retention.runs_seconds"),
    ("responses retention negative", {"retention": {"responses_seconds": -1}}, "retention.responses_seconds"),
    ("reaper zero", {"retention": {"reaper_interval_seconds": 0}}, "retention.reaper_interval_seconds"),
    ("alias and new key both", {"limits": {"run_retention_seconds": 5}, "retention": {"runs_seconds": 6}}, "limits.run_retention_seconds"),
    ("alias not a number", {"limits": {"run_retention_seconds": "1h"}}, "limits.run_retention_seconds"),
    ("pool zero", {"database": {"pool_size": 0}}, "database.pool_size"),
    ("db connect timeout inf", {"database": {"connect_timeout_seconds": float("inf")}}, "database.connect_timeout_seconds"),
    ("lease zero", {"runs": {"lease_seconds": 0}}, "runs.lease_seconds"),
    ("unknown runs key", {"runs": {"lease": 1}}, "runs.lease"),
    ("log format", {"log": {"format": "xml"}}, "log.format"),
    ("log level", {"log": {"level": "verbose"}}, "log.level"),
    ("log level case", {"log": {"level": "INFO"}}, "log.level"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("patch", "key"), [c[1:] for c in BAD_CASES], ids=[c[0] for c in BAD_CASES]
)
def test_refused(home: Path, tmp_path: Path, patch: dict[str, Any], key: str) -> None:
    base = valid_data(tmp_path)
    good = config_from_dict(base)
    snapshot = copy.deepcopy(good)
    with pytest.raises(ConfigError) as info:
        config_from_dict(merged(base, patch))
    assert info.value.key == key
    assert f"config key {key!r}" in str(info.value)
    # Nothing half-applied: no side effects, the earlier config is untouched, and
    # the same file without the bad patch still loads.
    assert good == snapshot
    assert not (tmp_path / "state").exists()
    assert config_from_dict(base) == good


@pytest.mark.parametrize(
    ("patch", "key"), [c[1:] for c in BAD_CASES], ids=[c[0] for c in BAD_CASES]
)
def test_refused_from_file(home: Path, tmp_path: Path, patch: dict[str, Any], key: str) -> None:
    """The same refusals through load_config with a real TOML file."""
    data = merged(valid_data(tmp_path), patch)
    if _has_non_toml_value(data):
        pytest.skip("value not representable in TOML")
    path = write_toml(tmp_path / "gw.toml", _to_toml(data))
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert info.value.key == key


def test_did_you_mean(home: Path) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_dict({"server": {"bnd": "127.0.0.1:1"}})
    assert "unknown key" in str(info.value)
    assert "did you mean 'server.bind'" in str(info.value)
    with pytest.raises(ConfigError) as info:
        config_from_dict({"upstrem": {}})
    assert "did you mean 'upstream'" in str(info.value)
    with pytest.raises(ConfigError) as info:
        config_from_dict({"bind": "127.0.0.1:1"})
    assert info.value.key == "bind"
    assert "[server]" in str(info.value)
    with pytest.raises(ConfigError) as info:
        config_from_dict({"limits": {"zzz": 1}})
    assert "did you mean" not in str(info.value)


def test_messages_never_echo_keys(home: Path) -> None:
    for data in (
        keys((ALICE_KEY, "alice", "user"), (ALICE_KEY, "bob", "user")),
        keys(("tooshort-secret", "alice", "user")),
        {"proxy": {"client_keys": [BOB_KEY, BOB_KEY]}},
        {"proxy": {"gateway_key": "tooshort-secret"}},
    ):
        with pytest.raises(ConfigError) as info:
            config_from_dict(data)
        assert ALICE_KEY not in str(info.value)
        assert BOB_KEY not in str(info.value)
        assert "tooshort-secret" not in str(info.value)


def test_first_error_wins_and_nothing_is_returned(home: Path, tmp_path: Path) -> None:
    path = write_toml(
        tmp_path / "gw.toml",
        f"""
state_dir = "{tmp_path / "state"}"
[server]
bind = "127.0.0.1:1234"
[artifacts]
default_link_mode = "shared"
""",
    )
    with pytest.raises(ConfigError) as info:
        load_config(path, env={"GATEWAY_BIND": "127.0.0.1:5678"})
    assert info.value.key == "artifacts.default_link_mode"
    assert not (tmp_path / "state").exists()


def test_config_error_is_a_gateway_error() -> None:
    with pytest.raises(ConfigError) as info:
        config_from_dict({"server": {"bind": "x"}})
    assert info.value.code == "invalid_config"
    assert isinstance(info.value.to_dict(), dict)
    assert isinstance(config_from_dict({}), Config)


# --------------------------------------------------------------------------- added keys


def test_trust_user_headers_default_follows_the_jwt_secret(home: Path) -> None:
    assert config_from_dict({}).proxy.trust_user_headers is True
    with_secret = config_from_dict({"proxy": {"openwebui_jwt_secret": "s3cret"}})
    assert with_secret.proxy.trust_user_headers is False
    explicit = {"openwebui_jwt_secret": "s3cret", "trust_user_headers": True}
    assert config_from_dict({"proxy": explicit}).proxy.trust_user_headers is True
    no_secret = {"trust_user_headers": False}
    assert config_from_dict({"proxy": no_secret}).proxy.trust_user_headers is False


def test_run_retention_seconds_is_a_deprecated_alias(home: Path) -> None:
    loaded = inspect_config({"limits": {"run_retention_seconds": 90}})
    assert loaded.config.retention.runs_seconds == 90.0
    assert not hasattr(loaded.config.limits, "run_retention_seconds")
    assert loaded.notes == (
        "limits.run_retention_seconds is deprecated: write it as retention.runs_seconds",
    )
    assert inspect_config({"retention": {"runs_seconds": 90}}).notes == ()


def test_owner_prefix(home: Path) -> None:
    cfg = config_from_dict(keys((PROXY_KEY, "owui", "proxy"), (ALICE_KEY, "alice", "user")))
    assert [k.owner_prefix for k in cfg.auth.keys] == ["openwebui:", "openwebui:"]
    custom = {"key": PROXY_KEY, "principal": "slack", "role": "proxy", "owner_prefix": "slack:"}
    user = {"key": ALICE_KEY, "principal": "alice"}
    cfg = config_from_dict({"auth": {"keys": [custom, user]}})
    assert cfg.auth.keys[0].owner_prefix == "slack:"
    with pytest.raises(ConfigError) as info:
        config_from_dict({"auth": {"keys": [custom, {**user, "principal": "slack:al"}]}})
    message = str(info.value)
    assert message.startswith("config key 'auth.keys[1].principal'") and "auth.keys[0]" in message
    assert "'slack:'" in message and PROXY_KEY not in message and ALICE_KEY not in message
    # another proxy key in that space could act as the first one's own principal too
    other = {"key": BOB_KEY, "principal": "slack:bot", "role": "proxy", "owner_prefix": "x:"}
    with pytest.raises(ConfigError, match=r"auth.keys\[1\].principal"):
        config_from_dict({"auth": {"keys": [custom, other]}})


@pytest.mark.parametrize("role", ["user", "proxy"])
def test_no_key_may_be_an_open_webui_user(home: Path, role: str) -> None:
    """``openwebui:<id>`` is the owner of an Open WebUI user's browser session and of the
    proxy's runs for that user: a key with such a principal (whatever the proxies'
    prefixes, with or without proxy.openwebui_url) would share that user's private links."""
    for principal in ("openwebui:alice", "openwebui:"):
        entry = {"key": ALICE_KEY, "principal": principal, "role": role}
        with pytest.raises(ConfigError) as info:
            config_from_dict({"auth": {"keys": [entry]}})
        message = str(info.value)
        assert message.startswith("config key 'auth.keys[0].principal': starts with 'openwebui:'")
        assert "\n" not in message and ALICE_KEY not in message
    assert config_from_dict(keys((ALICE_KEY, "openwebui-alice", role))).auth.keys[0]


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://gw:pw@db.internal:5432/gateway",
        "postgres://gw@db/gateway?sslmode=require",
        "postgresql:///gateway?host=/var/run/postgresql",
        "postgresql://[::1]/gateway",
    ],
)
def test_database_url_forms(home: Path, url: str) -> None:
    assert config_from_dict({"database_url": url}).database_url == url


def test_database_password_never_printed(home: Path) -> None:
    for url in ("mysql://gw:pg-pass-xyz@db/x", "postgresql://gw:pg-pass-xyz@/x"):
        with pytest.raises(ConfigError) as info:
            config_from_dict({"database_url": url})
        assert "pg-pass-xyz" not in str(info.value)
        with pytest.raises(ConfigError) as info:
            config_from_dict({}, env={"GATEWAY_DATABASE_URL": url})
        assert "pg-pass-xyz" not in str(info.value) and "GATEWAY_DATABASE_URL" in str(info.value)
    cfg = config_from_dict({"database_url": "postgresql://gw:pg-pass-xyz@db/x"})
    assert "pg-pass-xyz" not in repr(cfg)


def test_extra_chunk_keys(home: Path) -> None:
    cfg = config_from_dict({"output": {"extra_chunk_keys": ["trace_id", "_x"], "logprobs": True}})
    assert cfg.output.extra_chunk_keys == ("trace_id", "_x")
    assert cfg.output.logprobs is True


def test_file_error_messages_do_not_pretend_to_be_a_key(home: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "nope.toml", env={})
    assert str(info.value).startswith("config file not found: ")


# --------------------------------------------------------------------------- tiny TOML writer


def _has_non_toml_value(value: object) -> bool:
    if isinstance(value, float):
        return False
    if isinstance(value, dict):
        return any(_has_non_toml_value(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_non_toml_value(v) for v in value)
    return not isinstance(value, str | int | bool)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if value != value:
            return "nan"
        if value in (float("inf"), float("-inf")):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f'"{k}" = {_toml_value(v)}' for k, v in value.items()) + "}"
    raise TypeError(type(value))


def _to_toml(data: dict[str, Any]) -> str:
    lines = [f'"{k}" = {_toml_value(v)}' for k, v in data.items()]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("char", ["\u202e", "\u2066", "\u200b", "\x7f", "\ufeff"])
@pytest.mark.parametrize("key", ["server.public_base_url", "proxy.openwebui_url"])
def test_urls_refuse_control_and_format_characters(home: Path, char: str, key: str) -> None:
    """A bidi override (U+202E) or another invisible character in a URL the gateway
    writes into links and pages would make people read something else than it is."""
    section, name = key.split(".")
    with pytest.raises(ConfigError) as info:
        config_from_dict({section: {name: f"https://gw.example.com/{char}x"}})
    assert str(info.value).startswith(f"config key {key!r}:")
    assert char not in str(info.value)
    assert config_from_dict({section: {name: "https://gw.example.com/dépôt"}})  # letters are fine


def test_config_file_readable_by_others_with_secrets_is_warned(home: Path, tmp_path: Path) -> None:
    """Like the signing-key file (refused with group/other bits), but a warning: naming
    the file, its mode and the keys that hold secrets, never a secret."""
    from gateway.cli.config import config_warnings
    from gateway.ops.config import config_file_warning, inspect_config, read_config_file

    file = tmp_path / "gateway.toml"
    file.write_text(
        'database_url = "postgresql://gw:pg-pass-xyz@db/gw"\n'
        f'[[auth.keys]]\nkey = "{ALICE_KEY}"\nprincipal = "alice"\n'
        '[proxy]\nopenwebui_jwt_secret = "jwt-secret-value"\n'
    )
    for mode, who in ((0o644, "every user of this host"), (0o640, "its group")):
        file.chmod(mode)
        warning = config_file_warning(file)
        assert warning is not None and f"readable by {who} (mode {mode:04o})" in warning
        assert "database_url, auth.keys[0].key, proxy.openwebui_jwt_secret" in warning
        assert f"chmod 600 {file}" in warning
        for secret in (ALICE_KEY, "pg-pass-xyz", "jwt-secret-value"):
            assert secret not in warning
        loaded = inspect_config(read_config_file(file), {}, source=str(file))
        assert warning in config_warnings(loaded)
    file.chmod(0o600)
    assert config_file_warning(file) is None
    assert not any("readable by" in w for w in config_warnings(inspect_config({}, {}, str(file))))
    # readable, but nothing secret in it (no password in the URL, no key)
    file.write_text('database_url = "postgresql://gw@db/gw"\n[server]\nbind = "127.0.0.1:0"\n')
    file.chmod(0o644)
    assert config_file_warning(file) is None
    assert config_file_warning(None) is None and config_file_warning(tmp_path / "none") is None


@pytest.mark.parametrize(
    ("prefixes", "key"),
    [
        (["open"], "auth.keys[0].owner_prefix"),
        (["o"], "auth.keys[0].owner_prefix"),
        (["slack:", "slack:x"], "auth.keys[1].owner_prefix"),
        (["teams:x", "teams:"], "auth.keys[1].owner_prefix"),
    ],
)
def test_proxy_owner_spaces_must_not_overlap(home: Path, prefixes: list[str], key: str) -> None:
    """A proxy key whose prefix holds Open WebUI's users, or another proxy's owners,
    could act for them (red team: owner_prefix = "open" read an Open WebUI user's link)."""
    keys = [
        {
            "key": f"proxy-{i}-key-0123456789abcdef",
            "principal": f"px{i}",
            "role": "proxy",
            "owner_prefix": p,
        }
        for i, p in enumerate(prefixes)
    ]
    with pytest.raises(ConfigError) as info:
        config_from_dict({"auth": {"keys": keys}})
    assert info.value.key == key
    same = [
        {**keys[0], "owner_prefix": "openwebui:"},
        {
            **keys[-1],
            "key": "proxy-9-key-0123456789abcdef",
            "principal": "px9",
            "owner_prefix": "openwebui:",
        },
    ]
    assert len(config_from_dict({"auth": {"keys": same}}).auth.keys) == 2


@pytest.mark.parametrize(
    ("bind", "url"),
    [
        ("127.0.0.1:8643", "http://127.0.0.1:8643"),
        ("0.0.0.0:9000", "http://127.0.0.1:9000"),
        ("[::1]:8650", "http://[::1]:8650"),
        ("[::]:8651", "http://127.0.0.1:8651"),
    ],
)
def test_links_follow_the_bind_unless_public_base_url_is_set(bind: str, url: str) -> None:
    """A gateway moved to another port kept minting links to 8642 (new operator)."""
    assert config_from_dict({"server": {"bind": bind}}).server.public_base_url == url
    given = {"bind": bind, "public_base_url": "https://gw.example/x"}
    assert config_from_dict({"server": given}).server.public_base_url == "https://gw.example/x"
    assert config_from_dict({}).server.public_base_url == "http://127.0.0.1:8642"


def test_links_follow_a_bind_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEWAY_BIND", "127.0.0.1:8777")
    assert load(None).config.server.public_base_url == "http://127.0.0.1:8777"


def test_shared_roots_alone_leave_no_default_root(tmp_path: Path) -> None:
    """Only shared_roots given: the default per-principal root is not added (config
    check warned about ~/.agent/artifacts/{principal}, a folder the operator never
    asked for)."""
    cfg = config_from_dict({"artifacts": {"shared_roots": [str(tmp_path)]}})
    assert cfg.artifacts.roots == ()
    assert config_from_dict({}).artifacts.roots  # the default stays for a file without any
