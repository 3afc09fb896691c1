"""`python -m autosched ARGS...`: the same as the `autosched` command."""
import sys

from .cli import main

sys.exit(main())
