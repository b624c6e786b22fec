"""Configuration schema machinery: dataclass fields that describe themselves.

A configuration class is a frozen dataclass whose fields are made with
:func:`setting`. Each field states, once: its type (the annotation), its default (the
dataclass default; none = required), one line of documentation, its validation (a
check function and a few flags), its environment variable and whether it is secret
(``field.metadata["setting"]``, a :class:`Setting`). Everything else is derived from
that one statement:

- :func:`load` validates a parsed TOML document into the dataclasses, all or nothing;
- :func:`tables` lists every table and key in declaration order (``gateway config
  example``, ``docs/configuration.md`` and its drift test);
- :func:`env_overrides` maps environment variables to the keys they override;
- :func:`render_example` and :func:`render_values` write TOML back out.

Types come from the annotations: ``str``, ``bool``, ``int``, ``float``, ``Path`` (a host
path: ``~`` expanded, made absolute, symlinks resolved), ``Literal["a", "b"]`` (one of
those strings), ``tuple[T, ...]`` (an array of T), ``tuple[SomeDataclass, ...]`` (an
array of tables, ``[[x.y]]``) and a dataclass (a table, ``[x]``). A boolean is never a
number, an integer key does not take a float, numbers must be finite and positive
(``allow_zero`` admits 0), strings inside arrays must not be empty.

A class may define ``_finish(values, given, prefix, ctx)`` (a staticmethod) for the
rules that span several of its keys; it runs after its keys are converted, before the
instance is built, and may adjust ``values`` (a derived default) or raise
``ctx.error(...)``.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import MISSING, dataclass, field
from pathlib import Path
from typing import Any, Literal, cast, get_args, get_origin, get_type_hints

from gateway.core.errors import ConfigError

__all__ = [
    "Ctx",
    "Key",
    "Setting",
    "Table",
    "describe_type",
    "env_overrides",
    "load",
    "mask_secret",
    "render_example",
    "render_values",
    "setting",
    "tables",
    "to_toml_value",
    "toml_literal",
]

Check = Callable[[Any, str, "Ctx"], Any]


def mask_secret(value: str) -> str:
    """``""`` stays ``""`` (unset); a secret of 16+ characters shows its last 4 only.

    Four characters of a 16+ character key tell two keys apart in a listing without
    giving away enough to guess it; a shorter secret shows nothing at all.
    """
    if not value:
        return ""
    return "****" + value[-4:] if len(value) >= 16 else "****"


@dataclass(frozen=True, slots=True)
class Setting:
    """What a field says about itself (see :func:`setting`)."""

    doc: str
    check: Check | None = None
    env: str | None = None
    mask: Callable[[str], str] | None = None
    allow_zero: bool = False
    absolute: bool = False
    optional: bool = False
    unique: bool = False
    min_items: int = 0
    default_doc: str | None = None
    example: Any = None
    commented: bool = False

    @property
    def secret(self) -> bool:
        return self.mask is not None


def setting(
    default: Any = MISSING,
    doc: str = "",
    *,
    check: Check | None = None,
    env: str | None = None,
    secret: bool = False,
    mask: Callable[[str], str] | None = None,
    allow_zero: bool = False,
    absolute: bool = False,
    optional: bool = False,
    unique: bool = False,
    min_items: int = 0,
    default_doc: str | None = None,
    example: Any = None,
    commented: bool = False,
) -> Any:
    """A dataclass field that documents and validates itself.

    ``default``: the value when the key is absent (``MISSING``: the key is required).
    ``doc``: one line for the example file and the docs. ``check(value, key, ctx)``
    validates (and may normalise) the converted value. ``env``: the environment
    variable that overrides it. ``secret``: never printed (repr, ``config check``)
    except as :func:`mask_secret` (or ``mask``). ``allow_zero``: a number may be 0.
    ``absolute``: a path must be absolute after ``~`` expansion. ``optional``: ``""``
    means unset and skips ``check``. ``unique``: items of an array (or this key across
    an array of tables) must differ. ``min_items``: shortest array. ``default_doc``:
    the default in words when it is derived from other keys (the example then leaves
    the key commented out). ``example``: a sample value for a required key.
    ``commented``: the example file shows the key commented out (it applies only in
    some combinations, like a proxy key's ``owner_prefix``).
    """
    if secret and mask is None:
        mask = mask_secret
    meta = Setting(
        doc,
        check=check,
        env=env,
        mask=mask,
        allow_zero=allow_zero,
        absolute=absolute,
        optional=optional,
        unique=unique,
        min_items=min_items,
        default_doc=default_doc,
        example=example,
        commented=commented or default_doc is not None,
    )
    return field(default=default, repr=mask is None, metadata={"setting": meta})


# --------------------------------------------------------------------------- introspection


@dataclass(frozen=True, slots=True)
class Key:
    """One key of one table: ``table`` is ``""`` (top level), ``"server"`` or ``"auth.keys"``."""

    table: str
    name: str
    hint: Any
    setting: Setting
    default: Any  # MISSING when required

    @property
    def dotted(self) -> str:
        return f"{self.table}.{self.name}" if self.table else self.name

    @property
    def required(self) -> bool:
        return self.default is MISSING


@dataclass(frozen=True, slots=True)
class Table:
    """A table of the schema: a section ``[x]`` or an array of tables ``[[x.y]]``."""

    name: str
    cls: type
    array: bool
    doc: str
    keys: tuple[Key, ...]
    aliases: Mapping[str, str] = dataclasses.field(default_factory=dict)


@functools.cache
def _fields(cls: type) -> tuple[tuple[dataclasses.Field[Any], Any, Setting], ...]:
    hints = get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        meta = f.metadata.get("setting")
        if meta is None and not _is_table_type(hints[f.name]):
            raise TypeError(f"{cls.__name__}.{f.name} is not declared with setting()")
        out.append((f, hints[f.name], meta or Setting(doc="")))
    return tuple(out)


def _is_table_type(hint: Any) -> bool:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def _array_item(hint: Any) -> Any:
    """``T`` for ``tuple[T, ...]``, else ``None``."""
    if get_origin(hint) is tuple:
        args = get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return args[0]
    return None


def _table_doc(cls: type) -> str:
    doc = (cls.__doc__ or "").strip().splitlines()
    first = doc[0] if doc else ""
    # "``[server]``: the API server's ..." -> "the API server's ..."
    text = first.split(": ", 1)[1] if first.startswith("``") and ": " in first else first
    return text.replace("``", "")


def tables(cls: type, aliases: Mapping[str, str] | None = None) -> list[Table]:
    """Every table of ``cls`` in declaration order: the top level (name ``""``) first,
    each section followed by its arrays of tables.

    ``aliases`` (old dotted key -> new dotted key) are attached to the table that
    holds the old key.
    """
    out = list(_walk(cls))
    for i, table in enumerate(out):
        mine = {o: n for o, n in (aliases or {}).items() if o.rpartition(".")[0] == table.name}
        if mine:
            out[i] = dataclasses.replace(table, aliases=mine)
    return out


@functools.cache
def _walk(cls: type, name: str = "", array: bool = False) -> tuple[Table, ...]:
    keys: list[Key] = []
    arrays: list[tuple[type, str, bool]] = []
    sections: list[tuple[type, str, bool]] = []
    for f, hint, meta in _fields(cls):
        dotted = _join(name, f.name)
        item = _array_item(hint)
        if _is_table_type(hint):
            sections.append((hint, dotted, False))
        elif item is not None and _is_table_type(item):
            arrays.append((item, dotted, True))
        else:
            keys.append(Key(name, f.name, hint, meta, f.default))
    out = [Table(name, cls, array, _table_doc(cls), tuple(keys))]
    for sub in arrays + sections:
        out += _walk(*sub)
    return tuple(out)


def env_overrides(cls: type) -> dict[str, str]:
    """Environment variable -> the dotted key it overrides, in declaration order."""
    return {k.setting.env: k.dotted for t in tables(cls) for k in t.keys if k.setting.env}


def describe_type(hint: Any) -> str:
    """The TOML type of a key in words (``"integer"``, ``"array of paths"``, ...)."""
    names = {str: "string", bool: "boolean", int: "integer", float: "number", Path: "path"}
    if get_origin(hint) is Literal:
        return " | ".join(json.dumps(a) for a in get_args(hint))
    item = _array_item(hint)
    if item is not None:
        inner = describe_type(item)
        return "array of " + (inner + "s" if inner in names.values() else f"({inner})")
    return names.get(hint, getattr(hint, "__name__", str(hint)))


# --------------------------------------------------------------------------- loading


class Ctx:
    """Validation context: where values came from, so that messages can say so."""

    def __init__(self) -> None:
        #: dotted key -> the environment variable that set it
        self.env_sources: dict[str, str] = {}
        #: dotted key -> the (deprecated) key the value was written under
        self.renames: dict[str, str] = {}
        #: dotted keys given in the document (or by the environment)
        self.given: set[str] = set()
        #: deprecations met while loading, one sentence each
        self.notes: list[str] = []

    def name(self, key: str) -> str:
        for new, old in self.renames.items():
            if key == new or key.startswith((new + "[", new + ".")):
                return old + key[len(new) :]
        return key

    def error(self, key: str, message: str) -> ConfigError:
        for dotted, var in self.env_sources.items():
            if key == dotted or key.startswith((dotted + "[", dotted + ".")):
                return ConfigError(key, f"{message} (from environment variable {var})")
        return ConfigError(self.name(key), message)


def type_name(value: object) -> str:
    """``"an integer"``, ``"a table"``...: what a TOML value is, for messages."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, list | tuple):
        return "an array"
    return f"a {type(value).__name__}"


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _as_table(value: object, key: str, ctx: Ctx) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ctx.error(key, f"expected a table, got {type_name(value)}")
    return {str(k): v for k, v in value.items()}


def _check_keys(
    table: Mapping[str, Any], known: Sequence[str], prefix: str, homes: Mapping[str, str]
) -> None:
    """Refuse unknown keys, with a did-you-mean hint (``homes``: key -> its section)."""
    for key in table:
        if key in known:
            continue
        hint = ""
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        if close:
            hint = f"; did you mean {_join(prefix, close[0])!r}?"
        elif key in homes:
            hint = f"; did you mean {key!r} under [{homes[key]}]?"
        raise ConfigError(_join(prefix, key), f"unknown key{hint}")


def load(
    cls: type,
    data: Mapping[str, Any],
    env: Mapping[str, str],
    ctx: Ctx,
    *,
    aliases: Mapping[str, str] | None = None,
) -> Any:
    """Validate ``data`` (a parsed TOML document) into an instance of ``cls``.

    Order: every table's keys are checked for unknown names, deprecated ``aliases``
    (old dotted key -> new dotted key) are moved to their new place, the environment
    overrides are applied, then every value is converted and checked in declaration
    order. The first problem raises :class:`ConfigError`; nothing is built before.
    """
    aliases = aliases or {}
    tree = _structure(cls, _as_table(data, "<root>", ctx), "", ctx, aliases)
    for old, new in aliases.items():
        _move_alias(tree, old, new, ctx)
    for var, dotted in env_overrides(cls).items():
        _apply_env(cls, tree, dotted, var, env.get(var, ""), ctx)
    return _build(cls, tree, "", ctx)


def _structure(
    cls: type, table: dict[str, Any], prefix: str, ctx: Ctx, aliases: Mapping[str, str]
) -> dict[str, Any]:
    """Check the keys of ``table`` and of its sub-tables; copy sections into dicts."""
    fields = _fields(cls)
    known = [f.name for f, _, _ in fields]
    known += [old.rpartition(".")[2] for old in aliases if old.rpartition(".")[0] == prefix]
    homes: dict[str, str] = {}
    if not prefix:
        for t in tables(cls):
            if t.name and not t.array:
                homes.update({k.name: t.name for k in t.keys if k.name not in homes})
    _check_keys(table, known, prefix, homes)
    ctx.given.update(_join(prefix, k) for k in table)
    for f, hint, _ in fields:
        if _is_table_type(hint):
            key = _join(prefix, f.name)
            sub = _as_table(table.get(f.name, {}), key, ctx)
            table[f.name] = _structure(hint, sub, key, ctx, aliases)
    return table


def _subtable(tree: dict[str, Any], dotted: str) -> tuple[dict[str, Any], str]:
    section, _, name = dotted.rpartition(".")
    node = tree
    for part in section.split(".") if section else ():
        node = node[part]
    return node, name


def _move_alias(tree: dict[str, Any], old: str, new: str, ctx: Ctx) -> None:
    old_table, old_name = _subtable(tree, old)
    if old_name not in old_table:
        return
    new_table, new_name = _subtable(tree, new)
    if new_name in new_table:
        raise ctx.error(old, f"is the old name of {new}, which is set too; keep only {new}")
    new_table[new_name] = old_table.pop(old_name)
    ctx.renames[new] = old
    ctx.given.add(new)
    ctx.notes.append(f"{old} is deprecated: write it as {new}")


def _apply_env(cls: type, tree: dict[str, Any], dotted: str, var: str, raw: str, ctx: Ctx) -> None:
    """An environment variable that is set but empty counts as unset."""
    if not raw:
        return
    key = next(k for t in tables(cls) for k in t.keys if k.dotted == dotted)
    value: object = raw
    if _array_item(key.hint) is not None:
        value = [part for part in raw.split(os.pathsep) if part]
    table, name = _subtable(tree, dotted)
    table[name] = value
    ctx.env_sources[dotted] = var
    ctx.given.add(dotted)
    ctx.renames.pop(dotted, None)


def _build(cls: type, table: dict[str, Any], prefix: str, ctx: Ctx) -> Any:
    values: dict[str, Any] = {}
    for f, hint, meta in _fields(cls):
        key = _join(prefix, f.name)
        if _is_table_type(hint):
            values[f.name] = _build(hint, table[f.name], key, ctx)
        elif f.name in table:
            values[f.name] = _convert(hint, table[f.name], key, ctx, meta)
        elif f.default is MISSING:
            raise ctx.error(key, "is required")
        else:
            values[f.name] = _convert(hint, to_toml_value(f.default), key, ctx, meta)
    finish = getattr(cls, "_finish", None)
    if finish is not None:
        finish(values, set(table), prefix, ctx)
    return cls(**values)


def _convert(hint: Any, raw: object, key: str, ctx: Ctx, meta: Setting) -> Any:
    item = _array_item(hint)
    if item is None:
        return _scalar(hint, raw, key, ctx, meta)
    if not isinstance(raw, list | tuple):
        raise ctx.error(key, f"expected an array, got {type_name(raw)}")
    raw_items = cast(Sequence[object], raw)
    items: list[Any] = []
    for i, value in enumerate(raw_items):
        if _is_table_type(item):
            where = f"{key}[{i}]"
            sub = _as_table(value, where, ctx)
            _check_keys(sub, [f.name for f, _, _ in _fields(item)], where, {})
            items.append(_build(item, sub, where, ctx))
        else:
            if isinstance(value, str) and not value:
                raise ctx.error(f"{key}[{i}]", "must not be empty")
            items.append(_scalar(item, value, f"{key}[{i}]", ctx, meta))
    if len(items) < meta.min_items:
        raise ctx.error(
            key, f"needs at least {meta.min_items} entr{'y' if meta.min_items == 1 else 'ies'}"
        )
    _check_unique(items, item, key, ctx, meta)
    return tuple(items)


def _check_unique(items: list[Any], item: Any, key: str, ctx: Ctx, meta: Setting) -> None:
    columns: list[tuple[str, Callable[[Any], Any]]] = []
    if _is_table_type(item):
        for f, _, m in _fields(item):
            if m.unique:
                columns.append((f".{f.name}", functools.partial(_attr, f.name)))
    elif meta.unique:
        columns.append(("", lambda v: v))
    for suffix, get in columns:
        seen: dict[Any, int] = {}
        for i, value in enumerate(items):
            v = get(value)
            if v in seen:
                raise ctx.error(f"{key}[{i}]{suffix}", f"duplicates {key}[{seen[v]}]{suffix}")
            seen[v] = i


def _attr(name: str, obj: Any) -> Any:
    return getattr(obj, name)


def _scalar(hint: Any, raw: object, key: str, ctx: Ctx, meta: Setting) -> Any:
    if hint is bool:
        if not isinstance(raw, bool):
            raise ctx.error(key, f"expected a boolean, got {type_name(raw)}")
        return raw
    if hint is int or hint is float:
        return _number(hint, raw, key, ctx, meta)
    if get_origin(hint) is Literal:
        return _choice(get_args(hint), raw, key, ctx)
    if hint not in (str, Path):
        raise TypeError(f"{key}: unsupported config type {hint!r}")
    if not isinstance(raw, str):
        raise ctx.error(key, f"expected a string, got {type_name(raw)}")
    value: Any = _host_path(raw, key, ctx, absolute=meta.absolute) if hint is Path else raw
    if meta.check is not None and not (meta.optional and value == ""):
        value = meta.check(value, key, ctx)
    return value


def _number(hint: type, raw: object, key: str, ctx: Ctx, meta: Setting) -> int | float:
    if hint is int and (isinstance(raw, bool) or not isinstance(raw, int)):
        raise ctx.error(key, f"expected an integer, got {type_name(raw)}")
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise ctx.error(key, f"expected a number, got {type_name(raw)}")
    if not math.isfinite(raw):
        raise ctx.error(key, "must be a finite number")
    if raw < 0 or (raw == 0 and not meta.allow_zero):
        raise ctx.error(key, "must not be negative" if meta.allow_zero else "must be positive")
    return raw if hint is int else float(raw)


def _choice(choices: tuple[Any, ...], raw: object, key: str, ctx: Ctx) -> str:
    if not isinstance(raw, str):
        raise ctx.error(key, f"expected a string, got {type_name(raw)}")
    if raw not in choices:
        quoted = [repr(c) for c in choices]
        words = " or ".join(quoted) if len(quoted) == 2 else "one of " + ", ".join(quoted)
        raise ctx.error(key, f"must be {words}, not {raw!r}")
    return raw


def _host_path(value: str, key: str, ctx: Ctx, *, absolute: bool) -> Path:
    if not value:
        raise ctx.error(key, "must not be empty")
    try:
        path = Path(value).expanduser()
    except RuntimeError:
        raise ctx.error(key, "cannot expand '~': the home directory is unknown") from None
    if absolute and not path.is_absolute():
        raise ctx.error(key, "must be an absolute path (after '~' expansion)")
    try:
        return path.resolve()
    except (OSError, ValueError, RuntimeError) as exc:
        raise ctx.error(key, f"cannot resolve path: {type(exc).__name__}") from None


# --------------------------------------------------------------------------- writing TOML


def to_toml_value(value: Any) -> Any:
    """A config value as the TOML document would hold it (paths as strings, tuples as lists)."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple | list):
        return [to_toml_value(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_toml_value(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value


def toml_literal(value: Any) -> str:
    """``value`` (a TOML value: str, bool, int, float, list) written as TOML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ("nan" if value != value else "inf")
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_literal(v) for v in value) + "]"
    raise TypeError(f"not a TOML value: {type(value).__name__}")


def _comment_lines(key: Key) -> list[str]:
    meta = key.setting
    notes = []
    if get_origin(key.hint) is Literal:
        notes.append(describe_type(key.hint).replace('"', ""))
    if meta.default_doc:
        notes.append(f"default: {meta.default_doc}")
    if meta.env:
        notes.append(f"env {meta.env}")
    if key.required:
        notes.append("required")
    tail = f"  ({'; '.join(notes)})" if notes else ""
    return [f"# {meta.doc}{tail}"]


def _example_value(key: Key) -> Any:
    if key.required:
        return key.setting.example
    return to_toml_value(key.default)


def render_example(cls: type, header: Sequence[str], aliases: Mapping[str, str]) -> str:
    """A commented TOML document with every key at its default (loads as the defaults).

    Arrays of tables are shown as commented examples; keys whose default is derived
    from other keys (``default_doc``) and deprecated aliases are commented out.
    """
    lines = [f"# {h}" if h else "#" for h in header]
    for table in tables(cls, aliases):
        lines += _example_table(table)
    return "\n".join(lines).rstrip() + "\n"


def _example_table(table: Table) -> list[str]:
    prefix = "# " if table.array else ""
    lines: list[str] = [""]
    if table.array:
        lines += [f"# {table.doc} None by default: uncomment, repeat.", f"# [[{table.name}]]"]
    elif table.name:
        lines += [f"[{table.name}]", f"# {table.doc}"] if table.doc else [f"[{table.name}]"]
    for key in table.keys:
        body = [*_comment_lines(key), f"{key.name} = {toml_literal(_example_value(key))}"]
        if key.setting.commented:
            body[-1] = "# " + body[-1]
        lines += [prefix + line for line in body]
    for old, new in table.aliases.items():
        lines.append(
            f"# {old.rpartition('.')[2]}: deprecated; write [{new.rpartition('.')[0]}] {new.rpartition('.')[2]}"
        )
    return lines


def render_values(
    cls: type,
    instance: Any,
    note: Callable[[str], str | None] = lambda dotted: None,
    omit: Callable[[str], bool] = lambda dotted: False,
) -> str:
    """``instance`` written as TOML, secrets masked; ``note(dotted)`` adds a trailing
    comment; keys for which ``omit(dotted)`` is true are left out.

    For reading, not for loading back: masked secrets are not the real ones.
    """
    lines: list[str] = []
    for table in tables(cls):
        node = _resolve(instance, table.name)
        if not table.array:
            lines += ["", f"[{table.name}]"] if table.name else []
            lines += _value_lines(table, node, table.name, note, omit)
            continue
        if not node:
            lines += ["", f"# [[{table.name}]]: none"]
        for i, item in enumerate(node):
            lines += ["", f"[[{table.name}]]"]
            lines += _value_lines(table, item, f"{table.name}[{i}]", note, omit)
    return "\n".join(lines).lstrip("\n") + "\n"


def _resolve(instance: Any, dotted: str) -> Any:
    node = instance
    for part in dotted.split(".") if dotted else ():
        node = getattr(node, part)
    return node


def _value_lines(
    table: Table,
    node: Any,
    where: str,
    note: Callable[[str], str | None],
    omit: Callable[[str], bool],
) -> list[str]:
    out = []
    for key in table.keys:
        if omit(_join(where, key.name)):
            continue
        value = to_toml_value(getattr(node, key.name))
        mask = key.setting.mask
        if mask is not None:
            value = [mask(v) for v in value] if isinstance(value, list) else mask(value)
        line = f"{key.name} = {toml_literal(value)}"
        extra = note(_join(where, key.name))
        out.append(f"{line}  # {extra}" if extra else line)
    return out


def iter_keys(cls: type) -> Iterator[tuple[Table, Key]]:
    """Every (table, key) pair of the schema, in declaration order."""
    for table in tables(cls):
        for key in table.keys:
            yield table, key
