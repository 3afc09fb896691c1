"""`autosched ARGS...` as users run it, except that AUTOSCHED_TEST_MIN_REPEAT_MS=N makes
every timing repeat last at least N ms, so that a server a test kills dies in the
middle of a session rather than between two."""
import functools
import os
import sys

if os.environ.get("AUTOSCHED_TEST_MIN_REPEAT_MS"):
    import autosched.measure.settings as settings

    settings.MeasureSettings = functools.partial(
        settings.MeasureSettings, min_repeat_ms=int(os.environ["AUTOSCHED_TEST_MIN_REPEAT_MS"]))

from autosched.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
