"""The project's module structure: no import cycles, the client apart from the server, the
fusion table's order checked. Read from the sources (ast), so nothing is imported to test."""

from __future__ import annotations

import ast
import pathlib

import pytest

from graphengine.engine.optimize.fusion import FUSIONS, Fusion, check_order

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Source folder -> package, as pyproject.toml maps them into the wheel.
PACKAGES = {"engine": "graphengine.engine", "server": "graphengine.server",
            "clients": "graphengine.clients", "api": "graphengine.api",
            "cli": "graphengine.cli", "runtime_ext/python/graphengine": "graphengine"}


def _modules() -> dict[str, pathlib.Path]:
    mods = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join([package, *parts])] = path
    return mods


MODULES = _modules()


def _type_checking_only(tree: ast.Module) -> set[ast.AST]:
    """Nodes under `if TYPE_CHECKING:` (annotations only: never imported at run time)."""
    skip: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for child in node.body:
                skip.update(ast.walk(child))
    return skip


def _imports(name: str, path: pathlib.Path, top_level: bool) -> set[str]:
    """Project modules `name` imports: at import time only (`top_level`), or anywhere."""
    tree = ast.parse(path.read_text())
    skip = _type_checking_only(tree)
    nodes = [n for n in (tree.body if top_level else ast.walk(tree)) if n not in skip]
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".")
                if path.name != "__init__.py":
                    parts.pop()
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES]
            found.update(subs)
            if len(subs) < len(node.names):  # names the module itself defines
                found.add(base)
    return {m for m in found if m in MODULES and m != name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_module_imports_itself_back_at_import_time():
    graph = {m: _imports(m, p, top_level=True) for m, p in MODULES.items()}
    assert len(graph) > 100  # the walk found the project
    assert _cycles(graph) == []


def test_no_import_cycle_even_through_imports_inside_functions():
    """Deferred imports (inside functions, to keep a module light) close no cycle either.
    The package root's lazy attributes (graphengine.Session, .Client) are not imports of
    the modules that import graphengine._runtime, so the root is left out."""
    graph = {m: _imports(m, p, top_level=False) - {"graphengine"} for m, p in MODULES.items()}
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_one():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_client_never_imports_the_server():
    """Anywhere in clients/, also inside functions: the SDK installs and runs without the
    server (what both need is in graphengine.api)."""
    for name, path in MODULES.items():
        if name.startswith("graphengine.clients"):
            server = sorted(m for m in _imports(name, path, top_level=False)
                            if m.startswith("graphengine.server"))
            assert server == [], f"{name} imports {server}"


def test_the_fusion_table_order_is_checked():
    names = [row.name for row in FUSIONS]
    assert names[-1] == "eltwise_chain" and names.index("activation") < names.index("conv_dw")
    check_order(FUSIONS)
    swapped = list(FUSIONS)
    i, j = names.index("activation"), names.index("conv_dw")
    swapped[i], swapped[j] = swapped[j], swapped[i]
    with pytest.raises(ValueError, match="'conv_dw' must run after 'activation', but the "
                                         "table has it later"):
        check_order(swapped)
    lone = Fusion("x", FUSIONS[0].match, FUSIONS[0].rewrite, after=("nope",))
    with pytest.raises(ValueError, match="'x' must run after 'nope', which the table does "
                                         "not have"):
        check_order([lone])
    check_order([lone], complete=False)  # a part of the table: only its own order
    with pytest.raises(ValueError, match="repeats"):
        check_order([FUSIONS[0], FUSIONS[0]])


def test_the_server_core_speaks_no_grpc():
    """server/core/ is the in-process service: gRPC (and the rpc layer) stay in server/rpc/."""
    for name, path in MODULES.items():
        if name.startswith("graphengine.server.core"):
            text = path.read_text()
            assert "import grpc" not in text and "from grpc" not in text, name
            rpc = sorted(m for m in _imports(name, path, top_level=False)
                         if m.startswith("graphengine.server.rpc"))
            assert rpc == [], f"{name} imports {rpc}"


RUNTIME = ROOT / "runtime_ext" / "src"
# The one file that lists the built-in backends, and the module's host-only measurement.
_NAMES_A_BACKEND = {"backends.cc": ("host/", "ref/"), "module.cc": ("host/peak.h",)}


def _includes(path: pathlib.Path, quoted_only: bool = False) -> list[str]:
    """What `path` #includes: "project" headers, and <system> ones unless quoted_only."""
    out = []
    for line in path.read_text().splitlines():
        if line.startswith("#include"):
            if '"' in line:
                out.append(line.split('"')[1])
            elif not quoted_only:
                out.append(line.split("<")[1].split(">")[0])
    return out


def test_the_generic_runtime_holds_no_backend_library():
    """src/ is the generic runtime: no oneDNN include or type in it, and no backend's header
    but where the backends are listed (backends.cc) — so a second backend plugs in beside
    src/host/ without touching it."""
    generic = [p for p in RUNTIME.iterdir() if p.suffix in (".h", ".cc", ".inc")]
    assert len(generic) > 10
    for path in generic:
        allowed = _NAMES_A_BACKEND.get(path.name, ())
        for inc in _includes(path):
            assert "dnnl" not in inc, f"{path.name} includes {inc}"
        for inc in _includes(path, quoted_only=True):
            if "/" in inc:
                assert inc.startswith(allowed), f"{path.name} includes the backend header {inc}"
        if path.suffix != ".cc":
            assert "dnnl::" not in path.read_text(), f"{path.name} names a oneDNN type"


def test_a_backend_needs_nothing_of_another():
    """The reference backend (src/ref/) is built from the generic headers alone."""
    ref = list((RUNTIME / "ref").iterdir())
    assert ref
    for path in ref:
        for inc in _includes(path):
            assert "dnnl" not in inc, f"{path.name} includes {inc}"
        for inc in _includes(path, quoted_only=True):
            assert (RUNTIME / inc).exists() or (RUNTIME / "ref" / inc).exists(), \
                f"{path.name} includes {inc}, which is neither generic nor its own"
