"""Op files and workloads.

An op file is plain Python. Functions decorated with `@autosched.workload` take shape
parameters with defaults and return TE tensors, inputs first, outputs last. The file is
executed in its own namespace; the decorator only marks functions (no global registry),
and `load_op_file` collects the marked ones.
"""
from __future__ import annotations

import inspect
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Callable

from .errors import UserError
from .task import Task, TensorSpec
from .time_limit import time_limit
from .user_file import first_line, run_user_file
from .validation import check_args, check_inputs_returned, check_tensors, distinct_names

log = logging.getLogger("autosched.workload")

_MARK = "__autosched_workload__"

# Seconds an op file may take to load, and a workload to build its tensors: a file that
# loops or computes at import must not hang the CLI.
LOAD_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class WorkloadDef:
    """A workload function, its parameters with defaults, and optional metadata."""

    name: str
    func: Callable
    params: dict[str, Any]
    variants: tuple[dict, ...] = ()
    meta: dict = field(default_factory=dict)


def workload(func: Callable | None = None, *, name: str | None = None,
             variants: list[dict] | None = None, **meta):
    """Mark a function as an autosched workload.

    `variants` lists several argument sets (shape variants) that `tune` and `export`
    instantiate when the user gives no `--arg`. Extra keyword arguments (for example
    `backward=...`) are kept as metadata for the torch integration.
    """

    def mark(f: Callable) -> Callable:
        setattr(f, _MARK, {"name": name or f.__name__, "variants": tuple(variants or ()),
                           "meta": dict(meta)})
        return f

    return mark(func) if func is not None else mark


def _definition(obj: Callable) -> WorkloadDef:
    mark = getattr(obj, _MARK)
    return definition(obj, mark["name"], mark["variants"], mark["meta"])


def definition(func: Callable, name: str | None = None, variants: tuple = (),
               meta: dict | None = None) -> WorkloadDef:
    """The WorkloadDef of a function returning TE tensors, marked or not (workloads that
    the product generates itself, such as the operators of a model, are not marked)."""
    name = name or func.__name__
    params = {}
    for p in inspect.signature(func).parameters.values():
        if p.default is inspect.Parameter.empty:
            raise UserError(f"workload '{name}': parameter '{p.name}' needs a default")
        params[p.name] = p.default
    return WorkloadDef(name, func, params, tuple(variants), dict(meta or {}))


def load_op_file(path: str, timeout_s: float | None = LOAD_TIMEOUT_S) -> dict[str, WorkloadDef]:
    """Execute an op file in its own namespace and return its workloads by name; the
    file must finish loading within `timeout_s` seconds (None: no limit)."""
    if not os.path.isfile(path):  # said before tvm's import, which takes seconds
        raise UserError(f"op file not found: {path}")
    import tvm.te  # noqa: F401  (our dependency's import time is not the op file's)

    namespace = run_user_file(path, "op file", "autosched_op_", timeout_s)
    found = {}
    for obj in namespace.values():
        if callable(obj) and hasattr(obj, _MARK):
            d = _definition(obj)
            if d.name in found:
                raise UserError(f"{path}: two workloads are named {d.name!r}")
            found[d.name] = d
    if not found:
        raise UserError(f"{path}: no @autosched.workload function found")
    return found


def select_workloads(defs: dict[str, WorkloadDef], names: list[str] | None) -> list[WorkloadDef]:
    """The workloads named by `--workload` (all of them when none is named)."""
    if not names:
        return list(defs.values())
    missing = [n for n in names if n not in defs]
    if missing:
        raise UserError(f"unknown workload {missing[0]!r}; the op file has: "
                        f"{', '.join(sorted(defs))}")
    return [defs[n] for n in names]


def _parse_value(text: str, default: Any) -> Any:
    if isinstance(default, bool):
        if text.lower() in ("1", "true", "yes"):
            return True
        if text.lower() in ("0", "false", "no"):
            return False
        raise ValueError(text)
    if isinstance(default, int):
        return int(text)
    if isinstance(default, float):
        return float(text)
    return text


def parse_arg_overrides(items: list[str] | None) -> list[tuple[str, str]]:
    """`--arg K=V` strings -> (K, V) pairs, in order; a key may repeat (shape variants)."""
    pairs = []
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--arg expects K=V, got {item!r}")
        pairs.append((key.strip(), value.strip()))
    return pairs


def argument_sets(wdef: WorkloadDef, overrides: list[tuple[str, str]]) -> list[dict]:
    """All argument sets to instantiate: the cross product of repeated `--arg` values
    over the defaults, or the workload's declared variants when no override is given."""
    relevant = [(k, v) for k, v in overrides if k in wdef.params]
    if not relevant:
        bases = [dict(wdef.params, **v) for v in wdef.variants] or [dict(wdef.params)]
        return bases
    values: dict[str, list] = {}
    for key, text in relevant:
        try:
            values.setdefault(key, []).append(_parse_value(text, wdef.params[key]))
        except ValueError:
            raise UserError(f"--arg {key}={text}: expected a value like "
                            f"{wdef.params[key]!r}") from None
    sets = [dict(wdef.params)]
    for key, vals in values.items():
        sets = [dict(s, **{key: v}) for s in sets for v in vals]
    return sets


def check_overrides_known(defs: list[WorkloadDef], overrides: list[tuple[str, str]]) -> None:
    """Every `--arg` key must be a parameter of at least one selected workload."""
    known = {p for d in defs for p in d.params}
    for key, _ in overrides:
        if key not in known:
            raise UserError(f"unknown --arg {key!r}; parameters are: {', '.join(sorted(known))}")


def make_task(wdef: WorkloadDef | Callable, args: dict,
              timeout_s: float | None = LOAD_TIMEOUT_S) -> Task:
    """Call the workload (a WorkloadDef, or a function marked with `@workload`) with
    `args` and build its Task (PrimFunc, FLOPs, key); the call must return within
    `timeout_s` seconds (None: no limit)."""
    from tvm import te

    from .canonical import canonical_text, task_key

    if not isinstance(wdef, WorkloadDef):
        wdef = _definition(wdef)  # a function marked with @workload
    with time_limit(timeout_s, f"workload '{wdef.name}' with {args}"):
        inputs, outputs = _build(wdef, args)
    inputs, outputs, names = _distinctly_named(wdef.name, inputs, outputs)
    try:
        func = te.create_prim_func(inputs + outputs).with_attr("global_symbol", "main")
    except Exception as e:  # e.g. an output reads a placeholder the workload did not return
        raise UserError(f"workload '{wdef.name}': TVM cannot make a kernel of the returned "
                        f"tensors: {type(e).__name__}: {first_line(e)}") from None
    canonical = canonical_text(inputs, outputs)
    return Task(
        workload=wdef.name,
        args=dict(args),
        func=func,
        inputs=tuple(_spec(t, n) for t, n in zip(inputs, names)),
        outputs=tuple(_spec(t, n) for t, n in zip(outputs, names[len(inputs):])),
        flops=_flops(func),
        key=task_key(canonical, args),
        canonical=canonical,
        definition=wdef,
    )


def _build(wdef: WorkloadDef, args: dict) -> tuple[list, list]:
    """(input placeholders, computed outputs) of one call of the workload."""
    from tvm import te

    check_args(wdef.name, args)
    try:
        result = wdef.func(**args)
    except UserError:
        raise
    except Exception as e:
        raise UserError(f"workload '{wdef.name}' failed with {args}: "
                        f"{type(e).__name__}: {first_line(e)}") from None
    tensors = list(result) if isinstance(result, (list, tuple)) else [result]
    if not tensors or not all(isinstance(t, te.Tensor) for t in tensors):
        raise UserError(f"workload '{wdef.name}' must return TE tensors "
                        f"(inputs first, outputs last), got {type(result).__name__}")
    check_tensors(wdef.name, args, tensors)
    inputs = [t for t in tensors if type(t.op).__name__ == "PlaceholderOp"]
    outputs = [t for t in tensors if type(t.op).__name__ != "PlaceholderOp"]
    if not outputs or tensors[: len(inputs)] != inputs:
        raise UserError(f"workload '{wdef.name}' must return input placeholders first "
                        "and at least one computed output last")
    check_inputs_returned(wdef.name, inputs, outputs)
    return inputs, outputs


def _spec(t, name: str) -> TensorSpec:
    return TensorSpec(name, tuple(int(s) for s in t.shape), str(t.dtype))


# (workload, renaming) pairs already told, so that a workload made again (export, other
# shapes) is not announced again
_TOLD: set = set()


def _distinctly_named(workload: str, inputs: list, outputs: list) -> tuple[list, list, list]:
    """(inputs, outputs, argument names) with every argument's name its own: names are
    labels, and the kernel's arguments (the torch op's, the manifest's, the reference
    data's) need distinct ones. Repeats are renamed by `distinct_names`, away from every
    tensor name of the computation, and the computation is rebuilt with the new names
    (the same arithmetic: the task key does not change). The user is told once."""
    args = inputs + outputs
    names = [t.op.name for t in args]
    if len(set(names)) == len(names):  # the common case: no graph walk
        return inputs, outputs, names
    new = distinct_names(names, {op.name for op in _ops(outputs)})
    if new == names:
        return inputs, outputs, names
    changes = tuple((i, old, n) for i, (old, n) in enumerate(zip(names, new)) if old != n)
    if (workload, changes) not in _TOLD:
        _TOLD.add((workload, changes))
        log.warning("workload '%s': tensors share a name; kernel arguments renamed: %s",
                    workload, ", ".join(f"#{i + 1} {old!r} -> {n!r}" for i, old, n in changes))
    # an op with several outputs keeps its name (TVM names their buffers NAME.v0, ...)
    rename = {args[i].op: n for i, _, n in changes if args[i].op.num_outputs == 1}
    renamed = _rebuilt(workload, outputs, rename)
    args = [renamed(t) for t in args]
    return args[: len(inputs)], args[len(inputs):], new


def _ops(outputs) -> list:
    """The operations computing `outputs`, each after the ones it reads."""
    order, seen = [], set()

    def visit(op):
        if op not in seen:
            seen.add(op)
            for t in op.input_tensors:
                visit(t.op)
            order.append(op)

    for t in outputs:
        visit(t.op)
    return order


def _rebuilt(workload: str, outputs, rename: dict):
    """A map from each tensor of the computation to its twin in a copy where the ops of
    `rename` carry their new names (only what they feed is rebuilt)."""
    from tvm import te
    from tvm.te import _ffi_api

    new: dict = {}

    def twin(t):
        op = new.get(t.op)
        return t if op is None else op.output(t.value_index)

    for op in _ops(outputs):
        if op not in rename and not any(t.op in new for t in op.input_tensors):
            continue
        name, kind = rename.get(op, op.name), type(op).__name__
        if kind == "PlaceholderOp":
            new[op] = te.placeholder(op.shape, op.dtype, name).op
        elif kind == "ComputeOp":
            new[op] = _ffi_api.ComputeOp(name, op.tag, op.attrs, op.axis, _body(op, twin))
        else:
            raise UserError(f"workload '{workload}': tensor {op.name!r} is made by a "
                            f"{kind}, which cannot be renamed; give each input and output "
                            "its own name")
    return twin


def _body(op, twin) -> list:
    """The body of the ComputeOp `op` reading `twin(t)` for each tensor t it reads."""
    import tvm_ffi
    from tvm import te, tirx

    def swap(e):
        return tvm_ffi.structural_map(e, ((te.Tensor, twin),), order="pre")

    body = list(op.body)
    if len(body) > 1 and isinstance(body[0], tirx.Reduce):
        # the outputs of one reduction (an argmax's index and value) must share it
        r = body[0]
        source, condition, init = swap(r.source), swap(r.condition), swap(r.init)
        return [tirx.Reduce(r.combiner, source, r.axis, condition, b.value_index, init)
                for b in body]
    return [swap(b) for b in body]


def _flops(func) -> float:
    import tvm
    from tvm.s_tir.analysis import estimate_tir_flops

    return float(estimate_tir_flops(tvm.IRModule({"main": func})))


def load_instances(path: str, names: list[str] | None = None,
                   arg_items: list[str] | None = None,
                   timeout_s: float | None = LOAD_TIMEOUT_S) -> list[tuple[WorkloadDef, dict]]:
    """Op file + `--workload` selection + `--arg` overrides -> (workload, args) pairs."""
    defs = select_workloads(load_op_file(path, timeout_s), names)
    overrides = parse_arg_overrides(arg_items)
    check_overrides_known(defs, overrides)
    return [(d, a) for d in defs for a in argument_sets(d, overrides)]


def load_tasks(path: str, names: list[str] | None = None,
               arg_items: list[str] | None = None,
               timeout_s: float | None = LOAD_TIMEOUT_S) -> list[Task]:
    """The one call the CLI and API use: op file + selection + overrides -> tasks. The
    file, and each workload call, must finish within `timeout_s` seconds."""
    return [make_task(d, a, timeout_s) for d, a in load_instances(path, names, arg_items,
                                                                   timeout_s)]
