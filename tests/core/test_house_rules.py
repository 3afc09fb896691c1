"""The architecture's rules, checked on the source: the leaf packages stay leaves, no
module reaches into another's private names, duck typing on our own objects is limited
to the documented list below, and no test patches the product's internals."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ("autosched", "search_space", "cost_model")

# Every getattr / hasattr in the product, by file and by what it inspects. Each is on an
# object the project does not define (TVM IR nodes, torch modules, argparse results,
# optional attributes of the user's functions) or the one dynamic lookup the worker
# protocol needs. Anything else is duck typing on our own objects: give the interface the
# attribute instead.
ALLOWED_DUCK_TYPING = {
    "autosched/exporting.py": {"obj": "JSON fallback for the user's callables"},
    "autosched/measure/reference/data.py": {"ml_dtypes": "the dtype module of a third party"},
    "autosched/measure/worker.py": {"importlib.import_module(module_name)":
                                    "the worker protocol names its handler as module:function"},
    "autosched/measure/beside_torch.py": {
        "torch": "torch's dtypes, named as TVM names them",
        "importlib.import_module(module_name)":
            "a timing request names the torch peer as module:function",
        "torch.ops.autosched_measure": "the timing op of the candidate's arity, defined here"},
    "autosched/lazy.py": {"importlib.import_module(module, package)":
                          "a package's public names resolved on first use"},
    "autosched/cli/progress.py": {"self.stream": "any text stream the caller passes"},
    "autosched/versions.py": {"tvm_ffi": "third-party package without __version__ sometimes"},
    "autosched/workload.py": {"obj": "the @workload mark on the user's functions"},
    "autosched/db/rows.py": {"rec": "Record fields by name, listed in the row schema"},
    "autosched/db/sqlite.py": {"e": "sqlite3 errors carry sqlite_errorcode on 3.11+"},
    "autosched/torch/ops.py": {"torch.ops": "torch's op namespaces",
                               "getattr(torch.ops, NAMESPACE)": "torch's op namespaces"},
    "autosched/torch/reference.py": {"module": "the user's reference module",
                                     "override": "the user's reference function"},
    "autosched/runtime/checkpointing.py": {
        "mode": "torch's selective-checkpoint dispatch mode (its cache, on torch 2.11)",
        "leaf": "that cache's entries wrap each output"},
    "autosched/runtime/memeff/functions.py": {"weight": "a cache on a torch tensor"},
    "autosched/runtime/module_tree.py": {"module": "torch nn.Module hook dicts"},
    "search_space/analysis.py": {"stmt": "TVM statement nodes", "expr": "TVM expression nodes"},
    "search_space/cpu/common.py": {"self._sch": "TVM's Schedule class and its methods",
                                   "attr": "a TVM Schedule method's type-checking wrapper"},
    "search_space/cpu/limits.py": {"stmt": "TVM statement nodes"},
    "search_space/cuda/limits.py": {"node": "TVM expression nodes"},
    "search_space/tir.py": {"obj": "TVM FFI type info", "node": "TVM IR node fields",
                            "e": "TVM expression nodes: PrimExpr has .ty, older .dtype"},
    "cost_model/ir_walk.py": {"e": "TVM expression nodes", "e.op": "TVM call targets",
                              "s": "TVM statement nodes"},
    "cost_model/tirx_read.py": {"s": "TVM's ScopeIdDefStmt: its field is named def"},
    "cost_model/__init__.py": {"importlib.import_module(_LAZY[name], __name__)":
                               "the package's xgboost-backed names resolved on first use"},
}


def _sources(*tops: str):
    for top in tops:
        for path in sorted((ROOT / top).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(), str(path))


def _imported_roots(tree) -> set[str]:
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("leaf, may_use", [("search_space", set()),
                                           ("cost_model", {"search_space"})])
def test_leaf_packages_import_nothing_of_the_application(leaf, may_use):
    for path, tree in _sources(leaf):
        used = _imported_roots(tree) & set(PROJECT) - {leaf} - may_use
        assert not used, f"{path} imports {sorted(used)}"
    code = (f"import sys, {leaf}\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'autosched'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    assert out.strip() == "[]"


def test_no_module_imports_a_private_name_of_another():
    found = []
    for path, tree in _sources(*PROJECT, "tests", "bench"):
        modules = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                ours = (node.module or "").split(".")[0] in PROJECT + ("support",) \
                    or node.level > 0
                for a in node.names:
                    if ours and a.name.startswith("_") and not a.name.startswith("__"):
                        found.append(f"{path}:{node.lineno} imports {a.name}")
                    if ours:
                        modules.add(a.asname or a.name)
            elif isinstance(node, ast.Import):
                modules |= {a.asname or a.name.split(".")[0] for a in node.names
                            if a.name.split(".")[0] in PROJECT}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in modules and node.attr.startswith("_") \
                    and not node.attr.startswith("__"):
                found.append(f"{path}:{node.lineno} uses {node.value.id}.{node.attr}")
    assert not found, "\n".join(found)


def test_duck_typing_only_where_documented():
    found, used = [], set()
    for path, tree in _sources(*PROJECT):
        allowed = ALLOWED_DUCK_TYPING.get(path, {})
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("getattr", "hasattr") and node.args:
                subject = ast.unparse(node.args[0])
                if subject.startswith("type(") and subject.endswith(")"):
                    subject = subject[5:-1]  # a class attribute of the same object
                if subject in allowed:
                    used.add((path, subject))
                else:
                    found.append(f"{path}:{node.lineno} {node.func.id}({subject}, ...)")
    assert not found, "\n".join(found)
    stale = {(p, s) for p, subjects in ALLOWED_DUCK_TYPING.items() for s in subjects} - used
    assert not stale, f"allowed but no longer used (remove them): {sorted(stale)}"


def _patches_the_product(call: ast.Call, project_names: set[str]) -> bool:
    target = call.args[0]
    if isinstance(target, ast.Constant) and isinstance(target.value, str):
        return target.value.split(".")[0] in PROJECT
    text = ast.unparse(target)
    if text == "sys.modules":
        key = call.args[1] if len(call.args) > 1 else None
        return isinstance(key, ast.Constant) and str(key.value).split(".")[0] in PROJECT
    root = text.split(".")[0].split("(")[0]
    return root in project_names or root == "type"


def test_no_test_patches_the_product():
    found = []
    for path, tree in _sources("tests"):
        project_names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PROJECT:
                project_names |= {a.asname or a.name for a in node.names}
            elif isinstance(node, ast.Import):
                project_names |= {a.asname or a.name.split(".")[0] for a in node.names
                                  if a.name.split(".")[0] in PROJECT}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("setattr", "setitem", "delattr", "delitem") \
                    and isinstance(node.func.value, ast.Name) \
                    and node.func.value.id == "monkeypatch" and node.args \
                    and _patches_the_product(node, project_names):
                found.append(f"{path}:{node.lineno} {ast.unparse(node)[:80]}")
    assert not found, "\n".join(found)


def test_the_checks_see_what_they_forbid(tmp_path):
    """The scans are not vacuous: each flags a sample of what it forbids."""
    tree = ast.parse("from autosched.measure import local_runner\n"
                     "monkeypatch.setattr(local_runner, 'RUNS', 1)\n"
                     "monkeypatch.setattr('autosched.tuner.x', 1)\n"
                     "monkeypatch.setitem(sys.modules, 'autosched.torch', None)\n")
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    assert all(_patches_the_product(c, {"local_runner"}) for c in calls)
    assert not _patches_the_product(ast.parse("monkeypatch.setattr(glob, 'glob', f)")
                                    .body[0].value, {"local_runner"})
    assert _imported_roots(ast.parse("import autosched.db\nfrom cost_model import x")) == \
        {"autosched", "cost_model"}
