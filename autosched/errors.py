"""Errors that reach the user.

A `UserError` is bad input: the CLI prints its message on one line and exits 2.
Anything else is a bug or an environment failure and exits 1; an `InfrastructureError`
names the failure of the environment and its remedy on that one line.
"""


class UserError(Exception):
    """Bad input from the user (file, argument, URL, target): exit code 2."""


class BudgetExhausted(Exception):
    """Raised by components that can no longer make progress (e.g. no RPC server left)."""


class NoServersLeft(BudgetExhausted):
    """Every RPC server of the runner's key is gone (or the tracker is): nothing can be
    measured any more. The tuning loop stops cleanly; committed records are kept."""


class InfrastructureError(Exception):
    """A fault of the machine, not of the candidate: the toolchain, the build folder's
    filesystem, a worker that cannot start, the database connection. It is never
    recorded as a candidate's result (a failure record is a promise never to measure
    the candidate again); the tuning loop stops, keeps what it committed, and a rerun
    after the fix measures the rest. `cause` says what broke, `remedy` what to do."""

    def __init__(self, cause: str, remedy: str):
        super().__init__(f"{cause}; {remedy}")
        self.cause = cause
        self.remedy = remedy
