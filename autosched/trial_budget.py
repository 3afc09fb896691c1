"""How many measurements a tuning run may make, from its two limits.

`--trials N` (`TuneConfig.trials`) counts the measurements of one tuning run: one
invocation with the local and RPC runners, and the bundle directory's whole life with
`--runner bundle:DIR` (where each invocation writes one round: `Measurer.budget` leaves
what earlier rounds did not spend). Either way the same number of candidates is measured.

`--total-trials N` (`TuneConfig.total_trials`) means the same for every runner: the run
stops once the database holds N records (one per candidate, any outcome) of the run's
tasks on this target and machine, earlier runs' included. So the same command, rerun
after a `--time-budget`, a kill or a lost server, resumes and ends with exactly N. A
failure up for `--retry-failures` is measured again within that total: its new result
replaces its record. When both are given, both limits apply.
"""
from __future__ import annotations


def run_budget(measurer_budget: int, total_trials: int | None, states) -> int:
    """The measurements this run may make: what the measurer grants of `--trials`
    (`measurer_budget`), at most what `total_trials` leaves after the records the
    states already hold (those not up for a retry). `states` are the run's TaskStates
    at its start."""
    if total_trials is None:
        return measurer_budget
    kept = sum(len(s.measured) for s in states)  # retried failures are left out of it
    return max(0, min(measurer_budget, total_trials - kept))


def records_held(states) -> int:
    """The records the database holds for the run's tasks on this target and machine,
    as the states know them: every candidate measured (this run's and earlier ones'),
    and the failures up for a retry that were not measured again."""
    return sum(len(s.measured | {c.key for c in s.retry}) for s in states)


def total_line(total_trials: int, held: int) -> str:
    """One line on where the run stands against `--total-trials`."""
    if held >= total_trials:
        return (f"--total-trials {total_trials} reached: the database holds {held} records "
                "of these tasks on this target and machine")
    return (f"the database holds {held} of the {total_trials} records --total-trials asks "
            "for, of these tasks on this target and machine")
