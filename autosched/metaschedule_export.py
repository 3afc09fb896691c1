"""`autosched db export --format metaschedule`: tuned records as a MetaSchedule database.

A TVM user who builds with MetaSchedule (`tvm.s_tir.meta_schedule.tir_integration.
compile_tir`, or Relax's `MetaScheduleApplyDatabase`) reads tuning results from a
`JSONDatabase`: `database_workload.json` (one line per workload: a normalised IRModule)
and `database_tuning_record.json` (one line per record: a schedule trace, its run times,
the target, its argument info). This module writes that pair from autosched's records.

MetaSchedule replays a record's *trace* on the workload's module. autosched replays a
candidate through its search space instead (`SearchSpace.apply`), where a sketch
schedules `Schedule(IRModule({"main": program}))`, the program being the task's own
PrimFunc, or a sketch's rewrite of it (`Sketch.program`: the CPU `rows` sketch's
reciprocal form, `rows_one_pass`, `microkernel` on a polyphase or group-split form), or
the fast-math form of either (the `fast_math` decision). A trace of a schedule of a
rewrite names blocks and buffers that the task's function does not have, so only records
whose schedule ran on the task's own PrimFunc are exported; each record is replayed here
into a traced schedule, its trace serialised, replayed again from the JSON on a fresh
schedule of the workload module and compared (structurally) with `SearchSpace.apply`:
what MetaSchedule will build is exactly what autosched measured. A record that fails any
step is skipped, counted by its reason (`ExportSummary.skipped`). An unscheduled record
(an empty trace: the CPU `default` sketch) ends its task's export: MetaSchedule ignores
it and builds the unscheduled function where no record matches, so exporting a slower
record would make that build slower.

What MetaSchedule cannot tell apart, the export refuses to mix: its query matches a
workload by structural hash and takes the fastest record whatever its target, so one
database holds the records of one target config measured on one machine (a selection
spanning several is a UserError naming them; `target_key` / `hardware_key` choose).

The workload stored is MetaSchedule's own normalisation of the task's PrimFunc
(`tvm.s_tir.meta_schedule.normalize_mod`, what `compile_tir` and `MetaScheduleApplyDatabase`
look up with): `{"main": func}` with global symbol "main" and `tirx.noalias`. A Relax
build finds a record only for a PrimFunc structurally equal to it (same blocks and
block names, same computation, same attributes); a PrimFunc that Relax's legalisation
makes of the same operator (TOPI's block names, fused producers) is another workload.

Tensor-core records tensorize with autosched's own intrinsics (`autosched_mma_...`,
`search_space.cuda.mma_intrin`), which a process must register before it opens the
database (MetaSchedule replays every trace when it loads the file):
`register_intrinsics(DIR)` does that for the records in DIR.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, field

from search_space import SPACE_VERSION, Candidate, InvalidCandidate, generate_space
from search_space.decisions import Decider

from .db import compatible_versions
from .errors import UserError
from .exporting import machine_label, replace_dir
from .target import TargetSpec, tvm_target
from .training_data import rebuild_task
from .versions import current_versions
from .workload import load_op_file

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
INTRINSIC_PREFIX = "autosched_"

# why a record is not exported (with the sketch's name where it is the sketch's doing)
OTHER_VERSION = "made with another TVM or search-space version"
NO_WORKLOAD = "workload not defined by the op files"
CHANGED = "op file changed since the record was made"
NO_REPLAY = "does not replay"
REWRITE = "schedules a rewrite of the task's function (sketch {})"
FAST_MATH = "schedules the fast-math form (sketch {})"
EMPTY = ("unscheduled (sketch {}): what MetaSchedule builds without a record, so the "
         "slower records are left out")
NOT_TRACED = "its trace does not replay to the same schedule (sketch {})"


@dataclass
class ExportSummary:
    """What `export_metaschedule` wrote: records and tasks, the target config and
    machine, how many records use autosched's tensor intrinsics, and the records passed
    over per reason (each task's records are looked at fastest first, until `top`
    exportable ones are found or an unscheduled one is met, so these are the records
    passed over on the way)."""

    out_dir: str
    records: int = 0
    tasks: int = 0
    target_key: str | None = None
    hardware_key: str | None = None
    own_intrinsics: int = 0
    skipped: Counter = field(default_factory=Counter)

    def line(self, db_url: str) -> str:
        """The command's summary line."""
        kind = json.loads(self.target_key).get("kind") if self.target_key else None
        text = (f"exported {self.records} records of {self.tasks} tasks"
                + (f" ({kind})" if kind else "") + f" from {db_url} to {self.out_dir} "
                "as a MetaSchedule database")
        if self.skipped:
            text += f"; skipped {sum(self.skipped.values())}: " + "; ".join(
                f"{n} {why}" for why, n in sorted(self.skipped.items(),
                                                    key=lambda kv: (-kv[1], kv[0])))
        if self.own_intrinsics:
            text += (f"; {self.own_intrinsics} use autosched's tensor intrinsics: call "
                     "autosched.metaschedule_export.register_intrinsics(DIR) before "
                     "opening the database")
        return text


def export_metaschedule(db, op_files: list[str], out_dir: str, *,
                        task_keys: list[str] | None = None, target_key: str | None = None,
                        hardware_key: str | None = None,
                        top: int | None = 1) -> ExportSummary:
    """Write the `top` fastest exportable correct records of each task (None: all of
    them) in the open database `db` as a MetaSchedule JSONDatabase in `out_dir`, which
    is replaced atomically. `op_files` define the workloads (the database keeps their
    names only); `task_keys`, `target_key` and `hardware_key` narrow the selection."""
    if not op_files:
        raise UserError("--format metaschedule needs --op-file: the database keeps each "
                        "workload's name, not its definition; pass the op files that "
                        "define them")
    if target_key is not None:
        try:
            target_key = json.dumps(json.loads(target_key), sort_keys=True,
                                    separators=(",", ":"))
        except json.JSONDecodeError:
            raise UserError(f"--target-key {target_key!r} is not JSON (`autosched db stats "
                            "--json` lists the target configs)") from None
    summary = ExportSummary(out_dir)
    defs = {}
    for path in op_files:
        for name, wdef in load_op_file(path).items():
            defs.setdefault(name, wdef)
    groups = _selected(db, task_keys, target_key, hardware_key, summary)
    _one_scope(groups, summary)
    rows = []
    for records in groups.values():
        first = records[0]
        if first.workload not in defs:
            summary.skipped[NO_WORKLOAD] += len(records)
            continue
        task = rebuild_task(defs[first.workload], dict(first.args), first.task_key)
        if task is None:
            summary.skipped[CHANGED] += len(records)
            continue
        chosen = _exportable(task, records, top, summary)
        if chosen:
            rows.append((task, chosen))
    _write(rows, out_dir, summary)
    return summary


def _selected(db, task_keys, target_key, hardware_key, summary) -> dict:
    """task key -> its correct records of current versions, fastest first."""
    current = current_versions(SPACE_VERSION)
    groups: dict = {}
    for key in task_keys or [None]:
        for rec in db.iter_records(task_key=key, target_key=target_key,
                                   hardware_key=hardware_key, ok_only=True):
            if not compatible_versions(rec.versions, current):
                summary.skipped[OTHER_VERSION] += 1
                continue
            groups.setdefault(rec.task_key, []).append(rec)
    for records in groups.values():
        records.sort(key=lambda r: (r.latency, r.id if r.id is not None else 0))
    return groups


def _one_scope(groups: dict, summary: ExportSummary) -> None:
    """UserError unless every selected record is of one target config and machine."""
    records = [r for recs in groups.values() for r in recs]
    targets = sorted({r.target_key for r in records})
    if len(targets) > 1:
        raise UserError(f"the selected records are of {len(targets)} targets ("
                        + "; ".join(targets) + "): a MetaSchedule database does not tell "
                        "targets apart; export one with --target-key JSON")
    machines = {r.hardware_key: r.hardware for r in records}
    if len(machines) > 1:
        raise UserError(f"the selected records were measured on {len(machines)} machines ("
                        + "; ".join(machine_label(fp, hw) for hw, fp in
                                    sorted(machines.items())) + "); export one machine's "
                        "with --hardware-key KEY")
    if records:
        summary.target_key, summary.hardware_key = targets[0], next(iter(machines))


def _exportable(task, records, top, summary) -> list:
    """(record, trace) of the first `top` records (fastest first) that MetaSchedule
    replays as measured, none past an unscheduled one; the others looked at are
    counted in `summary.skipped`."""
    config = json.loads(records[0].target_key)
    target = TargetSpec(str(config.get("kind")), config, dict(records[0].hardware), False)
    space = generate_space(task, target)
    chosen = []
    for rec in records:
        if top is not None and len(chosen) >= top:
            break
        trace, why = trace_of(space, task, rec.candidate)
        if trace is None:
            summary.skipped[why] += 1
            if why == EMPTY.format(rec.candidate.get("sketch")):
                # an empty trace is the unscheduled function, which MetaSchedule builds
                # where no record matches (and ignores a record without instructions):
                # a slower record would make its build slower than none
                break
        else:
            chosen.append((rec, trace))
    return chosen


def trace_of(space, task, candidate_json: dict):
    """(trace, None) when the candidate's schedule is a trace on the task's own PrimFunc
    that replays from its JSON to exactly `space.apply(candidate)`; else (None, why)."""
    import tvm
    import tvm_ffi
    from tvm import s_tir

    try:
        cand = Candidate.from_json(candidate_json)
        expected = space.apply(cand)
    except (InvalidCandidate, KeyError, TypeError, ValueError):
        return None, NO_REPLAY
    sketch = space.sketches[cand.sketch]
    decide = Decider(cand.values(), strict=True)
    try:  # what space.apply has just done, so it works; a failure is no export
        program = sketch.program(task.func, decide)
        if program is not task.func and not tvm_ffi.structural_equal(program, task.func):
            return None, REWRITE.format(cand.sketch)
        if cand.values().get("fast_math") is True:
            return None, FAST_MATH.format(cand.sketch)
        sch = s_tir.Schedule(tvm.IRModule({"main": task.func}))
        sketch.apply(sch, decide)
    except Exception:  # noqa: BLE001 - any failure here means: not this trace
        return None, NOT_TRACED.format(cand.sketch)
    trace = sch.trace
    if not trace.insts:
        return None, EMPTY.format(cand.sketch)
    # on the workload as MetaSchedule loads it: from JSON, sharing nothing with the task
    # (a schedule may edit statements of its module that it alone holds in place)
    replayed = s_tir.Schedule(tvm.ir.load_json(tvm.ir.save_json(workload_module(task.func))))
    try:
        s_tir.Trace.apply_json_to_schedule(trace.as_json(), replayed)
    except Exception:  # a primitive TVM cannot replay from JSON
        return None, NOT_TRACED.format(cand.sketch)
    if not tvm_ffi.structural_equal(replayed.mod, expected):
        return None, NOT_TRACED.format(cand.sketch)
    return trace, None


def workload_module(func):
    """The module MetaSchedule keys a PrimFunc's records by (its `normalize_mod`)."""
    import tvm_ffi
    from tvm.s_tir import meta_schedule  # noqa: F401  (registers normalize_mod)

    return tvm_ffi.get_global_func("tvm.s_tir.meta_schedule.normalize_mod")(func)


def _write(rows, out_dir: str, summary: ExportSummary) -> None:
    """The JSONDatabase of `rows` ([(task, [(record, trace)])]) written by MetaSchedule
    itself into a staging directory, then renamed to `out_dir`."""
    from tvm.s_tir import meta_schedule as ms

    parent = os.path.dirname(os.path.abspath(out_dir))
    try:
        os.makedirs(parent, exist_ok=True)
        staging = tempfile.mkdtemp(prefix=".export-", dir=parent)
    except OSError as e:
        raise UserError(f"cannot write {out_dir}: {e.strerror}") from None
    try:
        database = ms.database.JSONDatabase(work_dir=staging)
        for task, chosen in rows:
            workload = database.commit_workload(workload_module(task.func))
            args_info = ms.arg_info.ArgInfo.from_prim_func(task.func)
            for rec, trace in chosen:
                database.commit_tuning_record(ms.database.TuningRecord(
                    trace, workload, [rec.latency], tvm_target(json.loads(rec.target_key)),
                    args_info))
                summary.records += 1
                summary.own_intrinsics += _uses_own_intrinsics(trace)
            summary.tasks += 1
        for name in (WORKLOAD_FILE, RECORD_FILE):  # both files, even when empty
            open(os.path.join(staging, name), "a").close()
        replace_dir(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _uses_own_intrinsics(trace) -> bool:
    return any(inst.kind.name == "Tensorize" and str(inst.attrs[0]).startswith(
        INTRINSIC_PREFIX) for inst in trace.insts)


_SHORT = {"f16": "float16", "bf16": "bfloat16", "f32": "float32"}
_MMA = re.compile(r'"autosched_mma_m16n8k16_([a-z0-9]+)_([a-z0-9]+)"')
_LOAD_B = re.compile(r'"autosched_ldmatrix_([a-z0-9]+)_b_(kn|nk)"')


def register_intrinsics(out_dir: str) -> int:
    """Register with TVM the autosched tensor intrinsics that the tuning records in
    `out_dir` tensorize with (and the fragment layout their CUDA code needs); call it
    before `JSONDatabase` opens the directory. Returns how many intrinsic sets it
    registered (0: the records need none)."""
    from search_space import import_tvm_intrinsics
    from search_space.cuda.mma_intrin import intrin_names

    with open(os.path.join(out_dir, RECORD_FILE), encoding="utf-8") as f:
        text = f.read()
    computes = set(_MMA.findall(text))
    layouts = {(i, kn) for i, kn in _LOAD_B.findall(text)}
    done = 0
    for in_short, acc_short in sorted(computes):
        for i, kn in sorted(layouts):
            if i == in_short:
                intrin_names(_SHORT[in_short], _SHORT[acc_short], kn == "kn")
                done += 1
    if done:  # their CUDA code needs the fragment layout, which TVM's intrinsics hold
        import_tvm_intrinsics()
    return done
