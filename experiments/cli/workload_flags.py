"""The workload flags `batchtwin simulate` and `plan` share, and the workload they describe:
a generator of `shared.workload.registry.GENERATORS` (ShareGPT-like, synthetic fixed
lengths, SGLang's generated shared prefix, multi-tenant shared prefixes with Zipf
popularity, closed-loop conversations `sessions`: each turn sent a think time after the
previous reply, open-loop `multi-turn` conversations) or a saved workload file.

`workload_spec(args)` is the generator's spec: `--prompt-len` / `--output-len` when given,
else the generator's `DEFAULT_LENGTHS`, and the spec's `from_flags` reads the flags it uses.
"""

from __future__ import annotations

import argparse
import math

from experiments.cli.arg_types import (
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    seed,
)
from shared.workload.registry import GENERATORS


def workload_arguments(g: argparse._ArgumentGroup) -> None:
    g.add_argument("--workload", choices=tuple(GENERATORS), default="sharegpt")
    g.add_argument("--workload-file", default=None, metavar="JSONL",
                   help="a saved batchtwin workload (overrides --workload)")
    g.add_argument("--num-requests", type=positive_int, default=100)
    g.add_argument("--rate", type=positive_float, default=math.inf,
                   help="requests/s (default inf: every request arrives at t=0)")
    g.add_argument("--burstiness", type=float, default=1.0, help="gamma shape (1: Poisson)")
    g.add_argument("--prompt-len", type=positive_int, default=None,
                   help="prompt tokens (sharegpt: median 200; synthetic: 512; "
                        "shared-prefix: question length 128)")
    g.add_argument("--output-len", type=positive_int, default=None,
                   help="output tokens (sharegpt: median 200; synthetic 128; shared-prefix 256)")
    g.add_argument("--num-groups", type=positive_int, default=8,
                   help="shared-prefix: prompt groups; multi-tenant: tenants")
    g.add_argument("--tenant-zipf", type=non_negative_float, default=1.0, metavar="S",
                   help="multi-tenant: Zipf exponent of tenant popularity (0: even)")
    g.add_argument("--system-prompt-len", type=non_negative_int, default=2048,
                   help="shared-prefix: system prompt tokens")
    g.add_argument("--turns", type=positive_int, default=4,
                   help="sessions, multi-turn: turns per conversation (--num-requests "
                        "conversations)")
    g.add_argument("--think-time", type=non_negative_float, default=1.0, metavar="S",
                   help="sessions, multi-turn: mean seconds from a reply (multi-turn: the "
                        "previous turn) to the next turn")
    g.add_argument("--seed", type=seed, default=0, help="workload and token-source seed")


def make_workload(args: argparse.Namespace, vocab_size: int):
    """The workload the flags describe (a file, or a seeded generator)."""
    if args.workload_file:
        return read_workload(args.workload_file)
    return workload_spec(args).build(vocab_size=vocab_size, seed=args.seed, rate=args.rate,
                                     burstiness=args.burstiness)


def workload_spec(args):
    """The generator spec of `args.workload` the flags describe (module doc); `args` is any
    object with the flags' attribute names (argparse's Namespace, the planner's spec)."""
    generator = GENERATORS[args.workload]
    prompt, output = generator.DEFAULT_LENGTHS
    return generator.from_flags(args, args.prompt_len if args.prompt_len is not None else prompt,
                                args.output_len if args.output_len is not None else output)


def read_workload(path: str):
    """The saved workload at `path`; ValueError naming the file (and line) when it is not one."""
    from shared.workload.workload import Workload

    return Workload.from_jsonl(path)
