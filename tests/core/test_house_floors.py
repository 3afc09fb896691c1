"""The floors of `autosched/`, checked on the source: every import, at module level or
inside a function, goes to the importer's own room or to a room on a lower floor, and no
module reaches itself through others (no import cycle). A room is a subpackage of
`autosched` (`measure`, `runtime`, ...) or one of its top-level modules (`target`,
`tuner`, ...). Imports of third-party packages (tvm, torch, xgboost, numpy) are not our
floors at all, wherever they stand; the leaves (`search_space`, `cost_model`) have their
own rule in test_house_rules.py."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The floors, from the ground up. A room may import its own modules and the rooms of the
# floors below; rooms of one floor are peers and do not import each other.
FLOORS = (
    # the ground: units that any floor may use
    ("errors", "lazy", "tables", "versions", "results", "canonical", "threads", "gpu_info",
     "task"),
    ("time_limit", "tvm_runtime", "native"),
    ("user_file", "target", "kernel_pool", "graph_call"),
    ("validation",),
    ("workload",),
    # the kernel side: store and search, then measurement, then what a tuning run is made of
    ("db", "search", "task_scheduler", "trial_budget"),
    ("measure",),
    ("components", "config", "dry_run", "training_data", "exporting"),
    ("kernel_source", "shipped_models", "metaschedule_export"),
    ("warm_start",),
    ("tuner",),
    # the PyTorch side: our kernels as torch ops <- a PyTorch model <- training plans
    ("torch",),
    ("model",),
    ("runtime",),
    # the command line, then the package's face (`autosched/__init__.py`) and `-m autosched`
    ("cli",),
    ("autosched", "__main__"),
)

# Imports that run against the floors on purpose: (importing module, imported module)
# -> why. Keep it short; an entry is a debt with its reason, not a place to park one.
ALLOWED_UPWARD: dict[tuple[str, str], str] = {
    ("autosched.runtime.memeff.workloads", "autosched"):
        "an op file shipped in the package, loaded by path (`autosched tune FILE`) and never "
        "imported: it uses `@autosched.workload` as every user's op file does",
}


def modules_of(top: Path) -> dict[str, Path]:
    """Dotted module name -> file, for the package at `top`."""
    out = {}
    for path in sorted(top.rglob("*.py")):
        parts = list(path.relative_to(top.parent).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports_of(name: str, path: Path, tree: ast.AST, known) -> list[tuple[str, int]]:
    """(imported module of `known`, line) for every import in `tree`, functions included:
    `from .x import y` names the module `x.y` when there is one, else `x`, and with it
    the packages Python initialises first (`autosched.measure` for
    `autosched.measure.cuda.compiler`), but for the top package and the importer's own."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in known else module
                       for a in node.names]
        else:
            continue
        for target in dict.fromkeys(targets):
            while target not in known and "." in target:
                target = target.rsplit(".", 1)[0]
            parts = target.split(".")
            for i in range(min(2, len(parts)), len(parts) + 1):
                step = ".".join(parts[:i])
                if step in known and (step == target or not name.startswith(step + ".")):
                    found.append((step, node.lineno))
    return found


def import_graph(top: Path) -> dict[str, list[tuple[str, str]]]:
    """Module -> (imported module, "file:line" of the import) for the package at `top`."""
    known, graph = modules_of(top), {}
    for name, path in known.items():
        where = path.relative_to(top.parent).as_posix()
        graph[name] = [(target, f"{where}:{line}") for target, line in
                       imports_of(name, path, ast.parse(path.read_text(), str(path)), known)]
    return graph


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def floor_violations(graph, floors=FLOORS, allowed=ALLOWED_UPWARD) -> list[str]:
    level = {r: i for i, rooms in enumerate(floors) for r in rooms}
    found = []
    for module, targets in graph.items():
        here = room(module)
        if here not in level:
            found.append(f"{module}: room {here!r} is on no floor (add it to FLOORS)")
            continue
        for target, where in targets:
            there = room(target)
            if there == here or level.get(there, len(floors)) < level[here] \
                    or any(m == module and (t + ".").startswith(target + ".")
                           for m, t in allowed):  # the module, or a package on its way
                continue
            how = "a peer on the same floor" if level.get(there) == level[here] else \
                "a floor above"
            found.append(f"{where} imports {target} ({how})")
    # one line an import: `autosched.measure.run` says it, not also `autosched.measure`
    return sorted(f for f in set(found)
                  if not any(g != f and g.startswith(f.split(" (")[0] + ".") for g in found))


def cycles(graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w, _ in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_every_room_is_on_one_floor():
    rooms = [r for floor in FLOORS for r in floor]
    assert len(rooms) == len(set(rooms))
    present = {room(m) for m in modules_of(ROOT / "autosched")}
    assert set(rooms) == present, (f"on no floor: {sorted(present - set(rooms))}; "
                                   f"no longer there: {sorted(set(rooms) - present)}")
    assert all(pair[0] in import_graph(ROOT / "autosched") for pair in ALLOWED_UPWARD)


def test_imports_only_go_down_the_floors_also_inside_functions():
    found = floor_violations(import_graph(ROOT / "autosched"))
    assert not found, "\n".join(found)


def test_no_import_cycle_among_autosched_modules():
    found = cycles(import_graph(ROOT / "autosched"))
    assert not found, "\n".join(" -> ".join(c) for c in found)


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root / "autosched"


def test_the_floor_and_cycle_checks_see_what_they_forbid(tmp_path):
    """Planted in a tree of the same shape: an import up the floors inside a function,
    one between peers, one through the package face, a room on no floor, a cycle."""
    top = _tree(tmp_path, {
        "autosched/__init__.py": "from .errors import UserError\n",
        "autosched/errors.py": "class UserError(Exception):\n    pass\n",
        "autosched/db/__init__.py": "",
        "autosched/db/store.py": "def f():\n    from ..measure import run\n",
        "autosched/measure/__init__.py": "",
        "autosched/measure/run.py": "import autosched.db.store\nfrom .. import errors\n",
        "autosched/search.py": "from .db import store\n",
        "autosched/torch/ops.py": "import torch\nfrom autosched.runtime import plan\n",
        "autosched/runtime/plan.py": "import autosched\nfrom ..torch import ops\n",
        "autosched/attic.py": "",
    })
    floors = (("errors",), ("db", "search"), ("measure",), ("torch",), ("runtime",),
              ("autosched",))
    graph = import_graph(top)
    assert floor_violations(graph, floors, {}) == [
        "autosched.attic: room 'attic' is on no floor (add it to FLOORS)",
        "autosched/db/store.py:2 imports autosched.measure.run (a floor above)",
        "autosched/runtime/plan.py:1 imports autosched (a floor above)",
        "autosched/search.py:1 imports autosched.db.store (a peer on the same floor)",
        "autosched/torch/ops.py:2 imports autosched.runtime.plan (a floor above)"]
    assert floor_violations(graph, floors, {("autosched.db.store", "autosched.measure.run"):
                                            "planted"})[1].startswith("autosched/runtime")
    assert cycles(graph) == [["autosched.db.store", "autosched.measure.run"],
                             ["autosched.runtime.plan", "autosched.torch.ops"]]
