"""The runtime package's modules import each other without a cycle, and its public names
resolve.

The graph is read from the source (every import statement, function-level ones included,
since a lazy import inside a function still ties two modules together), so it needs no
torch and checks modules whatever order a test run happens to import them in.
"""
from __future__ import annotations

import ast
from pathlib import Path

import autosched.runtime

PACKAGE = autosched.runtime.__name__
ROOT = Path(autosched.runtime.__file__).parent


def module_name(path: Path) -> str:
    parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def runtime_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _ancestors(name: str) -> list[str]:
    """The packages Python initialises before `name`, inside the runtime package."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(len(PACKAGE.split(".")), len(parts))]


def _nearest_module(name: str, modules) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imported_names(path: Path, name: str) -> list[str]:
    """Every dotted name an import statement in `path` may load (relative ones resolved)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0]
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module
            out.append(base)
            out += [f"{base}.{alias.name}" for alias in node.names]   # submodules by name
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "lazy_names" \
                and len(node.args) > 1 and isinstance(node.args[1], ast.Dict):
            # lazy_names(__name__, {"plan": ".make_plan"}): imported on first use
            out += [f"{package}{v.value}" if v.value.startswith(".") else v.value
                    for v in node.args[1].values if isinstance(v, ast.Constant)]
    return out


def import_graph() -> dict[str, set[str]]:
    """Runtime module -> the runtime modules importing it runs (parent packages included:
    importing a.b.c runs a/b/__init__.py first)."""
    modules = runtime_modules()
    graph = {}
    for name, path in modules.items():
        edges = set()
        for imported in imported_names(path, name):
            target = _nearest_module(imported, modules)
            if target is None:
                continue
            for t in [*_ancestors(target), target]:
                if t != name and t not in _ancestors(name):
                    edges.add(t)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path [a, b, ..., a], or None (depth-first search)."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_graph_sees_relative_lazy_and_package_imports():
    graph = import_graph()
    rt = PACKAGE
    assert len(graph) >= 25
    assert f"{rt}.prediction" in graph[f"{rt}.solver"]                 # from .prediction
    assert f"{rt}.make_plan" in graph[rt]                              # lazy, in __getattr__
    assert f"{rt}.module_tree" in graph[f"{rt}.memeff.swap"]           # from ..module_tree
    assert f"{rt}.memeff.library" in graph[f"{rt}.memeff"]             # a package's own
    assert f"{rt}.memeff.kernels" in graph[f"{rt}.memeff.workloads"]   # absolute import


def test_runtime_modules_import_each_other_without_a_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_public_names_resolve_and_no_submodule_shadows_one():
    for name in autosched.runtime.__all__:
        assert getattr(autosched.runtime, name) is not None, name
    submodules = {n.rpartition(".")[2] for n in runtime_modules()}
    assert not submodules & set(autosched.runtime.__all__)
