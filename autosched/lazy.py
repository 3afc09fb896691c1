"""Public names of a package resolved on first use, so importing the package stays cheap
(no tvm, torch or xgboost until a name that needs them is touched).

    __getattr__ = lazy_names(__name__, {"tune": ".tuner", "export": ".exporting"})
"""
from __future__ import annotations

import importlib


def lazy_names(package: str, where: dict[str, str]):
    """A module-level `__getattr__` for `package`: `where` maps each public name to the
    module (relative to `package`, or absolute) that defines it under the same name."""
    def __getattr__(name: str):
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module, package), name)
    return __getattr__
