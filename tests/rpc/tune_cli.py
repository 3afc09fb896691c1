"""`autosched ARGS...` as users run it, with two test-only adjustments taken from the
environment: AUTOSCHED_TEST_SPACE=1 tunes over the test tiling space (while the real
llvm space has only the default schedule), and AUTOSCHED_TEST_MIN_REPEAT_MS=N makes
every timing repeat last at least N ms, so that a server killed by a test dies in the
middle of a session rather than between two."""
import functools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

if os.environ.get("AUTOSCHED_TEST_SPACE") == "1":
    import rpcspace

    rpcspace.install()

if os.environ.get("AUTOSCHED_TEST_MIN_REPEAT_MS"):
    import autosched.measure.settings as settings

    settings.MeasureSettings = functools.partial(
        settings.MeasureSettings, min_repeat_ms=int(os.environ["AUTOSCHED_TEST_MIN_REPEAT_MS"]))

from autosched.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
