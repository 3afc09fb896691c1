"""Byte quantities: memory-budget strings in, human-readable sizes out (no torch here)."""
from __future__ import annotations

import re

from ..errors import UserError

_UNITS = {"": 1, "b": 1,
          "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*|%)\s*$")
_EXAMPLES = "use e.g. 2GiB, 512MiB, 1.5GB, 1000000 (bytes) or 60% (of the activation memory " \
            "without checkpointing)"


def parse_budget(spec, reference_bytes: int | None = None) -> int:
    """Bytes meant by a budget: "2GiB", "512MiB", "1.5GB", "1000000", 1e6, or "60%".

    A percentage is of `reference_bytes` (the activation memory without checkpointing).
    Anything else, zero or negative raises UserError.
    """
    if isinstance(spec, bool):
        raise UserError(f"memory budget {spec!r} is not understood: {_EXAMPLES}")
    if isinstance(spec, (int, float)):
        value, unit = float(spec), ""
    else:
        m = _PATTERN.match(str(spec))
        if not m or m.group(2).lower() not in _UNITS and m.group(2) != "%":
            raise UserError(f"memory budget {spec!r} is not understood: {_EXAMPLES}")
        value, unit = float(m.group(1)), m.group(2).lower()
    if not value > 0 or value != value or value == float("inf"):
        raise UserError(f"memory budget {spec!r} must be a positive amount")
    if unit == "%":
        if reference_bytes is None:
            raise UserError(f"memory budget {spec!r} is a percentage, but no reference "
                            "activation memory is known")
        return int(reference_bytes * value / 100.0)
    return int(value * _UNITS[unit])


def format_bytes(n: float) -> str:
    """1536 -> '1.50 KiB'; binary units, three significant digits."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"
