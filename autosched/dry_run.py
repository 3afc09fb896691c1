"""`--dry-run`: generate candidates, check them against the target's limits and compile
them, without running anything or writing the database (works with no GPU for cuda: the
same compile path as the build worker, `measure.cuda_compile`)."""
from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field

from search_space import generate_space


@dataclass
class DryRunReport:
    task: object
    generated: int = 0
    passed_check: int = 0
    compiled: int = 0
    failures: Counter = field(default_factory=Counter)
    first_errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    compiler: str = ""   # what made the device code (cuda: "nvcc" or "nvrtc")

    @property
    def compile_rate(self) -> float:
        return self.compiled / self.generated if self.generated else 0.0


def _compile(mod, target, report: DryRunReport) -> tuple[bool, str]:
    """Compile as the build worker does (for cuda: device code for the target's arch,
    through `cuda_compile`); a machine fault raises InfrastructureError."""
    if target.kind == "cuda":
        from .measure.cuda_compile import CudaCompileError, build_cuda

        try:
            report.compiler = build_cuda(mod, target.config).compiler
        except CudaCompileError as e:
            return False, str(e)
        return True, ""
    import tvm

    try:
        tvm.compile(mod, target=target.tvm())
        report.compiler = "llvm"
        return True, ""
    except Exception as e:  # a compile error is a finding, not a crash
        return False, str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__


def dry_run_task(task, target, count: int, seed: int = 0,
                 space_factory=generate_space) -> DryRunReport:
    """Sample `count` distinct candidates of `task`, limit-check and compile each."""
    from .search import RandomSearch

    start = time.perf_counter()
    space = space_factory(task, target)
    report = DryRunReport(task)
    for cand, mod in RandomSearch().propose(space, count, set(), random.Random(seed)):
        report.generated += 1
        reason = space.check(mod)
        if reason:
            report.failures["invalid"] += 1
            _note(report, f"{cand.sketch}: {reason}")
        else:
            report.passed_check += 1
            ok, message = _compile(mod, target, report)
            if ok:
                report.compiled += 1
            else:
                report.failures["build_error"] += 1
                _note(report, f"{cand.sketch}: {message}")
    report.seconds = time.perf_counter() - start
    return report


def _note(report: DryRunReport, message: str) -> None:
    if len(report.first_errors) < 3:
        report.first_errors.append(message)
