"""Measure every candidate of tests/support/tiny_space.py on this machine and write
them as a `db export` JSON-lines log (tests/data/tiny_matmul.jsonl), the data of the
simulated-measurer tests. Run from the repository root on a quiet machine:

    python tests/data/make_tiny_matmul_log.py
"""
from __future__ import annotations

import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))

from support import tiny_space  # noqa: E402

from autosched.db import make_record  # noqa: E402
from autosched.db.jsonl import write_records  # noqa: E402
from autosched.measure import MeasureInput, MeasureSettings  # noqa: E402
from autosched.measure.factory import make_measurer  # noqa: E402
from autosched.target import resolve_target  # noqa: E402
from autosched.versions import current_versions  # noqa: E402
from autosched.workload import load_tasks  # noqa: E402
from search_space import SPACE_VERSION  # noqa: E402


def main() -> int:
    target = resolve_target("llvm")
    (task,) = load_tasks(os.path.join(ROOT, "examples", "matmul.py"), None,
                         [f"{k}={v}" for k, v in tiny_space.SHAPE.items()])
    space = tiny_space.make_space(task, target)
    cands = tiny_space.all_candidates()
    settings = MeasureSettings()
    inputs = [MeasureInput(task, target, c, space.apply(c)) for c in cands]
    versions = current_versions(SPACE_VERSION)
    with tempfile.TemporaryDirectory() as work, make_measurer(settings, "local", work) as m:
        results = []
        for start in range(0, len(inputs), 16):
            results += m.measure(inputs[start:start + 16])
            print(f"{len(results)}/{len(inputs)}", file=sys.stderr)
    records = [make_record(task, target, c, r, versions, settings.to_json())
               for c, r in zip(cands, results)]
    n = write_records(records, os.path.join(ROOT, tiny_space.LOG))
    print(f"wrote {n} records to {tiny_space.LOG}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
