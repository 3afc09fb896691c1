"""autosched: a tensor-program auto-scheduler and kernel tuner on Apache TVM.

Heavy modules (tvm, torch, xgboost) are imported lazily so that `autosched --help`
and op files that only use the decorator stay fast.
"""
from .errors import UserError
from .versions import AUTOSCHED_VERSION as __version__
from .workload import load_tasks, workload

__all__ = ["workload", "load_tasks", "UserError", "tune", "export", "open_database", "__version__"]


def __getattr__(name):
    if name == "tune":
        from .tuner import tune

        return tune
    if name == "export":
        from .exporting import export

        return export
    if name == "open_database":
        from .db import open_database

        return open_database
    raise AttributeError(name)
