"""`batchtwin simulate --dp N [--router POLICY]`: the workload on N engine replicas behind a
router (`sim.fleet.fleet_layout`); prints the fleet's metrics and one row per replica, and with
`--out` writes requests and steps (with a `replica` column), replicas, config.json and
summary.json (`--save-trace`: one trace-{i}.jsonl per replica).

`batchtwin simulate --disaggregate xPyD [--prefill-tp N] [--decode-tp N]`: prefill/decode
disaggregation (`sim.fleet.disagg_layout`), --router choosing the prefill instance and
--decode-router the decode one; `--out` writes requests (with prefill_instance,
decode_instance, transfer), steps (with role, instance), config.json and summary.json.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from experiments.cli.run_output import print_summary, print_window, run_config, write_tables

FLEET_FILES = ("requests.parquet", "requests.csv", "steps.parquet", "steps.csv",
               "replicas.parquet", "replicas.csv", "config.json", "summary.json")
REPLICA_COLUMNS = ("replica", "requests", "completed", "output_throughput", "prefix_hit_rate",
                   "ttft_p50", "ttft_p90", "tpot_p50")


def replica_table(replicas) -> str:
    """Per replica, in the summary's units: output tok/s, the prefix hit rate in %, the
    latencies in ms."""
    t = replicas[list(REPLICA_COLUMNS)].copy()
    t["prefix_hit_rate"] = (t["prefix_hit_rate"] * 100).round(1)
    for name in ("ttft_p50", "ttft_p90", "tpot_p50"):
        t[name] = (t[name] * 1e3).round(2)
    t["output_throughput"] = t["output_throughput"].round(1)
    t = t.rename(columns={"output_throughput": "output tok/s", "prefix_hit_rate": "prefix hit %",
                          **{n: f"{n.replace('_', ' ')} ms" for n in ("ttft_p50", "ttft_p90",
                                                                      "tpot_p50")}})
    return t.to_string(index=False)


def fleet_arguments(g: argparse._ArgumentGroup) -> None:
    from sim.routers import DEFAULT_ROUTER, ROUTERS

    g.add_argument("--router", choices=tuple(ROUTERS), default=DEFAULT_ROUTER,
                   help=f"the policy sending requests to the --dp replicas or the prefill "
                        f"instances (default {DEFAULT_ROUTER}, as SGLang's --load-balance-method)")
    g.add_argument("--disaggregate", default=None, metavar="xPyD",
                   help="prefill/decode disaggregation: x prefill and y decode instances, the "
                        "KV sent over the hardware's network card (e.g. 1P2D)")
    g.add_argument("--prefill-tp", type=int, default=None, help="prefill instances' TP (--tp)")
    g.add_argument("--decode-tp", type=int, default=None, help="decode instances' TP (--tp)")
    g.add_argument("--prefill-ep-size", type=int, default=None,
                   help="prefill instances' EP (--ep-size)")
    g.add_argument("--decode-ep-size", type=int, default=None,
                   help="decode instances' EP (--ep-size)")
    g.add_argument("--decode-router", choices=tuple(ROUTERS), default=DEFAULT_ROUTER,
                   help="the policy choosing a decode instance for each transferred request")


def is_fleet(args: argparse.Namespace) -> bool:
    """--dp N > 1 without attention DP: N replicas."""
    return args.dp_size > 1 and not args.enable_dp_attention


def run_fleet(args: argparse.Namespace, workload, deployment, run_args: dict[str, Any]) -> int:
    """`--dp N` replicas of `deployment` (its dp fields count replicas, not attention ranks)."""
    from shared.trace.run_log import Keep
    from sim.fleet.fleet_layout import Fleet

    replica = deployment.replace(dp_size=1, enable_dp_attention=False)
    # NOTE: as one engine's run, each replica keeps what the outputs ask (--out: its steps;
    # --save-trace: its trace, written to trace-{i}.jsonl as the run goes)
    trace_file = Path(args.out) / "trace.jsonl" if args.save_trace else None
    if trace_file is not None:
        trace_file.parent.mkdir(parents=True, exist_ok=True)
    keep = Keep(trace=args.warmup is not None, steps=bool(args.out), trace_file=trace_file)
    result = Fleet(args.dp_size, args.router).run(workload, replica, keep=keep, **run_args)
    config = run_config(args, workload, result.run_info, result.slo,
                        replicas=args.dp_size, router=args.router)
    print_summary(config, result)
    print_window(result, args.warmup)
    s = result.summary
    print(f"{s['replicas']} replicas behind {args.router}: load imbalance "
          f"{s['load_imbalance']:.3f} (busiest / mean tokens), prefix hit rate "
          f"{s['prefix_hit_rate']:.1%}")
    print(replica_table(result.replicas))
    if args.out:
        write_fleet_outputs(Path(args.out), config, result, args.save_trace)
    return 0


def write_fleet_outputs(out: Path, config: dict[str, Any], result, save_trace: bool) -> None:
    """The tables, config and summary; with --save-trace the replicas' traces were written
    as the run went (not stale)."""
    names = tuple(f"trace-{i}.jsonl" for i in range(len(result.parts)))
    write_tables(out, {n: getattr(result, n) for n in ("requests", "steps", "replicas")},
                 config, result.summary, FLEET_FILES + (() if save_trace else names))


def run_disaggregated(args: argparse.Namespace, workload, deployment,
                      run_args: dict[str, Any]) -> int:
    from sim.fleet.disagg_layout import Disaggregated, parse_layout
    from sim.run.simulate import simulate

    if args.dp_size > 1:
        raise ValueError("--disaggregate sets the instance counts; drop --dp")
    prefill, decode = parse_layout(args.disaggregate)
    layout = Disaggregated(prefill, decode, prefill_tp=args.prefill_tp, decode_tp=args.decode_tp,
                           prefill_ep=args.prefill_ep_size, decode_ep=args.decode_ep_size,
                           prefill_router=args.router, decode_router=args.decode_router)
    instance = deployment.replace(dp_size=1, enable_dp_attention=False)
    result = simulate(workload, instance, layout, **run_args)
    config = run_config(args, workload, result.run.prefill_traces[0], result.slo,
                        disaggregate=args.disaggregate, prefill_tp=args.prefill_tp or args.tp,
                        decode_tp=args.decode_tp or args.tp, router=args.router,
                        decode_router=args.decode_router)
    print_summary(config, result)
    print_window(result, args.warmup)
    s = result.summary
    print(f"{prefill} prefill x {decode} decode instances: KV transfer mean "
          f"{s['transfer_mean'] * 1e3:.3f} ms, p90 {s['transfer_p90'] * 1e3:.3f} ms")
    if args.out:
        write_tables(Path(args.out), {"requests": result.requests, "steps": result.steps},
                     config, result.summary, FLEET_FILES)
    return 0
