"""What a tuned kernel looks like: a record's schedule as TVMScript, and for a CUDA
target the CUDA source TVM generated and the SASS nvcc made of it.

A record holds the workload's name and arguments and the candidate's decisions, not the
kernel, so reading one means rebuilding it: the task from the op file that defines the
workload (`training_data.rebuild_task`; a definition changed since the record was made
gives another task key and is refused, never guessed at), the candidate replayed in the
task's space (`generate_space(task, target).apply`), and for CUDA the module compiled the
one way autosched compiles CUDA (`measure.cuda.compiler.build_cuda`), whose fatbin
`measure.cuda.sass` disassembles with cuobjdump. This is what MetaSchedule users get from
`sch.mod.script()` and Triton users from `kernel.asm`.

A candidate replays faithfully only under the TVM and space versions it was made with,
so a record of other versions is refused (a UserError, like an unknown id, a failed
record or a workload the op file does not define).
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, replace

from search_space import SPACE_VERSION, Candidate, InvalidCandidate, generate_space

from .db import Record, compatible_versions, open_database
from .errors import UserError
from .target import TargetSpec
from .training_data import rebuild_task
from .versions import current_versions
from .workload import load_op_file


@dataclass(frozen=True)
class KernelSource:
    """A record's kernel as text. `tir` is the scheduled IRModule in TVMScript (it parses
    back with `tvm.script.from_source`); `cuda` the generated CUDA source and `sass` the
    disassembled machine code, None for a CPU target, when not asked for, or (`sass`)
    when the build holds no fatbin or cuobjdump is missing. `build` says how the CUDA
    code was compiled (`CudaBuild.describe()`: arch, binary, compiler), else None."""

    record_id: int | None
    task: str           # the task's name, e.g. "matmul(M=16,N=16,K=16,dtype=float32)"
    target: dict        # the record's target config
    sketch: str
    tir: str
    cuda: str | None = None
    sass: str | None = None
    build: dict | None = None


def read_record(db_url: str | None, record_id: int) -> Record:
    """Record `record_id` of the database at `db_url` (never created: a mistyped path
    is a UserError, as is an id the database does not hold)."""
    db = open_database(db_url, create=False)
    try:
        return find_record(db, record_id)
    finally:
        db.close()


def find_record(db, record_id: int) -> Record:
    """Record `record_id` of the open database `db`; UserError when there is none."""
    rec = db.record(record_id)
    if rec is not None:
        return rec
    raise UserError(f"no record {record_id} in {db.url} (`autosched db best` lists the "
                    "record ids)")


def check_showable(record: Record) -> None:
    """UserError unless `record` is a correct measurement made under this autosched's
    TVM and space versions: only such a record replays into the kernel it measured."""
    label = _label(record)
    if not record.ok:
        kind = record.result.error_kind
        message = (record.result.error_msg or "").strip().splitlines()
        why = f": {message[0][:200]}" if message else ""
        raise UserError(f"{label} is a failed measurement ({kind}{why}); only a measured "
                        "kernel can be shown")
    current = current_versions(SPACE_VERSION)
    if not compatible_versions(record.versions, current):
        raise UserError(f"{label} was made with space version "
                        f"{record.versions.get('space')} and TVM {record.versions.get('tvm')}; "
                        f"this autosched has space version {current['space']} and TVM "
                        f"{current['tvm']}: its candidate cannot be replayed faithfully here")


def kernel_source(record: Record, op_file: str, *, cuda: bool = True,
                  sass: bool = True) -> KernelSource:
    """The kernel of `record` (see the module docstring), rebuilt from `op_file`, the op
    file that defines its workload. For a CUDA record, `cuda` or `sass` compiles the
    module (about a second with nvcc; InfrastructureError where no CUDA compiler is),
    which gives the source, and `sass` also disassembles its fatbin when cuobjdump is
    available. UserError for a record that cannot be shown (see `check_showable`), an
    op file that does not rebuild its task, or a candidate that no longer compiles."""
    check_showable(record)
    config = json.loads(record.target_key)
    target = TargetSpec(str(config.get("kind")), config, dict(record.hardware), False)
    task = _rebuild(record, op_file)
    try:
        candidate = Candidate.from_json(record.candidate)
    except (KeyError, TypeError, ValueError) as e:
        raise UserError(f"{_label(record)} holds no readable candidate: {e}") from None
    try:
        mod = generate_space(task, target).apply(candidate)
    except (InvalidCandidate, ValueError) as e:
        raise UserError(f"{_label(record)} of {task.name} does not replay: {e}") from None
    out = KernelSource(record.id, task.name, config, candidate.sketch, mod.script())
    if target.kind != "cuda" or not (cuda or sass):
        return out
    return _with_cuda(out, mod, config, sass)


def _rebuild(record: Record, op_file: str):
    defs = load_op_file(op_file)
    if record.workload not in defs:
        raise UserError(f"{op_file} defines no workload {record.workload!r} (it defines "
                        f"{', '.join(sorted(defs)) or 'none'}); pass the op file "
                        f"{_label(record)} was tuned from")
    task = rebuild_task(defs[record.workload], dict(record.args), record.task_key)
    if task is None:
        raise UserError(f"{op_file}: {record.workload} has changed since {_label(record)} "
                        "was made (the rebuilt task key differs); pass the op file it was "
                        "tuned from")
    return task


def _with_cuda(out: KernelSource, mod, config: dict, sass: bool) -> KernelSource:
    from .measure.cuda.compiler import CudaCompileError, build_cuda, cuda_source

    try:
        build = build_cuda(mod, config)
    except CudaCompileError as e:
        raise UserError(f"record {out.record_id} of {out.task} no longer compiles: "
                        f"{e}") from None
    text = None
    if sass and build.binary == "fatbin" and _sass_available():
        text = _disassemble(build.executable)
    return replace(out, cuda=cuda_source(build.executable), sass=text,
                   build=build.describe())


def _sass_available() -> bool:
    from .measure.cuda import sass

    return sass.available()


def _disassemble(executable) -> str:
    """The SASS of a built module: exported to a temporary library (TVM writes no
    fatbin on its own), whose fatbin cuobjdump reads."""
    from .measure.cuda import sass

    with tempfile.TemporaryDirectory(prefix="autosched-show-") as tmp:
        path = os.path.join(tmp, "kernel.so")
        executable.export_library(path)
        return sass.dump_sass(path)


def _label(record: Record) -> str:
    return f"record {record.id}" if record.id is not None else "the record"
