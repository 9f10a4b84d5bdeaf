"""The `exec` extra (torch, tokenizers, safetensors, gguf, jinja2): the commands that run the
real executor need it; without it they exit 1 with one line saying how to install it.

The simulator's commands (`plan`, `simulate`, `replay`, `explain --sim-only`) never need it.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable

EXEC_MODULES = frozenset({"torch", "tokenizers", "safetensors", "gguf", "jinja2"})
INSTALL = 'pip install -e ".[exec]"'
EXIT_MISSING = 1

Run = Callable[[argparse.Namespace], int]


def missing_exec_module(error: ModuleNotFoundError) -> str | None:
    """The exec-extra package whose absence raised `error`, or None for any other module."""
    top = (error.name or "").split(".")[0]
    return top if top in EXEC_MODULES else None


def install_hint(command: str, module: str, alternative: str = "") -> str:
    """The one line: `batchtwin generate needs the exec extra: pip install -e ".[exec]" ...`."""
    also = f"; or {alternative}" if alternative else ""
    return f"batchtwin {command} needs the exec extra: {INSTALL} (no module named {module!r}{also})"


def needs_exec(command: str, run: Run, alternative: str = "") -> Run:
    """`run`, with a missing exec-extra module turned into the one-line hint and exit 1."""

    @functools.wraps(run)
    def guarded(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except ModuleNotFoundError as e:
            module = missing_exec_module(e)
            if module is None:
                raise
            print(install_hint(command, module, alternative), file=sys.stderr)
            return EXIT_MISSING

    return guarded
