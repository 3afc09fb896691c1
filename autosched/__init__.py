"""autosched: a tensor-program auto-scheduler and kernel tuner on Apache TVM.

Heavy modules (tvm, torch, xgboost) are imported lazily so that `autosched --help`
and op files that only use the decorator stay fast.

The names below are the public face of the modules that sit at the package's top
(targets, versions, workloads, tuning, exporting, training data, threads, tables);
scripts outside the package (bench/, examples/) import them from here.
"""
from .errors import UserError
from .lazy import lazy_names
from .versions import AUTOSCHED_VERSION as __version__
from .workload import load_instances, load_op_file, load_tasks, make_task, workload

__all__ = ["workload", "load_tasks", "load_op_file", "load_instances", "make_task",
           "UserError", "tune", "tune_tasks", "TuneConfig", "export", "write_library",
           "KernelChoice", "open_database", "resolve_target", "tvm_target",
           "cpu_fingerprint", "current_versions", "library_versions", "rebuild_task",
           "groups_from_database", "train_shipped", "model_name", "PACKAGE_DIR",
           "machine_cores", "size_kernel_pool", "dry_run_task", "DeviceCodeCheck",
           "format_table", "MeasureResult", "__version__"]


__getattr__ = lazy_names(__name__, {
    "tune": ".tuner", "tune_tasks": ".tuner", "TuneConfig": ".config",
    "export": ".exporting", "write_library": ".exporting", "KernelChoice": ".exporting",
    "open_database": ".db",
    "resolve_target": ".target", "tvm_target": ".target", "cpu_fingerprint": ".target",
    "current_versions": ".versions", "library_versions": ".versions",
    "rebuild_task": ".training_data", "groups_from_database": ".training_data",
    "train_shipped": ".shipped_models", "model_name": ".shipped_models",
    "PACKAGE_DIR": ".shipped_models",
    "machine_cores": ".threads", "size_kernel_pool": ".threads",
    "dry_run_task": ".dry_run", "DeviceCodeCheck": ".dry_run",
    "format_table": ".tables", "MeasureResult": ".results"})
