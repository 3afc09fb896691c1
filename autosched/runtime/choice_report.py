"""A measured choice (choice.Choice) as a versioned JSON document and as a table."""
from __future__ import annotations

import json

from ..tables import format_table
from .units import format_bytes

CHOICE_FORMAT = "autosched.choice"
CHOICE_VERSION = 1

# one letter or two per action, for tables of action lists
SHORT = {"keep": "K", "memeff_ln": "L", "memeff": "M", "recompute_attention": "A",
         "recompute_attention+memeff_ln": "AL", "recompute_attention+memeff": "AM",
         "selective": "S", "selective_dense": "SD", "selective_narrow": "SN",
         "fused_attention": "F", "selective+fused_attention": "SF",
         "selective_dense+fused_attention": "SDF", "selective_narrow+fused_attention": "SNF",
         "recompute": "R", "offload": "O", "offload+memeff_ln": "OL", "offload+memeff": "OM"}


def short_actions(actions) -> str:
    """`K K S R`: an action list in SHORT's letters ("-" for none)."""
    return " ".join(SHORT.get(a, a) for a in actions or []) or "-"


def choice_json(choice) -> str:
    """The document: per budget its answer (the chosen point), the plans the answers run
    (each a plan document, Plan.from_json reads it), every chosen row and every measured
    point."""
    answers = {b: choice.answer(b) for b in choice.budgets}
    plans = {a["chosen"]: json.loads(choice.plans[a["chosen"]].to_json())
             for a in answers.values() if a and a["chosen"] in choice.plans}
    return json.dumps({
        "format": CHOICE_FORMAT, "version": CHOICE_VERSION,
        "reference_saved_bytes": choice.reference_saved_bytes,
        "budgets": choice.budgets,
        "answers": answers, "plans": plans,
        "chosen": choice.chosen, "points": choice.points}, indent=1, sort_keys=True)


def choice_table(choice) -> str:
    """Per budget: what was chosen, its bytes and held-out time, its peer and the ratio."""
    rows, used = [], set()
    for spec, budget in choice.budgets.items():
        r = choice.answer(spec)
        if r is None:
            rows.append((spec, format_bytes(budget), "nothing measured fits", "-", "-", "-",
                         "-", "-"))
            continue
        used.update(r.get("actions") or ())
        rows.append((spec, format_bytes(budget), r["chosen"], short_actions(r.get("actions")),
                     format_bytes(r["saved"]), f"{r['time_s'] * 1e3:.2f}", r["peer"] or "-",
                     "-" if r["ratio"] is None else f"{r['ratio']:.3f}"))
    table = format_table(("budget", "bytes", "chosen", "actions", "saved", "ms (held out)",
                          "peer", "ratio"), rows, right=2)
    return "\n".join([
        table, "",
        f"no checkpointing saves {format_bytes(choice.reference_saved_bytes)}; "
        f"{len(choice.points)} candidates measured; chosen on the odd timing rounds, "
        "timed on the even ones",
        "ratio: the chosen point's time over its peer's (the fastest unplanned point "
        "saving no more)",
        "actions: " + (", ".join(f"{v} {k}" for k, v in SHORT.items() if k in used)
                       or "-")])
