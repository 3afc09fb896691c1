"""A time limit on the user's Python code (loading an op file, calling a workload), so
a file that loops or computes at import cannot hang the CLI."""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

from .errors import UserError


class _TimeUp(BaseException):
    """Raised by the alarm; a BaseException so the user's `except Exception` in a
    retry loop cannot swallow it."""


@contextmanager
def time_limit(seconds: float | None, what: str):
    """Stop the user's Python code in the block after `seconds` with a UserError naming
    `what`. SIGALRM works only in the main thread; elsewhere (an API user's worker
    thread), while another alarm is pending, or with `seconds` None or 0 the block runs
    unlimited. Native code that never returns to the interpreter is not interrupted
    until it does."""
    if not seconds or threading.current_thread() is not threading.main_thread() \
            or signal.getitimer(signal.ITIMER_REAL)[0] > 0:
        # an alarm someone else set (a test runner's timeout) is left alone: taking
        # over SIGALRM would cancel it
        yield
        return

    def expire(signum, frame):
        raise _TimeUp()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _TimeUp:
        raise UserError(f"{what} did not finish within {seconds:g} s (an endless loop or "
                        "a long computation?); raise the limit with --load-timeout") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
