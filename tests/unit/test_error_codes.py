"""Every error ``code`` the gateway can emit is in ``docs/api.md``'s error table, and
every code in the table is one the code can emit.

The codes are collected from the source (``ast``, no import), from these positions:

- a ``code = "..."`` class attribute of a :class:`gateway.core.errors.GatewayError`
  subclass, when that class is created somewhere without a ``code=`` argument (its
  default then goes out; a base class always given a code emits nothing of its own);
- a ``code="..."`` keyword argument, a positional argument in the place of a
  parameter named ``code`` (``canned_response(408, "request_timeout", ...)``,
  ``Refused(505, "http_version_not_supported", ...)``), a ``"code": ...`` entry of a dict literal, and
  ``code = ...`` / ``code, x = ...`` assignments: every string constant, f-string and
  ``(code, message)`` tuple in the value (also through a local dict of an enclosing
  function, such as ``http_codes``);
- an f-string is a *pattern*: a placeholder whose variable is assigned string
  constants in the same function expands to them (``f"{what}_not_found"`` →
  ``run_not_found``, ``response_not_found``), any other stays a placeholder written
  ``<name>`` (``upstream_http_<status>``; a trailing ``_code`` dropped:
  ``resp.status_code`` is ``<status>``) and must be in the table as such.

Codes relayed from a peer (the upstream's own ``model_not_found``, the gateway's codes
seen by the proxy) are not the gateway's: the table names them in prose.

The table's codes are the backticked words of its ``code`` column.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GATEWAY = ROOT / "gateway"
API_DOC = ROOT / "docs" / "api.md"
_CODE = re.compile(r"[a-z][a-z0-9_]*(?:<[a-z_]+>)?[a-z0-9_]*")


#: plays the upstream (its codes are an upstream's, which the gateway relays or maps)
NOT_THE_GATEWAY = {GATEWAY / "cli" / "demo_upstream.py"}


def modules() -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted(GATEWAY.rglob("*.py")):
        if path not in NOT_THE_GATEWAY:
            yield path, ast.parse(path.read_text(), str(path))


def _local_strings(scope: ast.AST) -> dict[str, list[ast.expr]]:
    """Values assigned to plain names in ``scope`` (for placeholders and dicts)."""
    out: dict[str, list[ast.expr]] = {}
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out.setdefault(target.id, []).append(node.value)
    return out


def _constants(expr: ast.expr) -> list[str]:
    return [
        n.value for n in ast.walk(expr) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    ]


def _fstring(node: ast.JoinedStr, scope: dict[str, list[ast.expr]]) -> list[str]:
    """An f-string's codes: placeholders expanded where the name's values are known."""
    results = [""]
    for part in node.values:
        if isinstance(part, ast.Constant):
            results = [r + str(part.value) for r in results]
            continue
        assert isinstance(part, ast.FormattedValue)
        value = part.value
        options: list[str] = []
        if isinstance(value, ast.Name) and value.id in scope:
            options = [s for v in scope[value.id] for s in _constants(v)]
        if not options:
            name = value.attr if isinstance(value, ast.Attribute) else ast.unparse(value)
            name = name.rsplit(".", 1)[-1].removesuffix("_code")  # resp.status_code: <status>
            options = [f"<{name}>"]
        results = [r + o for r in results for o in options]
    return results


def _codes_in(expr: ast.expr, scope: dict[str, list[ast.expr]], position: int | None) -> set[str]:
    """The codes an expression assigned to ``code`` can hold (``position``: its index
    when ``code`` is one element of a tuple target)."""
    found: set[str] = set()
    stack: list[ast.expr] = [expr]
    seen: set[int] = set()
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, ast.JoinedStr):
            found.update(_fstring(e, scope))
        elif isinstance(e, ast.Constant) and isinstance(e.value, str) and position is None:
            found.add(e.value)
        elif isinstance(e, ast.Tuple) and position is not None:
            item = e.elts[position] if position < len(e.elts) else None
            if isinstance(item, ast.Constant) and isinstance(item.value, str):
                found.add(item.value)
            elif isinstance(item, ast.JoinedStr):
                found.update(_fstring(item, scope))
        elif isinstance(e, ast.Name) and e.id in scope and position is not None:
            stack.extend(scope[e.id])  # a local table such as http_codes
        elif isinstance(e, ast.Call):
            stack.extend(e.args)  # .get(key, default)
            if isinstance(e.func, ast.Attribute):
                stack.append(e.func.value)
        elif isinstance(e, ast.Dict):
            stack.extend(v for v in e.values if v is not None)
        elif isinstance(e, ast.IfExp | ast.BoolOp):
            stack.extend(ast.iter_child_nodes(e))  # type: ignore[arg-type]
    return found


def _error_classes(trees: list[ast.Module]) -> dict[str, str]:
    """GatewayError and its subclasses → their effective default code."""
    parents: dict[str, str] = {}
    own: dict[str, str] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
            if bases:
                parents[node.name] = bases[0]
            for stmt in node.body:
                target = None
                if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                    target = stmt.targets[0]
                elif isinstance(stmt, ast.AnnAssign):
                    target = stmt.target
                value = getattr(stmt, "value", None)
                if (
                    isinstance(target, ast.Name)
                    and target.id == "code"
                    and isinstance(value, ast.Constant)
                ):
                    own[node.name] = value.value
    codes: dict[str, str] = {}
    for name in parents.keys() | own.keys():
        chain, cur = [], name
        while cur in parents or cur in own:
            chain.append(cur)
            if cur == "GatewayError" or cur not in parents:
                break
            cur = parents[cur]
        if chain and chain[-1] == "GatewayError":
            code = next(own[c] for c in chain if c in own)
            codes[name] = code
    return codes


def _scoped(tree: ast.Module) -> Iterator[tuple[ast.AST, tuple[ast.AST, ...]]]:
    """Every node with its enclosing scopes (the module, then the functions around it);
    the ``code = ...`` attributes of class bodies are left out (they are defaults)."""
    stack: list[tuple[ast.AST, tuple[ast.AST, ...]]] = [(tree, (tree,))]
    while stack:
        node, scopes = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(node, ast.ClassDef) and isinstance(child, ast.Assign | ast.AnnAssign):
                continue
            inner = scopes
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                inner = (*scopes, child)
            yield child, inner
            stack.append((child, inner))


def _code_positions(trees: list[ast.Module]) -> dict[str, int]:
    """Functions and classes (by name) → the positional index of their ``code`` parameter."""
    out: dict[str, int] = {}
    for tree in trees:
        for node in ast.walk(tree):
            fn: ast.FunctionDef | ast.AsyncFunctionDef | None = None
            name = ""
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                fn, name = node, node.name
            elif isinstance(node, ast.ClassDef):
                init = [b for b in node.body if getattr(b, "name", "") == "__init__"]
                if init and isinstance(init[0], ast.FunctionDef):
                    fn, name = init[0], node.name
            if fn is None:
                continue
            params = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
            if params and params[0] == "self":
                params = params[1:]
            if "code" in params:
                out[name] = params.index("code")
    return out


def emitted_codes() -> set[str]:
    trees = [tree for _, tree in modules()]
    classes = _error_classes(trees)
    positions = _code_positions(trees)
    found: set[str] = set()
    for tree in trees:
        local: dict[int, dict[str, list[ast.expr]]] = {}
        for node, chain in _scoped(tree):
            if not isinstance(node, ast.Call | ast.Assign | ast.Dict):
                continue
            scope: dict[str, list[ast.expr]] = {}
            for scope_node in chain[1:]:  # the functions, innermost last (module: no)
                if id(scope_node) not in local:
                    local[id(scope_node)] = _local_strings(scope_node)
                scope.update(local[id(scope_node)])
            if isinstance(node, ast.Dict):  # {"code": "run_interrupted", "message": ...}
                for k, v in zip(node.keys, node.values, strict=True):
                    if isinstance(k, ast.Constant) and k.value == "code":
                        found |= _codes_in(v, scope, None)
                continue
            if isinstance(node, ast.Call):
                kws = {k.arg: k.value for k in node.keywords}
                if "code" in kws:
                    found |= _codes_in(kws["code"], scope, None)
                fn = node.func
                name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
                at = positions.get(name)
                if at is not None and at < len(node.args) and "code" not in kws:
                    found |= _codes_in(node.args[at], scope, None)
                elif name in classes and "code" not in kws:
                    found.add(classes[name])  # the class's default goes out
                continue
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id == "code":
                    found |= _codes_in(node.value, scope, None)
                elif isinstance(target, ast.Tuple):
                    names = [getattr(t, "id", None) for t in target.elts]
                    if "code" in names:
                        found |= _codes_in(node.value, scope, names.index("code"))
    # keep what looks like a code (string constants of messages and keys are met too)
    return {c for c in found if (_CODE.fullmatch(c) and "_" in c) or c in _SINGLE_WORD}


#: codes of one word (``_CODE`` alone would also take message words)
_SINGLE_WORD = frozenset({"unauthorized", "interrupted"})


def documented_codes() -> set[str]:
    """The backticked codes in the ``code`` column of docs/api.md's error table."""
    text = API_DOC.read_text()
    section = text.split("## Errors", 1)[1].split("\n## ", 1)[0]
    codes: set[str] = set()
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] != "status" and not cells[0].startswith("-"):
            codes.update(re.findall(r"`([^`]+)`", cells[1]))
    return codes


def test_every_emitted_code_is_documented_and_every_documented_one_emitted() -> None:
    emitted, documented = emitted_codes(), documented_codes()
    assert "upstream_http_<status>" in emitted and "run_not_found" in emitted  # the parser
    missing = sorted(emitted - documented)
    stale = sorted(documented - emitted)
    assert not missing, f"codes the gateway emits that docs/api.md does not list: {missing}"
    assert not stale, f"codes docs/api.md lists that nothing emits: {stale}"
