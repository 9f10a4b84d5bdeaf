"""How `batchtwin` reports what went wrong: the one error path of every command.

- Bad input (`BAD_INPUT`): one line `batchtwin <command>: <what is wrong>` on stderr, exit 1.
  That is every ValueError (the project's convention for a bad value or file:
  InvalidRequestError, InvalidModelConfig, UnsupportedModelError, CheckpointError and the
  plain ValueErrors of configs, workloads, hardware and model keys), every OSError (a missing
  or unwritable file; ModelNotFoundError) and NotImplementedError (the simulator's marked
  extension points, e.g. mixture-of-experts models). Not RuntimeError: the engine's
  (KVCacheOOMError, MemoryLeakError, a stalled scheduler) are bugs, as are TypeErrors.
- A usage error (`UsageError`, or argparse's own): the usage line and
  `batchtwin <command>: error: <message>`, exit 2.
- A reader that closes stdout (`batchtwin simulate | head`): exit 1 quietly.
- Anything else is a bug: its traceback, as Python prints it. `batchtwin --debug` shows the
  traceback of bad input too.
"""

from __future__ import annotations

import argparse
import os
import sys

EXIT_BAD_INPUT = 1
EXIT_USAGE = 2
EXIT_BROKEN_PIPE = 1  # NOTE: what Python exits with on EPIPE (the signal module's recipe)
BAD_INPUT = (ValueError, OSError, NotImplementedError)


class UsageError(ValueError):
    """Flags a command can only check once they are all parsed (they do not go together, or
    a value out of range for another flag): reported as argparse reports a bad flag."""


def one_line(command: str, error: BaseException) -> str:
    """`batchtwin <command>: <message>`, the message's lines joined (the type's name when
    the message is empty)."""
    text = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
    return f"batchtwin {command}: {text or type(error).__name__}"


def report_bad_input(command: str, error: BaseException) -> int:
    print(one_line(command, error), file=sys.stderr)
    return EXIT_BAD_INPUT


def report_usage(parser: argparse.ArgumentParser, error: UsageError) -> int:
    """What `parser.error` prints (usage, then `prog: error: ...`), returned as exit 2."""
    parser.print_usage(sys.stderr)
    print(f"{parser.prog}: error: {error}", file=sys.stderr)
    return EXIT_USAGE


def exit_status(stop: SystemExit) -> int:
    """The status a SystemExit carries (argparse's --help: 0, a bad flag: 2)."""
    if stop.code is None:
        return 0
    return stop.code if isinstance(stop.code, int) else EXIT_BAD_INPUT


def quiet_broken_pipe() -> int:
    """stdout's reader has gone: point stdout's file descriptor at devnull, so that the
    interpreter's last flush does not fail again, and exit 1 (the Python docs' recipe in the
    signal module's "Note on SIGPIPE")."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # NOTE: a stdout without one (in-process)
        return EXIT_BROKEN_PIPE
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
    return EXIT_BROKEN_PIPE
