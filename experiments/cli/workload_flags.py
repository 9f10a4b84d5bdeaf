"""The workload flags `batchtwin simulate` and `plan` share, and the workload they describe:
ShareGPT-like, synthetic fixed lengths, SGLang's generated shared prefix, multi-tenant
shared prefixes with Zipf popularity, closed-loop conversations (`sessions`: each turn sent
a think time after the previous reply), or a saved workload file.
"""

from __future__ import annotations

import argparse
import math

from experiments.cli.arg_types import non_negative_float, non_negative_int, positive_int, seed

WORKLOADS = ("sharegpt", "synthetic", "shared-prefix", "multi-tenant", "sessions")
DEFAULT_LENGTHS = {"sharegpt": (200, 200), "synthetic": (512, 128), "shared-prefix": (128, 256),
                   "multi-tenant": (128, 256), "sessions": (64, 128)}


def workload_arguments(g: argparse._ArgumentGroup) -> None:
    g.add_argument("--workload", choices=WORKLOADS, default="sharegpt")
    g.add_argument("--workload-file", default=None, metavar="JSONL",
                   help="a saved batchtwin workload (overrides --workload)")
    g.add_argument("--num-requests", type=int, default=100)
    g.add_argument("--rate", type=float, default=math.inf, help="requests/s (inf: all at t=0)")
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
                   help="sessions: turns per conversation (--num-requests conversations)")
    g.add_argument("--think-time", type=non_negative_float, default=1.0, metavar="S",
                   help="sessions: mean seconds from a reply to the next turn")
    g.add_argument("--seed", type=seed, default=0, help="workload and token-source seed")


def make_workload(args: argparse.Namespace, vocab_size: int):
    """The workload the flags describe (a file, or a seeded generator)."""
    from shared.workload.workload import Workload

    if args.workload_file:
        return read_workload(args.workload_file)
    prompt, output = DEFAULT_LENGTHS[args.workload]
    prompt = args.prompt_len if args.prompt_len is not None else prompt
    output = args.output_len if args.output_len is not None else output
    common = {"vocab_size": vocab_size, "seed": args.seed, "rate": args.rate,
              "burstiness": args.burstiness}
    if args.workload == "sharegpt":
        return Workload.sharegpt_like(args.num_requests, prompt_median=prompt,
                                      output_median=output, **common)
    if args.workload == "synthetic":
        return Workload.synthetic(args.num_requests, prompt, output, **common)
    if args.workload == "sessions":
        return Workload.sessions(args.num_requests, getattr(args, "turns", 4),
                                 user_len=prompt, output_len=output,
                                 think_time=getattr(args, "think_time", 1.0), **common)
    if args.workload == "multi-tenant":
        return Workload.multi_tenant(args.num_requests, args.num_groups, args.system_prompt_len,
                                     prompt, output, zipf=getattr(args, "tenant_zipf", 1.0),
                                     **common)
    if not 1 <= args.num_groups <= args.num_requests:
        raise ValueError(f"--num-groups must be in [1, --num-requests], got {args.num_groups}")
    return Workload.generated_shared_prefix(
        args.num_groups, args.num_requests // args.num_groups, args.system_prompt_len, prompt,
        output, **common)


def read_workload(path: str):
    """The saved workload at `path`; ValueError naming the file (and line) when it is not one."""
    from shared.workload.workload import Workload

    return Workload.from_jsonl(path)
