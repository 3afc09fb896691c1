"""Plans as data: a versioned JSON document, and the table printed for people.

A plan names, per layer, its action, the kernel behind it ("torch" or an autosched record
id), the streams its work runs on, and the predicted time and bytes of the choice and of
every alternative; globally the predictions and how the solver ended.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from ..errors import UserError
from .units import format_bytes

PLAN_FORMAT = "autosched.plan"
PLAN_VERSION = 1


@dataclass
class LayerPlan:
    name: str
    index: int
    action: str
    kernel: str                       # "torch", or "autosched::op=<record id>; ..."
    stream: dict                      # {"compute": "default", "transfer": ...}
    predicted: dict                   # time_s, fwd_s, bwd_s, exposed_transfer_s, bytes...
    choices: dict                     # action -> {"time_s", "saved_bytes", "host_bytes"}
    custom_ops: list = field(default_factory=list)
    attention_cores: list = field(default_factory=list)
    fused_attention: dict = field(default_factory=dict)   # core name -> causal


@dataclass
class Plan:
    model: dict                       # class, fingerprint, layer rule, layer count
    device: str
    budget: dict                      # {"bytes": int, "spec": str}
    reference: dict                   # no-checkpoint saved bytes and step time (measured)
    bandwidth: dict
    layers: list
    predicted: dict
    solver: dict
    format: str = PLAN_FORMAT
    version: int = PLAN_VERSION

    @property
    def actions(self) -> list[str]:
        return [layer.action for layer in self.layers]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        """Parse a plan; a document that is not a plan of this version raises UserError."""
        data = load_document(text, PLAN_FORMAT, PLAN_VERSION, "plan")
        try:
            layers = [LayerPlan(**layer) for layer in data.pop("layers")]
            return cls(layers=layers, **data)
        except (TypeError, KeyError) as e:
            raise UserError(f"malformed plan: {e}") from None

    def table(self) -> str:
        """The per-layer table and the global predictions, for the terminal."""
        head = ("layer", "action", "kernel", "time ms", "saved", "host", "transfer ms")
        rows = [head]
        for layer in self.layers:
            p = layer.predicted
            rows.append((layer.name, layer.action, layer.kernel, f"{p['time_s'] * 1e3:.2f}",
                         format_bytes(p["saved_bytes"]), format_bytes(p["host_bytes"]),
                         f"{p['exposed_transfer_s'] * 1e3:.2f}"))
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
        g, ref = self.predicted, self.reference
        lines += [
            "",
            f"budget            {format_bytes(self.budget['bytes'])} ({self.budget['spec']})",
            f"saved activations {format_bytes(g['saved_bytes'])} predicted "
            f"(no checkpointing: {format_bytes(ref['saved_bytes'])}); "
            f"offloaded {format_bytes(g['host_bytes'])}",
            f"step time         {g['step_time_s'] * 1e3:.1f} ms predicted "
            f"(no checkpointing: {ref['step_time_s'] * 1e3:.1f} ms; extra compute "
            f"{g['recompute_s'] * 1e3:.1f} ms{_once(g)}, exposed transfers "
            f"{g['exposed_transfer_s'] * 1e3:.1f} ms)",
            f"solver            {self.solver['name']}: {self.solver['status']} in "
            f"{self.solver['solve_time_s']:.2f} s",
        ]
        if "measured_saved_bytes" in self.solver:
            lines.append(f"compiled          {format_bytes(self.solver['measured_saved_bytes'])}"
                         " saved, measured (solved for "
                         f"{format_bytes(self.solver['limit_bytes'])})")
        if self.model.get("layout"):
            lines.append(f"layout            {self.model['layout']} (compile_planned applies it)")
        if g["host_bytes"] and not self.bandwidth.get("overlap", False) and \
                self.device.startswith("cpu"):
            lines.append("note              on the CPU host and device memory are the same RAM: "
                         "offload lowers the activations autograd holds, not the process's "
                         "memory")
        return "\n".join(lines)


def load_document(text: str, fmt: str, version: int, noun: str) -> dict:
    """The JSON object in `text`, if it is a `noun` document ("plan", "pipeline plan") of
    format `fmt` at `version`; else one UserError line. Shared by the plan documents: each
    reads its own keys after this."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise UserError(f"not a {noun}: invalid JSON ({e})") from None
    check_header(data, fmt, version, noun)
    return data


def check_header(data, fmt: str, version: int, noun: str) -> None:
    """`data` (a parsed document) is a dict of format `fmt` at `version`, or UserError."""
    if not isinstance(data, dict) or data.get("format") != fmt:
        raise UserError(f"not an autosched {noun} (missing format {fmt!r})")
    if data.get("version") != version:
        raise UserError(f"{noun} version {data.get('version')} is not supported "
                        f"(this autosched reads version {version})")


def _once(predicted: dict) -> str:
    """The part of the extra compute paid once for the plan (once_costs.py), if any."""
    once = predicted.get("once_s", 0.0)
    return f" of which {once * 1e3:.1f} ms once for the plan" if once else ""
