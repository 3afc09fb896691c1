"""`python -m autosched.cli ARGS...`: the same as the `autosched` command."""
import sys

from .main import main

sys.exit(main())
