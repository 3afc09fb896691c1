"""The outcome of measuring one candidate: latencies, or a failure kind and message.

A ground module of the kernel side: measurers produce these results and the database
stores them (`db.record.Record.result`), so both import it and neither imports the
other for it."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

FAILURE_KINDS = ("build_error", "build_timeout", "run_error", "run_timeout",
                 "wrong_answer", "invalid")


@dataclass(frozen=True)
class MeasureResult:
    """Latencies in seconds (one per repeat) when the candidate ran and was correct;
    otherwise `error_kind` (one of FAILURE_KINDS) and `error_msg`. A failure is data:
    it is recorded, never dropped, and never ranked as fast."""

    latencies: tuple[float, ...] = ()
    error_kind: str | None = None
    error_msg: str = ""
    build_seconds: float = 0.0
    run_seconds: float = 0.0

    def __post_init__(self):
        if self.error_kind is not None and self.error_kind not in FAILURE_KINDS:
            raise ValueError(f"unknown failure kind {self.error_kind!r}")
        if self.error_kind is None and not self.latencies:
            raise ValueError("a successful result needs latencies")

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    def done(self) -> bool:
        """A result is the future of a measurement already done
        (`measure.base.MeasureFuture`)."""
        return True

    def result(self) -> "MeasureResult":
        return self

    @property
    def median(self) -> float:
        """Median latency in seconds; +inf for a failure."""
        return statistics.median(self.latencies) if self.ok else math.inf

    @staticmethod
    def failure(kind: str, msg: str, **times) -> "MeasureResult":
        return MeasureResult(error_kind=kind, error_msg=msg[-2000:], **times)

    def to_json(self) -> dict:
        return {"latencies": list(self.latencies), "error_kind": self.error_kind,
                "error_msg": self.error_msg, "build_seconds": self.build_seconds,
                "run_seconds": self.run_seconds}

    @staticmethod
    def from_json(d: dict) -> "MeasureResult":
        return MeasureResult(tuple(float(x) for x in d.get("latencies") or ()),
                             d.get("error_kind"), d.get("error_msg", ""),
                             float(d.get("build_seconds", 0.0)), float(d.get("run_seconds", 0.0)))
