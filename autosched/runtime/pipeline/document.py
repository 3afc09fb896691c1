"""Pipeline plans as data: the versioned JSON document, and the table printed for people.

    {"format": "autosched-pipeline-plan", "version": 1,
     "stages": S, "micro_batches": M, "schedule": "1F1B", "virtual_stages": 1,
     "layers": [layer names in model order, as runtime/layers.py names them],
     "boundaries": [0, b1, ..., L],         stage s runs layers[b[s]:b[s+1]] (interleaved:
                                            chunk c of S * v runs them, on rank c % S)
     "actions": {layer name: action name},  the single-device planner's action names
     "transfers": [{"from": i, "to": j, "micro_batches": [m, ...], "bytes": n,
                    "seconds": t}],         stage i parks these micro-batches' saved
                                            activations on stage j after their forward
                                            and fetches them back before their backward;
                                            bytes and seconds: one micro-batch, one way
     "budget_bytes": B,                     saved-activation bytes per device
     "predicted": {"step_s": t, "transfer_s": .., "exposed_transfer_s": ..,
                   "stages": [{"forward_s": .., "backward_s": .., (one micro-batch)
                               "peak_saved_bytes": .., "parked_bytes_in": ..,
                               "parked_bytes_out": .., "held_micro_batches": ..,
                               "saved_bytes_per_micro_batch": .., "send_s": ..,
                               "exposed_transfer_s": ..}]},
     "model": {...}, "link": {...}, "search": {...}}

Version 2 adds the interleaved schedule: "schedule": "interleaved-1F1B" with
"virtual_stages": v >= 2 (torch's ScheduleInterleaved1F1B, interleaved_schedule.py), boundaries
then split the layers into S * v chunks, predicted.stages has one row per rank (its
chunks summed; held_micro_batches counts chunk micro-batches) and predicted.chunks one
per chunk; it has no transfers. A 1F1B plan is still written as version 1 (virtual_stages
1), so a reader of version 1 reads every plan it could run; this version reads both.

The keys above "model" are the contract with the runner (runtime/pipeline/run.py); a
later version only adds keys. `model` says which model the plan is for (class, layer
fingerprint, containers, the rest of the model outside the layers), `link` the
point-to-point link the times assume, `search` how the plan was found.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from ...errors import UserError
from ..document import check_header
from ..units import format_bytes

PIPELINE_FORMAT = "autosched-pipeline-plan"
PIPELINE_VERSION = 1            # 1F1B plans
INTERLEAVED_VERSION = 2         # interleaved-1F1B plans
VERSIONS = (PIPELINE_VERSION, INTERLEAVED_VERSION)
SCHEDULE = "1F1B"
INTERLEAVED = "interleaved-1F1B"
_REQUIRED = ("stages", "micro_batches", "schedule", "layers", "boundaries", "actions",
             "transfers", "budget_bytes", "predicted")


@dataclass
class PipelinePlan:
    stages: int
    micro_batches: int
    layers: list
    boundaries: list
    actions: dict
    transfers: list
    budget_bytes: int
    predicted: dict
    schedule: str = SCHEDULE
    virtual_stages: int = 1
    model: dict = field(default_factory=dict)
    link: dict = field(default_factory=dict)
    search: dict = field(default_factory=dict)
    format: str = PIPELINE_FORMAT
    version: int = PIPELINE_VERSION

    def __post_init__(self):
        if self.schedule == INTERLEAVED:
            self.version = INTERLEAVED_VERSION

    def chunks(self, stage: int) -> list[int]:
        """The chunks (boundary intervals) stage `stage` runs: itself under 1F1B."""
        return list(range(stage, self.stages * self.virtual_stages, self.stages))

    def stage_layers(self, stage: int) -> list[str]:
        """The layer names stage `stage` runs (all its chunks', in model order)."""
        b = self.boundaries
        return [n for c in self.chunks(stage) for n in self.layers[b[c]:b[c + 1]]]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "PipelinePlan":
        """Parse and check a plan; anything else raises UserError with one line."""
        data = load_pipeline_document(text)
        missing = [k for k in _REQUIRED if k not in data]
        if missing:
            raise UserError(f"malformed pipeline plan: missing {', '.join(missing)}")
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        plan = cls(**known)
        plan.check()
        return plan

    def check(self) -> None:
        """The document's own consistency: boundaries cover the layers once, in order;
        every layer has an action; transfers name stages and micro-batches that exist."""
        b, L, S = self.boundaries, len(self.layers), self.stages
        v = self.virtual_stages
        if (self.schedule, self.version) not in ((SCHEDULE, PIPELINE_VERSION),
                                                 (INTERLEAVED, INTERLEAVED_VERSION)) or \
                not isinstance(v, int) or (v == 1) != (self.schedule == SCHEDULE) or v < 1:
            raise UserError(f"malformed pipeline plan: schedule {self.schedule!r} with "
                            f"{v!r} virtual stages at version {self.version} (1F1B with 1 "
                            f"at version 1, or {INTERLEAVED} with 2 or more at version 2)")
        if v > 1 and self.transfers:
            raise UserError(f"malformed pipeline plan: {INTERLEAVED} with transfers")
        if len(b) != S * v + 1 or b[0] != 0 or b[-1] != L or any(
                x >= y for x, y in zip(b, b[1:])):
            raise UserError(f"malformed pipeline plan: boundaries {b} do not split {L} "
                            f"layers into {S * v} non-empty "
                            f"{'stages' if v == 1 else 'chunks'}")
        if set(self.actions) != set(self.layers):
            raise UserError("malformed pipeline plan: actions do not name every layer once")
        for t in self.transfers:
            if not (0 <= t["from"] < S and 0 <= t["to"] < S) or not all(
                    0 <= m < self.micro_batches for m in t["micro_batches"]):
                raise UserError(f"malformed pipeline plan: transfer {t['from']} -> "
                                f"{t['to']} names a stage or micro-batch that does not exist")

    def table(self) -> str:
        """Per stage: its layers, actions, times, memory; then transfers and the step."""
        head = ("stage", "layers", "actions", "fwd ms", "bwd ms", "held", "peak saved",
                "parked out", "parked in")
        rows = [head]
        for s, st in enumerate(self.predicted["stages"]):
            names = self.stage_layers(s)
            acts = sorted({self.actions[n] for n in names})
            rows.append((str(s), "+".join(self._span(c) for c in self.chunks(s)),
                         ",".join(acts), f"{st['forward_s'] * 1e3:.2f}",
                         f"{st['backward_s'] * 1e3:.2f}", str(st["held_micro_batches"]),
                         format_bytes(st["peak_saved_bytes"]),
                         format_bytes(st["parked_bytes_out"]),
                         format_bytes(st["parked_bytes_in"])))
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
        p = self.predicted
        virtual = f" ({self.virtual_stages} virtual stages per device)" \
            if self.virtual_stages > 1 else ""
        lines += ["", f"budget      {format_bytes(self.budget_bytes)} of saved activations "
                  f"per device; {self.stages} stages, {self.micro_batches} micro-batches, "
                  f"{self.schedule}{virtual}"]
        for t in self.transfers:
            lines.append(f"transfer    stage {t['from']} -> {t['to']}: micro-batches "
                         f"{','.join(map(str, t['micro_batches']))}, "
                         f"{format_bytes(t['bytes'])} each way each")
        lines.append(f"step time   {p['step_s'] * 1e3:.1f} ms predicted (transfers "
                     f"{p['transfer_s'] * 1e3:.1f} ms on the links, "
                     f"{p['exposed_transfer_s'] * 1e3:.1f} ms not hidden)")
        return "\n".join(lines)

    def _span(self, chunk: int) -> str:
        names = self.layers[self.boundaries[chunk]:self.boundaries[chunk + 1]]
        return f"{names[0]}..{names[-1]}" if len(names) > 1 else names[0]


def load_pipeline_document(text: str) -> dict:
    """The JSON object of a pipeline plan of a version this autosched reads, or one
    UserError line."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise UserError(f"not a pipeline plan: invalid JSON ({e})") from None
    check_pipeline_header(data)
    return data


def check_pipeline_header(data) -> None:
    """check_header for either version this autosched reads."""
    check_header(data, PIPELINE_FORMAT, data.get("version") if isinstance(data, dict) else 0,
                 "pipeline plan")
    if data.get("version") not in VERSIONS:
        raise UserError(f"pipeline plan version {data.get('version')} is not supported "
                        f"(this autosched reads versions {PIPELINE_VERSION} and "
                        f"{INTERLEAVED_VERSION})")
