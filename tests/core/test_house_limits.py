"""House limits, checked on the source: no Python file over 400 lines; bench/ uses only
the names our packages export (their `__all__`), never their modules; and the product's
docstrings and comments say what and why, never what a particular run measured (results
belong in bench/results/ and bench/README.md, where they can be rerun and replaced)."""
from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ("autosched", "search_space", "cost_model")
CAPPED = ("autosched", "search_space", "cost_model", "bench", "tests")
MAX_LINES = 400


def long_files(root: Path, tops=CAPPED, cap: int = MAX_LINES) -> list[str]:
    found = []
    for top in tops:
        for path in sorted((root / top).rglob("*.py")):
            lines = len(path.read_text().splitlines())
            if lines > cap:
                found.append(f"{path.relative_to(root).as_posix()}: {lines} lines")
    return found


def test_no_python_file_is_over_400_lines():
    found = long_files(ROOT)
    assert not found, "\n".join(found)


def exported(init: Path) -> set[str]:
    """The names a package's `__init__.py` lists in `__all__` (assigned or extended)."""
    names = set()
    for node in ast.walk(ast.parse(init.read_text(), str(init))):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AugAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) \
                and isinstance(node.value, (ast.List, ast.Tuple)):
            names |= {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
    return names


def private_reaches(root: Path, top: str = "bench") -> list[str]:
    """Every import in `top` (functions included) of one of our modules, or of a name a
    package of ours does not export."""
    def package(module: str) -> Path | None:
        init = root.joinpath(*module.split("."), "__init__.py")
        return init if init.is_file() else None

    found = []
    for path in sorted((root / top).rglob("*.py")):
        where = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] in PROJECT and package(a.name) is None:
                        found.append(f"{where}:{node.lineno} imports the module {a.name}")
            elif isinstance(node, ast.ImportFrom) and node.level == 0 \
                    and (node.module or "").split(".")[0] in PROJECT:
                init = package(node.module)
                if init is None:
                    found.append(f"{where}:{node.lineno} imports from the module "
                                 f"{node.module}")
                    continue
                hidden = [a.name for a in node.names if a.name not in exported(init)]
                if hidden:
                    found.append(f"{where}:{node.lineno} imports {', '.join(hidden)} from "
                                 f"{node.module}, which does not export it")
    return found


def test_bench_imports_only_what_our_packages_export():
    found = private_reaches(ROOT)
    assert not found, "\n".join(found)


# What a particular run's measurement looks like in prose. Inline code (`1.234 ms`, a
# format's example) is left out before matching; a unit default ("48 KiB", "a 30 s
# timeout") or a budget ("40%") is no measurement and matches none of these.
_TIME = r"\d+(?:\.\d+)?\s?(?:ms|us|µs)\b"
MEASUREMENTS = {
    "cites a bench result": r"bench/(?:results|models)/",
    "a commit's measurement": r"\bcommit [0-9a-f]{7,40} has the (?:measurement|comparison)",
    "a ratio of two runs": r"(?<![\w.])x\s?\d+\.\d+\b|\b\d+\.\d+x\b"
                           r"|(?<![\w.])[01]\.\d{3}(?![\w.]|\s?(?:ms|us|µs|s|[KMG]i?B|%))",
    "an observed time": rf"\b(?:measured|read|ran|took|timed)\b[^.;]{{0,60}}?{_TIME}",
    "times side by side": rf"{_TIME}[^.;]{{0,100}}?{_TIME}",
    "an observed speed-up": r"\b(?:measured|read|ran)\b[^.;]{0,40}?\d+(?:\.\d+)?% "
                            r"(?:slower|faster)",
    "a session": r"\bsession \d+\b",
}
_PATTERNS = {name: re.compile(p, re.S) for name, p in MEASUREMENTS.items()}


def prose(source: str):
    """(first line, text) of every string and every run of comment lines in `source`."""
    comment, start = [], 0
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            start = start if comment else tok.start[0]
            comment.append(tok.string.lstrip("#"))
        elif tok.type not in (tokenize.NL, tokenize.NEWLINE) or not comment:
            if comment:
                yield start, "\n".join(comment)
                comment = []
            if tok.type == tokenize.STRING:
                yield tok.start[0], tok.string
    if comment:
        yield start, "\n".join(comment)


def measurements(source: str, where: str) -> list[str]:
    found = []
    for line, text in prose(source):
        text = re.sub(r"`[^`\n]*`", "``", text)
        for name, pattern in _PATTERNS.items():
            for m in pattern.finditer(text):
                at = line + text[:m.start()].count("\n")
                found.append(f"{where}:{at} {name}: {' '.join(m.group(0).split())[:80]}")
    return found


def test_product_prose_cites_no_measurement_of_a_particular_run():
    found = []
    for top in PROJECT:
        for path in sorted((ROOT / top).rglob("*.py")):
            found += measurements(path.read_text(), path.relative_to(ROOT).as_posix())
    assert not found, "\n".join(found)


def test_the_limits_see_what_they_forbid(tmp_path):
    """Planted: a 401-line file (400 pass), bench reaching into a module or past
    `__all__` (inside a function too), and run results in a docstring and comments."""
    for rel, text in {
        "tests/long.py": "x = 1\n" * 401, "bench/fits.py": "x = 1\n" * 400,
        "autosched/__init__.py": "__all__ = ['tune']\n",
        "autosched/db/__init__.py": "__all__ = ['open_database']\n__all__ += ['Record']\n",
        "autosched/db/rows.py": "",
        "bench/run.py": "import provenance\nimport autosched.db\nfrom autosched import tune\n"
                        "from autosched.db import Record, open_database\n"
                        "def main():\n    import autosched.db.rows\n"
                        "    from autosched.db.rows import to_row\n"
                        "    from autosched.db import rows, open_database\n",
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert long_files(tmp_path) == ["tests/long.py: 401 lines"]
    assert private_reaches(tmp_path) == [
        "bench/run.py:6 imports the module autosched.db.rows",
        "bench/run.py:7 imports from the module autosched.db.rows",
        "bench/run.py:8 imports rows from autosched.db, which does not export it"]
    planted = ('"""Kept step 36.9 ms and 41 ms on bench/models/unet.py; the plan read 33 ms '
               'and ran\n'
               '10% faster, x1.18 over torch (1.076 on session 3)."""\n'
               'LIMIT = 48 * 1024  # 48 KiB of shared memory, a 30 s timeout, 40% budgets\n'
               'FMT = "`1.234 ms` or `56.7 us`"\n'
               '# commit 3d3b6b4 has the measurement:\n#   2.4 ms and 4.3 ms apart\n')
    assert [f.split(" ", 1)[1].split(":")[0] for f in measurements(planted, "f.py")] == [
        "cites a bench result", "a ratio of two runs", "a ratio of two runs",
        "an observed time", "times side by side", "an observed speed-up", "a session",
        "a commit's measurement", "times side by side"]
    assert [f.split(" ")[0] for f in measurements(planted, "f.py")][-2:] == ["f.py:5", "f.py:6"]
