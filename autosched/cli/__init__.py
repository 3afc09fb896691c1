"""The `autosched` command line: one module per command, and the tables and progress
display they print. `main(argv)` runs a command and returns its exit code."""
from .main import main

__all__ = ["main"]
