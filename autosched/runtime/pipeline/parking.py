"""BPipe's transfers carried out: a stage parks micro-batches' saved activations on another
stage between their forward and their backward.

When the planned schedule (schedule.py) says: a park starts when the micro-batch's
forward ends; its fetch is issued when the stage starts the op that precedes the
micro-batch's backward in its 1F1B order (one op of prefetch); the backward waits for
the fetch. The sending stage copies the saved storages into one buffer, lets autograd's
slots go (the storages are freed) and sends the buffer; the host keeps it until it is
fetched; the copies are put back into the same slots (Held), as views of the fetched
buffer with the original offsets, sizes and strides, so the backward computes exactly
what it would have. Storages the stage keeps anyway (its inputs and output, which
pipelining holds for backward) and selective checkpoint caches stay.

Transfers run on a separate gloo group, in threads (one each way per pair of stages),
so the schedule's own sends and receives never wait on them and the transfers overlap
compute. Their bytes count in LiveBytes: on the sender until the send is done, on the
host from its receive until it is fetched back, on the sender again from the fetch.
Each transfer's start and end (seconds from the step's start) are recorded.
"""
from __future__ import annotations

import queue
import threading
import time

import torch

PARK, FETCH = 1, 2          # p2p tags


def stage_order(stages: int, micro_batches: int, stage: int) -> list[tuple[str, int]]:
    """The 1F1B order of a stage's ops, as torch's Schedule1F1B runs them."""
    warm = min(micro_batches, stages - stage)
    order = [("F", m) for m in range(warm)]
    for b in range(micro_batches):
        order.append(("B", b))
        if warm + b < micro_batches:
            order.append(("F", warm + b))
    return order


def _as_bytes(storage) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8).set_(storage)


class Parking:
    """One stage's side of the plan's transfers (a no-op for a stage without any)."""

    def __init__(self, plan, stage: int, group, live, t0: float, bound: bool = False):
        self.stage, self.group, self.live, self.t0, self.bound = stage, group, live, t0, bound
        self.park_waited = 0.0
        self.out = {m: t["to"] for t in plan.transfers if t["from"] == stage
                    for m in t["micro_batches"]}
        self.hosted: dict = {}
        for t in plan.transfers:
            if t["to"] == stage:
                self.hosted[t["from"]] = sorted(self.hosted.get(t["from"], []) +
                                                list(t["micro_batches"]))
        order = stage_order(plan.stages, plan.micro_batches, stage)
        # op -> the micro-batch whose fetch is issued when that op starts
        self.fetch_at = {order[i]: order[i + 1][1] for i in range(len(order) - 1)
                         if order[i + 1][0] == "B" and order[i + 1][1] in self.out}
        self.layouts, self.fetched, self.records = {}, {}, []
        self.parked = {m: threading.Event() for m in self.out}      # set when sent
        self.issued: list = []                                      # parks, in order
        self._sends: queue.Queue = queue.Queue()
        self._fetches: queue.Queue = queue.Queue()
        self._threads = []
        if self.out:
            self._start(self._sender)
            self._start(self._fetcher)
        for src, mbs in self.hosted.items():
            slots = {m: queue.Queue(maxsize=1) for m in mbs}
            self._start(self._host_receiver, src, mbs, slots)
            self._start(self._host_sender, src, mbs, slots)

    def _start(self, fn, *args):
        thread = threading.Thread(target=self._guard, args=(fn, *args), daemon=True)
        thread.start()
        self._threads.append(thread)

    def _guard(self, fn, *args):
        try:
            fn(*args)
        except BaseException as e:          # noqa: BLE001 - reported by finish()
            self.error = e

    error = None

    def now(self) -> float:
        return time.perf_counter() - self.t0

    # -- the parking stage ----------------------------------------------------------------
    def op_start(self, op: tuple[str, int]) -> None:
        """Called as the stage starts `op` ("F"/"B", micro-batch): issue a due fetch; with
        `bound`, a forward first waits for the parks in flight to end, so a parked
        micro-batch has left before the next one's activations arrive (the stage's
        peak is then what the schedule counts with instantaneous parks, whatever the
        link does; the wait is recorded as park_waited_s)."""
        if self.bound and op[0] == "F":
            t = time.perf_counter()
            for m in self.issued:
                self._wait(self.parked[m])
            self.park_waited += time.perf_counter() - t
        m = self.fetch_at.get(op)
        if m is not None:
            self._issue(m)

    def _issue(self, m: int) -> None:
        """Queue m's fetch: one fetching thread takes them in order (the host returns
        them in that order, on one tag)."""
        self.fetched[m] = threading.Event()
        self._fetches.put(m)

    def _fetcher(self):
        while True:
            m = self._fetches.get()
            if m is None:
                return
            self.parked[m].wait()           # a fetch starts once its park has ended
            self._fetch(m, self.fetched[m])

    def park(self, m: int, held: list, keep: set) -> None:
        """After micro-batch m's forward: move its saved storages out (if m is parked).
        They are sent as they are (no copy) and freed once sent."""
        if m not in self.out:
            return
        index, pieces, layout = {}, [], []
        for h in held:
            if h.tensor is None or h.key in keep:
                continue
            if h.key not in index:
                index[h.key] = len(pieces)
                pieces.append(_as_bytes(h.tensor.untyped_storage()))
            t = h.tensor
            layout.append((h, index[h.key], t.dtype, t.storage_offset(), t.size(), t.stride()))
        sizes = [p.numel() for p in pieces]
        key = ("send", m, sum(sizes))
        self.live.replace([h.key for h, *_ in layout], key)
        for h, *_ in layout:
            h.tensor, h.key = None, None
        self.layouts[m] = (layout, sizes)
        self.issued.append(m)
        self._sends.put((m, pieces, key, self.now()))

    def _sender(self):
        import torch.distributed as dist

        while True:
            item = self._sends.get()
            if item is None:
                return
            m, pieces, key, start = item
            dst = self.out[m]
            dist.send(torch.tensor([len(pieces)]), dst, self.group, tag=PARK)
            if pieces:
                dist.send(torch.tensor([p.numel() for p in pieces]), dst, self.group, tag=PARK)
            for piece in pieces:
                dist.send(piece, dst, self.group, tag=PARK)
            del pieces, item
            self.live.drop(key)
            self.records.append({"park": m, "to": dst, "bytes": key[-1], "start_s": start,
                                 "end_s": self.now()})
            self.parked[m].set()

    def _fetch(self, m: int, done: threading.Event):
        import torch.distributed as dist

        start = self.now()
        layout, sizes = self.layouts.pop(m)
        key = ("fetched", m, sum(sizes))
        self.live.add(key)
        bufs = [torch.empty(n, dtype=torch.uint8) for n in sizes]
        for buf in bufs:
            dist.recv(buf, self.out[m], self.group, tag=FETCH)
        for h, i, dtype, offset, size, stride in layout:
            h.tensor = torch.empty(0, dtype=dtype).set_(bufs[i].untyped_storage(), offset,
                                                        size, stride)
            h.key = key
            self.live.add(key)
        del layout                    # autograd's slots own the restored Held alone
        self.live.drop(key)           # alive while any restored tensor is
        self.records.append({"fetch": m, "from": self.out[m], "bytes": key[-1],
                             "start_s": start, "end_s": self.now()})
        done.set()

    def before_backward(self, m: int) -> float:
        """Wait for micro-batch m's fetch (if parked); the seconds the backward waited."""
        if m not in self.out:
            return 0.0
        if m not in self.fetched:           # no op before it to issue the fetch from
            self._issue(m)
        t = time.perf_counter()
        self._wait(self.fetched[m])
        return time.perf_counter() - t

    def _wait(self, event: threading.Event) -> None:
        while not event.wait(0.05):
            if self.error is not None:
                raise self.error

    # -- the host -------------------------------------------------------------------------
    def _host_receiver(self, src: int, mbs: list, slots: dict):
        import torch.distributed as dist

        for m in mbs:
            count = torch.zeros(1, dtype=torch.int64)
            dist.recv(count, src, self.group, tag=PARK)
            sizes = torch.zeros(int(count), dtype=torch.int64)
            if int(count):
                dist.recv(sizes, src, self.group, tag=PARK)
            bufs = [torch.empty(int(n), dtype=torch.uint8) for n in sizes]
            key = ("hosted", src, m, int(sizes.sum()))
            self.live.add(key)
            start = self.now()
            for buf in bufs:
                dist.recv(buf, src, self.group, tag=PARK)
            slots[m].put((bufs, key, start, self.now()))

    def _host_sender(self, src: int, mbs: list, slots: dict):
        import torch.distributed as dist

        for m in mbs:
            bufs, key, start, arrived = slots[m].get()
            for buf in bufs:
                dist.send(buf, src, self.group, tag=FETCH)
            del bufs
            self.live.drop(key)
            self.records.append({"hosted": m, "from": src, "bytes": key[-1],
                                 "arrived_s": arrived, "returned_s": self.now()})

    def finish(self, timeout_s: float) -> None:
        """Wait for every transfer thread; a transfer's failure is raised here."""
        deadline = time.monotonic() + timeout_s
        if self.out:
            self._sends.put(None)
            self._fetches.put(None)
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if self.error is not None:
            raise self.error
        if any(t.is_alive() for t in self._threads):
            raise TimeoutError(f"stage {self.stage}: activation transfers did not finish "
                               f"within {timeout_s:g} s")
