"""`autosched ARGS...` with the tuning loop on the test tiling space when
AUTOSCHED_TEST_SPACE=1 (the real space otherwise): the CLI exactly as users run it."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

if os.environ.get("AUTOSCHED_TEST_SPACE") == "1":
    import rpcspace

    rpcspace.install()

from autosched.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
