"""`--dry-run`: generate candidates, check them against the target's limits and compile
them, without running anything or writing the database (works with no GPU for cuda: the
same compile path as the build worker, `measure.cuda.compiler`).

The same function is the search space's benchmark (bench/cuda_dry_run.py,
bench/sketch_sass_dry_run.py): it can keep to one sketch, compile every candidate for
more targets of the same kind (other GPU archs), and read the SASS of each CUDA build,
counting instructions and requiring some (a tensor-core candidate must issue `HMMA`).
"""
from __future__ import annotations

import os
import random
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field

from search_space import generate_space

from .errors import UserError


@dataclass(frozen=True)
class DeviceCodeCheck:
    """What a dry run asks of each candidate beyond the limits and one compile: that it
    also compiles for `also_for` (targets of the same kind), and for cuda that the SASS of
    every build holds each opcode of `require`; the opcodes of `require` and `count` are
    counted per build into `DryRunReport.sass`. A name with modifiers (`LDG.E.128`) counts
    the instructions of its opcode that carry them (`sass.count_named`). Reading SASS
    needs `cuobjdump`."""

    also_for: tuple = ()
    require: tuple[str, ...] = ()
    count: tuple[str, ...] = ()

    @property
    def reads_sass(self) -> bool:
        return bool(self.require or self.count)


@dataclass
class DryRunReport:
    task: object
    generated: int = 0
    passed_check: int = 0
    compiled: int = 0    # fit the limits, compiled for every target, held the required SASS
    failures: Counter = field(default_factory=Counter)   # kind -> candidates
    messages: Counter = field(default_factory=Counter)   # each failure's line -> candidates
    first_errors: list[str] = field(default_factory=list)
    by_sketch: Counter = field(default_factory=Counter)  # compiled candidates per sketch
    sass: list[dict] = field(default_factory=list)  # a compiled candidate's: arch -> counts
    # every sampled candidate in order: (Candidate, its failure line or "", arch -> counts)
    candidates: list[tuple] = field(default_factory=list)
    seconds: float = 0.0
    check_seconds: float = 0.0     # of `seconds`, in the limit checks
    compile_seconds: float = 0.0   # of `seconds`, compiling (and reading SASS)
    compiler: str = ""   # what made the device code (cuda: "nvcc" or "nvrtc")

    @property
    def compile_rate(self) -> float:
        return self.compiled / self.generated if self.generated else 0.0


def _compile(mod, target) -> tuple[object, str, str]:
    """(the build, what compiled it, "") or (None, "", the error's line). Compiles as the
    build worker does (for cuda: device code for the target's arch, through
    `measure.cuda.compiler`); a machine fault raises InfrastructureError."""
    if target.kind == "cuda":
        from .measure.cuda.compiler import CudaCompileError, build_cuda

        try:
            build = build_cuda(mod, target.config)
        except CudaCompileError as e:
            return None, "", str(e)
        return build, build.compiler, ""
    import tvm

    try:
        return tvm.compile(mod, target=target.tvm()), "llvm", ""
    except Exception as e:  # a compile error is a finding, not a crash
        text = str(e).strip()
        return None, "", text.splitlines()[-1] if text else type(e).__name__


def _device_code(mod, targets, check: DeviceCodeCheck, report: DryRunReport,
                 library: str, counts: dict) -> tuple[str, str] | None:
    """None when `mod` compiles for every target and its SASS holds what `check`
    requires (the counts go to `report.sass`); else (failure kind, its line). The
    counts of each build read go to `counts` (arch -> opcode -> count)."""
    for target in targets:
        build, compiler, message = _compile(mod, target)
        where = f"{target.config.get('arch', target.kind)}: " if len(targets) > 1 else ""
        if build is None:
            return "build_error", where + message
        report.compiler = compiler
        if check.reads_sass:
            from .measure.cuda.sass import count_named, mnemonic_counts

            build.executable.export_library(library)
            found = mnemonic_counts(library)
            arch = target.config["arch"]
            counts[arch] = {k: count_named(found, k)
                            for k in dict.fromkeys(check.require + check.count)}
            missing = [k for k in check.require if not counts[arch][k]]
            if missing:
                return "sass", f"{arch}: SASS without {' or '.join(missing)} {counts[arch]}"
    if counts:
        report.sass.append(counts)
    return None


def _samples(space, count: int, sketch: str | None, rng: random.Random) -> list:
    """`count` distinct candidates as a random search draws them, or of `sketch` only
    (fewer where it has fewer, or fails to schedule the task)."""
    from .search import RandomSearch, fresh_samples

    if sketch is None:
        return RandomSearch().propose(space, count, set(), rng)
    if sketch not in space.sketches:
        raise UserError(f"dry run: {space.task.name} has no sketch {sketch!r} "
                        f"(its sketches: {', '.join(sorted(space.sketches))})")
    # a sketch that never schedules the task leaves the draw to the others: not its samples
    return [(cand, mod) for cand, mod in fresh_samples(
        space, count, set(), rng, {name: float(name == sketch) for name in space.sketches})
        if cand.sketch == sketch]


def dry_run_task(task, target, count: int, seed: int = 0, space_factory=generate_space,
                 sketch: str | None = None,
                 device_code: DeviceCodeCheck = DeviceCodeCheck()) -> DryRunReport:
    """Sample `count` distinct candidates of `task` (of `sketch` only, when given),
    limit-check each and compile it for `target` and what `device_code` adds."""
    if device_code.reads_sass and target.kind != "cuda":
        raise UserError(f"dry run: SASS is read from cuda builds, not {target.kind}")
    start = time.perf_counter()
    space = space_factory(task, target)
    report = DryRunReport(task)
    targets = (target, *device_code.also_for)
    with tempfile.TemporaryDirectory(prefix="autosched-dry-run-") as scratch:
        library = os.path.join(scratch, "candidate.so")
        for cand, mod in _samples(space, count, sketch, random.Random(seed)):
            report.generated += 1
            t0 = time.perf_counter()
            reason = space.check(mod)
            t1 = time.perf_counter()
            report.check_seconds += t1 - t0
            if reason:
                _fail(report, "invalid", f"{cand.sketch}: {reason}")
                report.candidates.append((cand, f"{cand.sketch}: {reason}", {}))
                continue
            report.passed_check += 1
            counts = {}
            failed = _device_code(mod, targets, device_code, report, library, counts)
            report.compile_seconds += time.perf_counter() - t1
            report.candidates.append((cand, "" if failed is None else
                                      f"{cand.sketch}: {failed[1]}", counts))
            if failed is None:
                report.compiled += 1
                report.by_sketch[cand.sketch] += 1
            else:
                _fail(report, failed[0], f"{cand.sketch}: {failed[1]}")
    report.seconds = time.perf_counter() - start
    return report


def _fail(report: DryRunReport, kind: str, message: str) -> None:
    report.failures[kind] += 1
    report.messages[message] += 1
    if len(report.first_errors) < 3:
        report.first_errors.append(message)
