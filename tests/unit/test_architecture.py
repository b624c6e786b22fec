"""The shape of ``gateway/``, checked from its source (``ast``, nothing imported):

- the import graph has no cycle (every ``import``/``from ... import``, absolute or
  relative, at module level or inside a function, ``TYPE_CHECKING`` blocks included);
- no function is longer than :data:`MAX_FUNCTION_LINES` lines (``def`` to last line);
- the sans-IO modules (the SSE codec, the path detector and rewriter, the events, the
  shapes, the errors, the signatures, the fronts, HTTP/1 heads) import no trio/HTTP
  library, neither directly nor through another gateway module (no "upward" import
  into the glue);
- the layers import downwards only: the stream engine (``gateway.stream``) nothing but
  the sans-IO core; the HTTP server (``gateway.http``) nothing of what it serves (the
  routes, the app, the proxy, the runs, the store...), only the sans-IO core, the
  stream engine and the few modules listed in :data:`HTTP_MAY_IMPORT`;
- every module lives in one layer (:data:`LAYERS`, lowest first) and imports only
  from its own layer and the ones below it;
- the one seam into a dependency's internals is :mod:`gateway.http.seam`: no other
  gateway module imports from a dependency's private module or names hypercorn's
  worker.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GATEWAY = ROOT / "gateway"
MAX_FUNCTION_LINES = 80
IO_LIBRARIES = frozenset({"trio", "httpx", "quart", "quart_trio", "hypercorn", "anyio"})
SANS_IO = (
    "gateway.core.sse",
    "gateway.core.paths",
    "gateway.core.rewrite",
    "gateway.core.events",
    "gateway.core.checks",
    "gateway.core.errors",
    "gateway.links.signing",
    "gateway.fronts",
    "gateway.fronts.chat",
    "gateway.fronts.responses",
    "gateway.fronts.runs",
    "gateway.fronts.openwebui",
    "gateway.core.chunked",
    "gateway.http.h1",
)
#: what the HTTP server may import of the gateway besides itself, the stream engine and
#: the sans-IO modules: the error tree, the JSON shapes and SSE encoding its replies
#: use, the log helpers, the idle memory trim
HTTP_MAY_IMPORT = frozenset({"gateway.ops.logs", "gateway.ops.memory"})


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sources() -> dict[str, tuple[Path, ast.Module]]:
    return {
        module_name(p): (p, ast.parse(p.read_text(), str(p))) for p in sorted(GATEWAY.rglob("*.py"))
    }


def _is_package(name: str, mods: dict[str, tuple[Path, ast.Module]]) -> bool:
    return mods[name][0].name == "__init__.py"


def imports(name: str, mods: dict[str, tuple[Path, ast.Module]]) -> Iterator[str]:
    """Every module ``name`` imports: gateway modules by name, others by top package."""
    tree = mods[name][1]
    package = name if _is_package(name, mods) else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield _known(alias.name, mods)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield sub if sub in mods else _known(target, mods)


def _known(target: str, mods: dict[str, tuple[Path, ast.Module]]) -> str:
    """The gateway module ``target`` names (or its nearest package), else its top name."""
    if not target.startswith("gateway"):
        return target.split(".")[0]
    while target not in mods and "." in target:
        target = target.rpartition(".")[0]
    return target


def graph() -> dict[str, set[str]]:
    mods = sources()
    return {name: {i for i in imports(name, mods) if i != name} for name in mods}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in edges:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                found.append(sorted(scc))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_has_no_cycle() -> None:
    edges = graph()
    assert (
        len(edges) > 50 and "gateway.core.sse" in edges["gateway.stream.pipeline"]
    )  # the parser works
    assert not cycles(edges), f"import cycles: {cycles(edges)}"


def test_the_cycle_finder_finds_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def long_functions() -> list[tuple[str, int]]:
    out = []
    for name, (_path, tree) in sources().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    out.append((f"{name}.{node.name} (line {node.lineno})", lines))
    return out


def test_no_function_is_longer_than_80_lines() -> None:
    assert not long_functions(), f"functions over {MAX_FUNCTION_LINES} lines: {long_functions()}"


def test_the_sans_io_modules_import_no_trio_or_http_library() -> None:
    edges = graph()
    for name in SANS_IO:
        assert name in edges, name
        direct = edges[name] & IO_LIBRARIES
        assert not direct, f"{name} imports {sorted(direct)}"
        # nor through another gateway module (no upward import into the glue)
        seen, todo = {name}, [name]
        while todo:
            for dep in edges[todo.pop()]:
                if dep in edges and dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        glue = sorted(m for m in seen if edges[m] & IO_LIBRARIES)
        assert not glue, f"{name} reaches trio/HTTP glue through {glue}"


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _gateway_deps(edges: dict[str, set[str]], name: str) -> set[str]:
    return {d for d in edges[name] if d.startswith("gateway") and d != "gateway"}


def test_the_stream_engine_imports_only_the_core() -> None:
    edges = graph()
    stream = [m for m in edges if _in(m, "gateway.stream")]
    assert "gateway.stream.relay" in stream and "gateway.stream.clock" in stream
    for name in stream:
        up = {d for d in _gateway_deps(edges, name) if not _in(d, "gateway.stream")}
        assert all(_in(d, "gateway.core") for d in up), f"{name} imports {sorted(up)}"


def test_the_http_server_imports_nothing_of_what_it_serves() -> None:
    edges = graph()
    http = [m for m in edges if _in(m, "gateway.http")]
    assert "gateway.http.connection" in http and "gateway.http.serve" in http
    allowed = set(SANS_IO) | HTTP_MAY_IMPORT
    for name in http:
        for dep in _gateway_deps(edges, name):
            ok = _in(dep, "gateway.http") or _in(dep, "gateway.stream") or dep in allowed
            assert ok, f"{name} imports {dep} (a layer above the HTTP server)"
    # and the connection handler itself nothing of quart
    for name in ("gateway.http.connection", "gateway.http.exchange", "gateway.http.h1"):
        assert not edges[name] & {"quart", "quart_trio", "werkzeug", "hypercorn"}, name


#: hypercorn's worker and protocol internals (``hypercorn.trio.serve`` is its public entry)
HYPERCORN_INTERNALS = ("hypercorn.trio.run", "hypercorn.trio.tcp_server", "hypercorn.protocol")


def _reaches(name: str, tree: ast.Module) -> list[str]:
    """The private modules of dependencies, and hypercorn's internals, ``name`` imports."""
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules = [node.module]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        else:
            continue
        for module in modules:
            parts = module.split(".")
            private = any(p.startswith("_") for p in parts[1:])
            if parts[0] != "gateway" and (private or module.startswith(HYPERCORN_INTERNALS)):
                found.append(f"{name}: {module}")
    return found


def test_one_seam_into_a_dependency() -> None:
    """Private modules of dependencies and hypercorn's internals are imported by one
    module only, the seam."""
    found = [f for name, (_, tree) in sources().items() for f in _reaches(name, tree)]
    assert found, "the check finds nothing: it is broken"
    outside = [f for f in found if not f.startswith("gateway.http.seam:")]
    assert not outside, outside


#: the layers of ``gateway/``, lowest first: a module imports only from its own layer and
#: the ones below (docs/design.md, "Layers"); ``gateway`` itself holds only the version
LAYERS = (
    "gateway.core",  # sans-IO: errors, events, SSE, paths, rewriting, checks
    "gateway.fronts",  # encoders of the neutral events into each wire format
    "gateway.ops",  # configuration, logs, the instance lock, memory trim, supervisor files
    "gateway.store",  # SQLite and PostgreSQL
    "gateway.principals",  # keys, quotas, sessions
    "gateway.links",  # artifacts, agent homes, signatures, pages
    "gateway.stream",  # the relay engine and the pipeline stages
    "gateway.http",  # the HTTP/1.1 server
    "gateway.clients",  # outbound HTTP: the upstream, Open WebUI
    "gateway.runs",  # background runs
    "gateway.api",  # the API server
    "gateway.proxy",  # the runs proxy for Open WebUI
    "gateway.cli",  # the commands
)


def layer_of(module: str) -> int:
    for i, layer in enumerate(LAYERS):
        if _in(module, layer):
            return i
    raise AssertionError(f"{module} is in no layer: put it in one of {LAYERS}")


def test_every_module_is_in_a_layer_and_imports_downwards() -> None:
    edges = graph()
    assert len({layer_of(m) for m in edges if m not in ("gateway", "gateway.__main__")}) == len(
        LAYERS
    )
    upward = []
    for name in edges:
        if name in ("gateway", "gateway.__main__"):
            continue
        for dep in _gateway_deps(edges, name):
            if layer_of(dep) > layer_of(name):
                upward.append(f"{name} -> {dep}")
    assert not upward, f"imports into a higher layer: {upward}"


def test_the_layer_check_sees_an_upward_import() -> None:
    assert layer_of("gateway.core.paths") < layer_of("gateway.api.routes.chat")
    assert layer_of("gateway.stream.relay") < layer_of("gateway.http.serve")
    try:
        layer_of("gateway.nowhere")
    except AssertionError:
        return
    raise AssertionError("a module outside every layer was accepted")
