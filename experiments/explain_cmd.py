"""`batchtwin explain`: the golden example of ARCHITECTURE.md §4, step by step, as the executors see
it: the ForwardBatch fields of each step, the logit rows selected and the sampled ids (the
next decode inputs), from a real run (tiny random Llama on CPU) and from the simulator (a
roofline cost model, replaying the real run's tokens) side by side.

    batchtwin explain            # one table per step: field | exec | sim
    batchtwin explain --json     # the same, machine-readable
    batchtwin explain --sim-only # the simulator's column alone (no torch; synthetic token ids)

Exits 0 when the two agree on every step, 3 when they do not (they should); 0 with --sim-only.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from experiments.cli.arg_types import seed

HELP = "show ARCHITECTURE.md §4's golden example step by step, real executor beside simulator"
EXIT_DIFFERS = 3
MARK = "<-- differs"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", type=seed, default=0, help="seed of the tiny model's random weights")
    p.add_argument("--hardware", default="h100",
                   help="catalogue key or hardware JSON the simulator prices on")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--sim-only", action="store_true",
                   help="the simulator's side only (no torch needed; seeded synthetic token ids)")


def run(args: argparse.Namespace) -> int:
    result = _explained(args)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(format_sim_only(result) if args.sim_only else format_explain(result))
    return 0 if args.sim_only or result["agree"] else EXIT_DIFFERS


def _explained(args: argparse.Namespace) -> dict[str, Any]:
    if args.sim_only:
        from experiments.golden_example import explain_sim

        return explain_sim(seed=args.seed, hardware=args.hardware)
    from experiments.explain import explain  # NOTE: torch

    return explain(seed=args.seed, hardware=args.hardware)


def format_explain(result: dict[str, Any]) -> str:
    lines = [f"{result['example']}, step by step",
             f"  exec: {result['exec']}", f"  sim:  {result['sim']}"]
    for step in result["steps"]:
        lines += ["", *format_step(step)]
    lines += ["", verdict(result)]
    return "\n".join(lines)


def format_sim_only(result: dict[str, Any]) -> str:
    """`--sim-only`: one `field | sim` table per step."""
    lines = [f"{result['example']}, step by step, simulator only", f"  sim:  {result['sim']}"]
    for step in result["steps"]:
        lines += ["", *format_step(step, columns=("sim",))]
    lines += ["", f"sim ran {result['step_counts'][0]} steps (exec not run: drop --sim-only, "
                  "with the exec extra, to compare)"]
    return "\n".join(lines)


def format_step(step: dict[str, Any], columns: tuple[str, ...] = ("exec", "sim")) -> list[str]:
    """A header line, then `field | exec | sim` rows, or one column per name in `columns`
    (extend-only fields skipped when empty)."""
    from experiments.golden_example import EXTEND_ONLY, FIELDS

    views = [step[c] for c in columns]
    differs = step.get("differs", ())
    rows = [(f, [cell(v.get(f)) for v in views], f in differs) for f in FIELDS
            if f not in EXTEND_ONLY or any(v.get(f) for v in views)]
    widths = [max(len(c), *(len(r[1][i]) for r in rows)) for i, c in enumerate(columns)]
    out = [f"step {step['step']}  {views[0]['forward_mode']}  {step['note']}",
           row("field", list(columns), widths)]
    for name, cells, differ in rows:
        out.append(row(name, cells, widths) + (f"  {MARK}" if differ else ""))
    out.append(f"  (sim prices this step at {step['sim_priced_ms']:.3f} ms)")
    return out


def row(name: str, cells: list[str], widths: list[int]) -> str:
    """`  name  cell  cell ...`: every column but the last padded to its width."""
    padded = [c.ljust(w) for c, w in zip(cells[:-1], widths, strict=False)]
    return f"  {name:<19} " + "  ".join([*padded, cells[-1]])


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
