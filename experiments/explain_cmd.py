"""`batchtwin explain`: the golden example of DESIGN.md §4, step by step, as the executors see
it: the ForwardBatch fields of each step, the logit rows selected and the sampled ids (the
next decode inputs), from a real run (tiny random Llama on CPU) and from the simulator (a
roofline cost model, replaying the real run's tokens) side by side.

    batchtwin explain            # one table per step: field | exec | sim
    batchtwin explain --json     # the same, machine-readable

Exits 0 when the two agree on every step, 3 when they do not (they should).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

HELP = "show DESIGN.md §4's golden example step by step, real executor beside simulator"
EXIT_DIFFERS = 3
MARK = "<-- differs"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", type=int, default=0, help="seed of the tiny model's random weights")
    p.add_argument("--hardware", default="h100",
                   help="catalogue key or hardware JSON the simulator prices on")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")


def run(args: argparse.Namespace) -> int:
    from experiments.explain import explain

    try:
        result = explain(seed=args.seed, hardware=args.hardware)
    except (ValueError, TypeError, OSError) as e:
        print(f"batchtwin explain: {e}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2) if args.json else format_explain(result))
    return 0 if result["agree"] else EXIT_DIFFERS


def format_explain(result: dict[str, Any]) -> str:
    lines = [f"{result['example']}, step by step",
             f"  exec: {result['exec']}", f"  sim:  {result['sim']}"]
    for step in result["steps"]:
        lines += ["", *format_step(step)]
    lines += ["", verdict(result)]
    return "\n".join(lines)


def format_step(step: dict[str, Any]) -> list[str]:
    """A header line, then `field | exec | sim` rows (extend-only fields skipped when empty)."""
    from experiments.explain import EXTEND_ONLY, FIELDS

    e, s = step["exec"], step["sim"]
    rows = [(f, cell(e.get(f)), cell(s.get(f)), f in step["differs"]) for f in FIELDS
            if f not in EXTEND_ONLY or e.get(f) or s.get(f)]
    wide = max(len("exec"), *(len(r[1]) for r in rows))
    out = [f"step {step['step']}  {e['forward_mode']}  {step['note']}",
           f"  {'field':<19} {'exec':<{wide}}  sim"]
    for name, a, b, differs in rows:
        out.append(f"  {name:<19} {a:<{wide}}  {b}" + (f"  {MARK}" if differs else ""))
    out.append(f"  (sim prices this step at {step['sim_priced_ms']:.3f} ms)")
    return out


def cell(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ",".join(str(v) for v in value) + "]"
    return "-" if value is None else str(value)


def verdict(result: dict[str, Any]) -> str:
    if result["agree"]:
        return (f"exec and sim agree on all {len(result['steps'])} steps (ForwardBatch fields, "
                f"selected rows, sampled ids; StepRecords equal but for times)")
    bad = [f"step {s['step']} ({', '.join(s['differs'])})" for s in result["steps"] if s["differs"]]
    counts = result["step_counts"]
    if counts[0] != counts[1]:
        bad.append(f"exec ran {counts[0]} steps, sim {counts[1]}")
    if not result["records_agree"]:
        bad.append("the StepRecords differ")
    return "exec and sim DIFFER: " + "; ".join(bad)
