"""BPipe's transfers carried out: a stage parks micro-batches' saved activations on another
stage between their forward and their backward, holding no more than the plan counts.

The runner keeps the planned schedule's memory order (schedule.py), so a stage's measured
saved bytes stay within what the plan's simulation predicts, whatever the link's speed:

- a pair's transfers run one at a time in the simulation's link order
  (schedule.link_order): per op, the park of a parked forward's micro-batch, then the
  fetch issued as the op starts; so a fetch issued at a parked forward waits for that
  forward's park (out, then in);
- a fetch is issued as the op before the micro-batch's backward starts, if the plan
  starts it before that op ends; otherwise (the plan releases that op's micro-batch
  first) as the backward starts; the backward waits for it;
- with `bound` (the default), a forward first waits for the parks the plan has ended by
  its start: a link slower than planned costs waiting time, never memory. Without it, a
  slow park overlaps later forwards and the stage can hold more than planned.

The plan's timeline is the simulation of its predicted stage costs and transfer times;
a document without predictions (written by hand) gets unit costs and instantaneous
transfers: the schedule's structure.

The sending stage collects the saved storages, lets autograd's slots go and sends them
as they are (freed once sent); the host keeps them until fetched; the copies are put
back into the same slots (Held), as views of the fetched buffers with the original
offsets, sizes and strides, so the backward computes exactly what it would have.
Storages the stage keeps anyway (its inputs and output, which pipelining holds for
backward) and selective checkpoint caches stay.

On a GPU (placement.py) the transfers are staged through host memory: a park copies the
storages to the host and sends them; the host stage receives into host memory and copies
them onto its own device, where they count; a fetch goes back the same way.

Transfers run on a separate gloo group, in one thread per pair on each side, so the
schedule's own sends and receives never wait on them and the transfers overlap compute.
Their bytes count in LiveBytes: on the sender until the send is done, on the host from
its receive until it is sent back, on the sender again from the fetch's start. Each
transfer's times (seconds from the step's start) are recorded.
"""
from __future__ import annotations

import queue
import threading
import time

import torch

from .schedule import StageCost, Transfer, link_order, one_f_one_b, simulate

PARK, FETCH = 1, 2          # p2p tags


def stage_order(stages: int, micro_batches: int, stage: int) -> list[tuple[str, int]]:
    """The 1F1B order of a stage's ops, as torch's Schedule1F1B runs them (the same as
    schedule.one_f_one_b: S - i forwards before the first backward)."""
    return one_f_one_b(stage, stages, micro_batches)


def planned(plan):
    """The plan's own schedule.Simulation (see the module docstring)."""
    def number(t, key, default):
        v = t.get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) \
            else default

    if plan.timing:
        costs = [StageCost(*row) for row in plan.timing]
        transfers = [Transfer(t["from"], t["to"], tuple(t["micro_batches"]),
                              plan.timing[t["from"]][2], number(t, "seconds", 0.0))
                     for t in plan.transfers]
    else:
        costs = [StageCost(1.0, 2.0, 1.0) for _ in range(plan.stages)]
        transfers = [Transfer(t["from"], t["to"], tuple(t["micro_batches"]), 1.0, 0.0)
                     for t in plan.transfers]
    return simulate(costs, plan.micro_batches, transfers)


def _restore(layout: list, bufs: list, key, live) -> None:
    """Put each saved tensor of `layout` back into its Held as a view of the fetched
    buffers, counted under `key` (a function: its loop variables end with it)."""
    for h, i, dtype, offset, size, stride in layout:
        h.tensor = torch.empty(0, dtype=dtype, device=bufs[i].device).set_(
            bufs[i].untyped_storage(), offset, size, stride)
        h.key = key
        live.add(key)


def _as_bytes(storage) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


def _host(t: torch.Tensor) -> torch.Tensor:
    """`t` in host memory, for gloo (a copy where `t` is on a GPU)."""
    return t if t.device.type == "cpu" else t.cpu()


class Parking:
    """One stage's side of the plan's transfers (a no-op for a stage without any)."""

    def __init__(self, plan, stage: int, group, live, t0: float, bound: bool = True,
                 clock=None):
        self.stage, self.group, self.live, self.t0, self.bound = stage, group, live, t0, bound
        self.device = None if clock is None else clock.device     # None: the CPU
        self.park_waited = 0.0
        self.error = None
        self.out = {m: t["to"] for t in plan.transfers if t["from"] == stage
                    for m in t["micro_batches"]}
        hosted = {t["from"] for t in plan.transfers if t["to"] == stage}
        self.layouts, self.records, self._threads, self.issue_s = {}, [], [], {}
        self.fetch_at, self.wait_before = {}, {}
        self.parked = {m: threading.Event() for m in self.out}      # park sent
        self.issued = {m: threading.Event() for m in self.out}      # fetch may start
        self.fetched = {m: threading.Event() for m in self.out}     # fetch done
        self._parks = {m: queue.Queue(maxsize=1) for m in self.out}
        if not self.out and not hosted:
            return
        sim = planned(plan)
        order = stage_order(plan.stages, plan.micro_batches, stage)
        for p in range(len(order) - 1):
            kind, m = order[p + 1]
            if kind == "B" and m in self.out and \
                    sim.fetches[stage, m][0] < sim.ops[(stage, *order[p])][1]:
                self.fetch_at[order[p]] = m
        for kind, k in order:
            if kind == "F":
                start = sim.ops[stage, "F", k][0]
                self.wait_before[k] = [m for m in self.out if sim.parks[stage, m][1] <= start]
        for dst, seq in link_order(order, self.out).items():
            self._start(self._link, dst, seq)
        for src in sorted(hosted):
            out = {m: t["to"] for t in plan.transfers if t["from"] == src
                   for m in t["micro_batches"]}
            seq = link_order(stage_order(plan.stages, plan.micro_batches, src), out)[stage]
            self._start(self._host, src, seq)

    def _start(self, fn, *args):
        thread = threading.Thread(target=self._guard, args=(fn, *args), daemon=True)
        thread.start()
        self._threads.append(thread)

    def _guard(self, fn, *args):
        try:
            fn(*args)
        except BaseException as e:          # noqa: BLE001 - reported by finish()
            self.error = e

    def now(self) -> float:
        return time.perf_counter() - self.t0

    # -- the parking stage ----------------------------------------------------------------
    def op_start(self, op: tuple[str, int]) -> None:
        """Called as the stage starts `op` ("F"/"B", micro-batch): with `bound`, a forward
        first waits for the parks the plan has ended by then (the wait is recorded as
        park_waited_s); then a fetch due at this op is issued."""
        if self.bound and op[0] == "F" and self.wait_before.get(op[1]):
            t = time.perf_counter()
            for m in self.wait_before[op[1]]:
                self._wait(self.parked[m])
            self.park_waited += time.perf_counter() - t
        m = self.fetch_at.get(op)
        if m is not None:
            self._issue(m)

    def _issue(self, m: int) -> None:
        if not self.issued[m].is_set():
            self.issue_s[m] = self.now()
            self.issued[m].set()

    def park(self, m: int, held: list, keep: set) -> None:
        """After micro-batch m's forward: hand its saved storages to the link (if m is
        parked); they are sent as they are (no copy) and freed once sent."""
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
        self._parks[m].put((pieces, key, self.now()))

    def _link(self, dst: int, seq: list):
        """This stage's transfers with `dst`, one at a time, in the plan's link order."""
        import torch.distributed as dist

        for kind, m in seq:
            if kind == "fetch":
                self._wait(self.issued[m], own=False)
                self._fetch(m)
                continue
            pieces, key, queued = self._parks[m].get()
            start = self.now()
            dist.send(torch.tensor([len(pieces)]), dst, self.group, tag=PARK)
            if pieces:
                dist.send(torch.tensor([p.numel() for p in pieces]), dst, self.group, tag=PARK)
            for piece in pieces:
                dist.send(_host(piece), dst, self.group, tag=PARK)
            del pieces
            self.live.drop(key)
            self.records.append({"park": m, "to": dst, "bytes": key[-1], "queued_s": queued,
                                 "start_s": start, "end_s": self.now()})
            self.parked[m].set()

    def _fetch(self, m: int):
        import torch.distributed as dist

        start = self.now()
        layout, sizes = self.layouts.pop(m)
        key = ("fetched", m, sum(sizes))
        self.live.add(key)
        bufs = [torch.empty(n, dtype=torch.uint8) for n in sizes]
        for buf in bufs:
            dist.recv(buf, self.out[m], self.group, tag=FETCH)
        bufs = self._onto_device(bufs)
        _restore(layout, bufs, key, self.live)
        # autograd's slots own the restored Held alone: no reference to one may outlive
        # this point in this thread, or the micro-batch would stay counted after its
        # backward until the thread next runs
        del layout, bufs
        self.live.drop(key)           # alive while any restored tensor is
        self.records.append({"fetch": m, "from": self.out[m], "bytes": key[-1],
                             "issued_s": self.issue_s[m], "start_s": start,
                             "end_s": self.now()})
        self.fetched[m].set()

    def before_backward(self, m: int) -> float:
        """Issue micro-batch m's fetch if not yet issued, and wait for it (if parked);
        the seconds the backward waited."""
        if m not in self.out:
            return 0.0
        self._issue(m)
        t = time.perf_counter()
        self._wait(self.fetched[m])
        return time.perf_counter() - t

    def _wait(self, event: threading.Event, own: bool = True) -> None:
        """Wait for `event`; in the stage's thread (own), a transfer's failure is raised."""
        while not event.wait(0.05):
            if own and self.error is not None:
                raise self.error

    # -- the host -------------------------------------------------------------------------
    def _host(self, src: int, seq: list):
        """Stage `src`'s parks received and sent back, in the same link order."""
        import torch.distributed as dist

        held = {}
        for kind, m in seq:
            if kind == "fetch":
                bufs, key, arrived = held.pop(m)
                for buf in bufs:
                    dist.send(_host(buf), src, self.group, tag=FETCH)
                del bufs
                self.live.drop(key)
                self.records.append({"hosted": m, "from": src, "bytes": key[-1],
                                     "arrived_s": arrived, "returned_s": self.now()})
                continue
            count = torch.zeros(1, dtype=torch.int64)
            dist.recv(count, src, self.group, tag=PARK)
            sizes = torch.zeros(int(count), dtype=torch.int64)
            if int(count):
                dist.recv(sizes, src, self.group, tag=PARK)
            bufs = [torch.empty(int(n), dtype=torch.uint8) for n in sizes]
            key = ("hosted", src, m, int(sizes.sum()))
            self.live.add(key)
            for buf in bufs:
                dist.recv(buf, src, self.group, tag=PARK)
            bufs = self._onto_device(bufs)
            held[m] = (bufs, key, self.now())
            del bufs

    def _onto_device(self, bufs: list) -> list:
        """Received host buffers copied onto this stage's GPU (as they are on the CPU)."""
        return bufs if self.device is None else [b.to(self.device) for b in bufs]

    def finish(self, timeout_s: float) -> None:
        """Wait for every transfer thread; a transfer's failure is raised here."""
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if self.error is not None:
            raise self.error
        if any(t.is_alive() for t in self._threads):
            raise TimeoutError(f"stage {self.stage}: activation transfers did not finish "
                               f"within {timeout_s:g} s")
