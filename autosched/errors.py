"""Errors that reach the user.

A `UserError` is bad input: the CLI prints its message on one line and exits 2.
Anything else is a bug or an environment failure and exits 1.
"""


class UserError(Exception):
    """Bad input from the user (file, argument, URL, target): exit code 2."""


class BudgetExhausted(Exception):
    """Raised by components that can no longer make progress (e.g. no RPC server left)."""


class NoServersLeft(BudgetExhausted):
    """Every RPC server of the runner's key is gone (or the tracker is): nothing can be
    measured any more. The tuning loop stops cleanly; committed records are kept."""
