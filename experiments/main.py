"""The `batchtwin` command line: a registry of subcommands, one module each.

A subcommand is a `Command(name, help, configure, run)`: `configure(parser)` adds its
arguments and `run(args)` does the work and returns an exit code. The commands that run the
real executor are wrapped in `needs_exec`: without the exec extra (torch) they exit 1 with
one line saying how to install it.

Errors are reported here, once for every command (`experiments.cli.errors`): bad input is
one line and exit 1, a usage error exit 2, anything else its traceback; `--debug` shows the
traceback of bad input too.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import NamedTuple

from experiments import explain_cmd, generate_cmd, prefix_reuse_cmd, replay_cmd, simulate_cmd
from experiments.bench import bench_cmd
from experiments.calibration import calibrate_cmd, fidelity_cmd
from experiments.cli.errors import (
    BAD_INPUT,
    EXIT_USAGE,
    UsageError,
    exit_status,
    quiet_broken_pipe,
    report_bad_input,
    report_usage,
)
from experiments.cli.exec_extra import needs_exec
from experiments.plan import plan_cmd
from experiments.serve import serve_cmd


class Command(NamedTuple):
    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


COMMANDS = (
    Command("generate", generate_cmd.HELP, generate_cmd.configure,
            needs_exec("generate", generate_cmd.run)),
    Command("prefix-reuse", prefix_reuse_cmd.HELP, prefix_reuse_cmd.configure, prefix_reuse_cmd.run),
    Command("simulate", simulate_cmd.HELP, simulate_cmd.configure, simulate_cmd.run),
    Command("replay", replay_cmd.HELP, replay_cmd.configure, replay_cmd.run),
    Command("explain", explain_cmd.HELP, explain_cmd.configure,
            needs_exec("explain", explain_cmd.run, "`batchtwin explain --sim-only`")),
    Command("plan", plan_cmd.HELP, plan_cmd.configure, plan_cmd.run),
    Command("serve", serve_cmd.HELP, serve_cmd.configure,
            needs_exec("serve", serve_cmd.run, "`batchtwin serve --simulate`")),
    Command("bench", bench_cmd.HELP, bench_cmd.configure, bench_cmd.run),
    Command("calibrate", calibrate_cmd.HELP, calibrate_cmd.configure,
            needs_exec("calibrate", calibrate_cmd.run)),
    Command("fidelity", fidelity_cmd.HELP, fidelity_cmd.configure,
            needs_exec("fidelity", fidelity_cmd.run)),
)


def _version() -> str:
    try:
        return version("batchtwin")
    except PackageNotFoundError:
        return "unknown"


def build_parser(commands: Sequence[Command] = COMMANDS) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="batchtwin",
        description="One forward-batch spec (SGLang's scheduler path), two executors: "
                    "real PyTorch and a SimPy cost-model simulator.")
    parser.add_argument("--version", action="version", version=f"batchtwin {_version()}")
    parser.add_argument("--debug", action="store_true",
                        help="on bad input, show the traceback instead of one line")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for cmd in commands:
        # NOTE: no prefix matching: `plan --rate 5` must not read as --rate-tolerance
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help, allow_abbrev=False)
        cmd.configure(p)
        p.set_defaults(_run=cmd.run, _parser=p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `batchtwin ARGV`; the exit status (a usage error returns 2 rather than raising)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:
        return exit_status(stop)
    if not hasattr(args, "_run"):
        parser.print_help()
        return EXIT_USAGE
    if args.debug:
        return run_command(args)
    try:
        return run_command(args)
    except BrokenPipeError:
        return quiet_broken_pipe()
    except UsageError as e:
        return report_usage(args._parser, e)
    except BAD_INPUT as e:
        return report_bad_input(args.command, e)


def run_command(args: argparse.Namespace) -> int:
    """The command's exit status, its output flushed (a closed pipe fails here, not at exit)."""
    status = args._run(args)
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
