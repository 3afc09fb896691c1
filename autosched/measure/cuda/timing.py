"""Timing a kernel on a CUDA GPU: CUDA events on a stream the run worker owns, warm-up
before, the L2 cache flushed before every timed call by default, the median of repeats.

Why not TVM's `time_evaluator`: it records its events on whatever stream is current
(the default stream unless set) and never touches the L2 cache, so a kernel whose data
fits in L2 (50-60 MB on Hopper) is timed hot, as it never runs in a real model.

The procedure, for `number` calls per repeat and `repeat` repeats:

- Every kernel call is queued on the worker's own non-blocking stream (`stream="runner"`,
  set as TVM's current stream for the device, so TVM launches there), or on the legacy
  default stream (`stream="default"`).
- With `flush_l2` (the default) each timed call is preceded by a write of a device buffer
  twice the L2 size on that stream, and timed by its own pair of events around the call
  alone: the L2 holds only the flush buffer when the kernel starts. The flush also takes
  longer on the GPU than Python takes to queue the next call, so the GPU never waits for
  the host inside a timed interval. Without the flush, one pair of events brackets the
  `number` calls back to back.
- A repeat's latency is its summed kernel time over `number`; the reported latencies are
  one per repeat, the record's latency their median.
- Before the repeats, `number` grows (`next_number`) until one repeat's kernel time
  reaches `min_repeat_ms`, as `time_evaluator` does (to MAX_FLUSHED_NUMBER at most with
  the flush).

The pure parts (`next_number`, `median`, `repeat_latency`) are plain functions; the rest
needs a GPU.
"""
from __future__ import annotations

import math
import statistics

from .cudart import CudaError, Cudart

STREAMS = ("runner", "default")
MAX_NUMBER = 100_000    # calls per repeat at most, whatever min_repeat_ms asks
# ... and with the flush, where each call has its own events (and a flush of ~0.1 ms):
# more calls add event resolution error instead of averaging it away
MAX_FLUSHED_NUMBER = 1000
MAX_CALIBRATIONS = 10   # rounds of growing `number`
GROWTH_MARGIN = 1.2     # aim past min_repeat_ms so that one more round is rarely needed


def next_number(number: int, repeat_ms: float, min_repeat_ms: float,
                cap: int = MAX_NUMBER) -> int:
    """Calls per repeat for the next try, after a repeat of `number` calls took
    `repeat_ms` of kernel time: unchanged when it reached `min_repeat_ms` or `cap`,
    otherwise scaled to reach it (tenfold when the time measured was zero), within `cap`."""
    if min_repeat_ms <= 0 or repeat_ms >= min_repeat_ms or number >= cap:
        return number
    if repeat_ms <= 0:
        grown = number * 10
    else:
        grown = math.ceil(number * min_repeat_ms / repeat_ms * GROWTH_MARGIN)
    return max(number + 1, min(cap, grown))


def repeat_latency(call_ms: list[float], number: int) -> float:
    """Seconds per call of one repeat from its event times in milliseconds."""
    return sum(call_ms) / number / 1000.0


def median(latencies: list[float]) -> float:
    """The latency a record ranks by: the median of the repeats."""
    return statistics.median(latencies)


class CudaTimer:
    """Stream, events and flush buffer of one run worker on CUDA device `device`
    (its index in this process). Raises `cudart.CudaError` when the device refuses."""

    def __init__(self, device: int = 0, *, stream: str = "runner", flush_l2: bool = True,
                 cudart: Cudart | None = None):
        if stream not in STREAMS:
            raise ValueError(f"unknown stream {stream!r}; use one of {', '.join(STREAMS)}")
        self.rt = cudart or Cudart()
        self.device = device
        self.stream = self.rt.create_stream() if stream == "runner" else 0
        self.l2_bytes = self.rt.attribute("l2_cache_bytes", device)
        self.flush_bytes = 2 * self.l2_bytes if flush_l2 else 0
        self.flush_buffer = self.rt.malloc(self.flush_bytes) if self.flush_bytes else 0
        self._events: list[tuple[int, int]] = []

    def on_stream(self, dev):
        """A context in which TVM launches kernels for `dev` on this timer's stream."""
        import tvm_ffi

        return tvm_ffi.use_raw_stream(dev, self.stream)

    def synchronize(self) -> None:
        """Wait for the stream; a kernel's asynchronous fault surfaces here."""
        self.rt.synchronize(self.stream)

    def warm_up(self, dev, call, count: int) -> None:
        """`count` untimed calls (at least one), then wait for them."""
        with self.on_stream(dev):
            for _ in range(max(1, count)):
                call()
        self.synchronize()

    def _pairs(self, n: int) -> list[tuple[int, int]]:
        while len(self._events) < n:
            self._events.append((self.rt.create_event(), self.rt.create_event()))
        return self._events[:n]

    def time_repeat(self, dev, call, number: int) -> list[float]:
        """Kernel milliseconds of one repeat: one per call with the flush, else one total."""
        rt, stream = self.rt, self.stream
        with self.on_stream(dev):
            if not self.flush_bytes:
                (start, end), = self._pairs(1)
                rt.record(start, stream)
                for _ in range(number):
                    call()
                rt.record(end, stream)
                return [rt.elapsed_ms(start, end)]
            pairs = self._pairs(number)
            for i, (start, end) in enumerate(pairs):
                rt.memset_async(self.flush_buffer, i & 0xFF, self.flush_bytes, stream)
                rt.record(start, stream)
                call()
                rt.record(end, stream)
        return [rt.elapsed_ms(start, end) for start, end in pairs]

    def measure(self, dev, call, number: int, repeat: int,
                min_repeat_ms: float) -> tuple[list[float], int]:
        """(seconds per call of each repeat, calls per repeat used)."""
        number = max(1, number)
        cap = MAX_FLUSHED_NUMBER if self.flush_bytes else MAX_NUMBER
        for _ in range(MAX_CALIBRATIONS):
            grown = next_number(number, sum(self.time_repeat(dev, call, number)),
                                min_repeat_ms, cap)
            if grown == number:
                break
            number = grown
        latencies = [repeat_latency(self.time_repeat(dev, call, number), number)
                     for _ in range(max(1, repeat))]
        return latencies, number

    def close(self) -> None:
        """Free the flush buffer, events and stream (errors ignored: the context may be
        gone after a kernel's fault)."""
        handles = [(self.rt.destroy_event, e) for pair in self._events for e in pair]
        if self.flush_buffer:
            handles.append((self.rt.free, self.flush_buffer))
        if self.stream:
            handles.append((self.rt.destroy_stream, self.stream))
        for release, handle in handles:
            try:
                release(handle)
            except CudaError:
                pass
        self._events, self.flush_buffer, self.stream = [], 0, 0
