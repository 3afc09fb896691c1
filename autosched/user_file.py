"""A user's Python file (an op file, a model file) run as a module of its own.

Both kinds are plain Python that we execute and then read names from; whatever goes wrong
while the file loads is the user's to fix, so each failure is one `UserError` line that
names the file and, where there is one, the line of it:

    FILE not found: PATH                       (KIND is "op file", "model file")
    PATH:LINE: syntax error: MESSAGE
    PATH:LINE: imports module 'NAME', which is not installed
    PATH:LINE: the KIND called exit(CODE) while loading
    PATH: error while loading (line LINE): TYPE: FIRST LINE OF THE MESSAGE

LINE is that of the innermost frame in the file itself (the import or call that failed),
"?" when the error arose outside it.
"""
from __future__ import annotations

import os
import runpy
import sys
import traceback
import types

from .errors import UserError
from .time_limit import time_limit


def run_user_file(path: str, kind: str, prefix: str, timeout_s: float | None = None,
                  register: bool = False) -> dict:
    """Execute the file at `path` in its own namespace and return the namespace.

    `kind` names the file in messages ("op file"); its module is named `prefix` plus a
    hash of the path. `timeout_s` bounds the load (None: no bound), so a file that loops
    at import does not hang the CLI. `register` also puts the module in `sys.modules`:
    torch.compile imports the module a traced class was defined in by its name."""
    if not os.path.isfile(path):
        raise UserError(f"{kind} not found: {path}")
    name = f"{prefix}{abs(hash(path))}"
    try:
        with time_limit(timeout_s, f"{path}: loading"):
            namespace = runpy.run_path(path, run_name=name)
    except SyntaxError as e:
        raise UserError(f"{path}:{e.lineno}: syntax error: {e.msg}") from None
    except UserError:
        raise
    except ModuleNotFoundError as e:
        raise UserError(f"{path}:{user_line(e, path)}: imports module {e.name!r}, which is "
                        "not installed") from None
    except SystemExit as e:  # exit() at import would end the CLI silently
        raise UserError(f"{path}:{user_line(e, path)}: the {kind} called exit({e.code!r}) "
                        "while loading") from None
    except Exception as e:  # the user's file raised while loading
        raise UserError(f"{path}: error while loading (line {user_line(e, path)}): "
                        f"{type(e).__name__}: {first_line(e)}") from None
    if register:
        module = types.ModuleType(name)
        module.__dict__.update(namespace)
        sys.modules[name] = module
    return namespace


def user_line(e: BaseException, path: str) -> int | str:
    """The line of `path` the error came from (its innermost frame there), else "?"."""
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if os.path.abspath(f.filename) == os.path.abspath(path)]
    return frames[-1].lineno if frames else "?"


def first_line(e: BaseException) -> str:
    """The first line of an exception's message ("" if it has none)."""
    text = str(e).strip()
    return text.splitlines()[0] if text else ""
