"""search_space is a leaf: it imports nothing from autosched, and its rule sets are
found through the one table in space.py."""
from __future__ import annotations

import os
import pkgutil
import subprocess
import sys

import pytest

import search_space
from autosched.target import TargetSpec, resolve_target
from search_space import cpu, cuda, generate_space

from support.cpu_cases import ROOT, small_task


def _modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(search_space.__path__, "search_space."))


def test_no_module_of_search_space_loads_autosched():
    code = ("import importlib, sys\n"
            f"for name in {['search_space'] + _modules()!r}:\n"
            "    importlib.import_module(name)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'autosched'))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_sub_packages_name_the_same_jobs_alike():
    names = {pkg: {m.name for m in pkgutil.iter_modules(
        [os.path.join(search_space.__path__[0], pkg)])} for pkg in ("cpu", "cuda")}
    shared = {"rules", "common", "tiling", "reduction", "limits"}
    assert shared <= names["cpu"] and shared <= names["cuda"]


def test_each_target_kind_gets_its_rule_set(target):
    task = small_task("matmul")
    assert generate_space(task, target).rules is cpu.RULES
    assert generate_space(task, resolve_target("cuda")).rules is cuda.RULES
    with pytest.raises(ValueError, match="no search-space rules for target kind"):
        generate_space(task, TargetSpec("opencl", {"kind": "opencl"}, {}, False))
