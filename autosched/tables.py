"""Plain-text tables and the labels every report shares (latency, target, throughput)."""
from __future__ import annotations

import json
import math


def format_table(header, rows, right: int = 0, rule: bool = True) -> str:
    """Columns padded to their widest cell, a dashed rule under the header (`rule`);
    the last `right` columns (numbers) are right-aligned."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    first_right = len(widths) - right

    def line(cells):
        return "  ".join(str(c).rjust(w) if i >= first_right else str(c).ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    head = [line(header)] + ([line(["-" * w for w in widths])] if rule else [])
    return "\n".join(head + [line(r) for r in rows])


def latency_label(seconds: float | None) -> str:
    """`1.234 ms` or `56.7 us`; `-` when there is none."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    return f"{seconds * 1e3:.3f} ms" if seconds >= 1e-4 else f"{seconds * 1e6:.1f} us"


def gflops_label(flops: float | None, seconds: float | None) -> str:
    if not flops or not seconds or not math.isfinite(seconds):
        return "-"
    return f"{flops / seconds / 1e9:.1f}"


def target_label(target_key: str) -> str:
    """`llvm skylake-avx512`, `cuda sm_90`: the kind and what distinguishes it."""
    try:
        cfg = json.loads(target_key)
    except ValueError:
        return target_key[:30]
    if not isinstance(cfg, dict):
        return target_key[:30]
    detail = cfg.get("mcpu") or cfg.get("arch") or ""
    return f"{cfg.get('kind', '?')} {detail}".strip()
