"""autosched: a tensor-program auto-scheduler and kernel tuner on Apache TVM.

Heavy modules (tvm, torch, xgboost) are imported lazily so that `autosched --help`
and op files that only use the decorator stay fast.
"""
from .errors import UserError
from .lazy import lazy_names
from .versions import AUTOSCHED_VERSION as __version__
from .workload import load_tasks, workload

__all__ = ["workload", "load_tasks", "UserError", "tune", "export", "open_database", "__version__"]


__getattr__ = lazy_names(__name__, {"tune": ".tuner", "export": ".exporting",
                                     "open_database": ".db"})
