"""Do `batchtwin plan`'s answers hold when the run is made longer?

    python -m experiments.plan_holds                      # the README's three plans
    python -m experiments.plan_holds --plans default --scale 4 --seeds 100,101,102

For each plan (the README's: the default, the 70B `--tp 4,8` plan, the 70B fleet
`--target-rate 40` plan):

1. it runs the plan (into `--out`/NAME);
2. it re-simulates the recommended configuration at its recommended rate (and, for a
   `--target-rate` plan, the configuration chosen for the target at the target rate) with
   `--scale` times the requests the plan ran there and with seeds the plan did not use, and
   checks every SLO on the whole run (warm-up included, as `batchtwin simulate` reports it)
   and on its measurement window;
3. it searches that configuration (and the target's) again with `--scale` times
   `--num-requests` (the plan's flags, narrowed to it) and checks that the max rate the
   plan reported for it is within `--rate-tolerance` (5%) of the one the longer search
   finds.

It prints one line per check and a table, writes `holds.json`, and exits 1 when a check
fails.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import math
import shlex
import sys
import time
from pathlib import Path
from typing import Any

PLANS = {
    "default": [],
    "70b": ["--model", "llama-3-70b", "--hardware", "h100,h200", "--tp", "4,8",
            "--slo", "ttft_p90=2s,tpot_p90=50ms", "--chunked-prefill-size", "2048,8192"],
    "fleet": ["--model", "llama-3-70b", "--hardware", "h100", "--tp", "4,8", "--dp", "1,2,4",
              "--target-rate", "40"],
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--plans", default=",".join(PLANS),
                   help=f"comma list of {', '.join(PLANS)}, or custom (--custom's flags)")
    p.add_argument("--custom", default="", metavar="FLAGS",
                   help="the plan flags of a plan named custom, e.g. \"--model llama-3-70b --tp 4\"")
    p.add_argument("--scale", type=int, default=4, help="how much longer the checks run")
    p.add_argument("--seeds", default="100,101,102", help="seeds the plans do not use")
    p.add_argument("--rate-tolerance", type=float, default=0.05)
    p.add_argument("--out", default="plan-holds", help="folder for the plans and holds.json")
    p.add_argument("--jobs", type=int, default=None, help="the plans' --jobs")
    args = p.parse_args(argv)
    seeds = tuple(int(s) for s in args.seeds.split(","))
    plans = {**PLANS, "custom": shlex.split(args.custom)}
    unknown = [n for n in args.plans.split(",") if n not in plans]
    if unknown:
        p.error(f"--plans: unknown plan(s) {', '.join(unknown)}; known: {', '.join(plans)}")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    rows = [check_plan(name, plans[name], args, seeds) for name in args.plans.split(",")]
    Path(args.out, "holds.json").write_text(json.dumps(rows, indent=2, default=str) + "\n")
    ok = all(r["holds"] for r in rows)
    print(f"\n{'all plans hold' if ok else 'some plan does not hold'} "
          f"({args.scale}x the requests, seeds {args.seeds})")
    return 0 if ok else 1


def check_plan(name: str, plan_flags: list[str], args: argparse.Namespace,
               seeds: tuple[int, ...]) -> dict[str, Any]:
    flags = plan_flags + ([] if args.jobs is None else ["--jobs", str(args.jobs)])
    out = Path(args.out)
    plan, seconds = run_plan(flags, out / name)
    n = plan["workload"]["num_requests"] * args.scale
    choice = (plan.get("target") or {}).get("choice")
    chosen = [("best", plan["best"], plan["recommended_rate"])]
    if choice:
        chosen.append(("target", choice, plan["target"]["rate"]))
    row: dict[str, Any] = {"plan": name, "flags": " ".join(flags), "plan_seconds": seconds,
                           "best": plan["best"], "max_rate": plan["best_rate"],
                           "recommended_rate": plan["recommended_rate"], "longer": [],
                           "resimulated": []}
    checks = []
    for label, candidate, _ in _unique(chosen):
        folder = out / f"{name}-x{args.scale}-{label}"
        _, longer_seconds = run_plan([*flags, *candidate_flags(candidate), "--num-requests",
                                      str(n)], folder)
        planned, longer = max_rate_of(out / name, candidate), max_rate_of(folder, candidate)
        gap = abs(planned - longer) / longer
        row["longer"].append({"what": label, "max_rate": planned, "longer_max_rate": longer,
                              "gap": gap, "seconds": longer_seconds})
        checks.append((f"{label} config's max rate {planned:.4g} req/s within "
                       f"{args.rate_tolerance:.0%} of a {args.scale}x-longer search's "
                       f"{longer:.4g} ({gap:.1%} apart, {longer_seconds:.0f} s)",
                       gap <= args.rate_tolerance))
    for label, candidate, rate in chosen:
        result = resimulate(out / name, candidate, rate, args.scale, seeds)
        row["resimulated"].append({"what": label, "rate": rate, **result})
        checks.append((f"{label} config at {rate:.4g} req/s ({'recommended' if label == 'best' else 'the target'}) "
                       f"meets the SLOs, {args.scale}x longer, seeds {seeds}", result["meets"]))
    row["checks"] = [{"check": c, "ok": ok} for c, ok in checks]
    row["holds"] = all(ok for _, ok in checks)
    for c, ok in checks:
        print(f"{name}: {'ok  ' if ok else 'FAIL'} {c}")
    print(f"{name}: plan {seconds:.0f} s")
    return row


def _unique(chosen: list[tuple[str, dict[str, Any], Any]]) -> list[tuple[str, dict[str, Any], Any]]:
    """The chosen configurations, each once (the target's may be the best)."""
    return [c for i, c in enumerate(chosen) if all(c[1] != d[1] for d in chosen[:i])]


def candidate_flags(candidate: dict[str, Any]) -> list[str]:
    """Plan flags that sweep just `candidate` (they follow, and so override, the plan's)."""
    from experiments.plan.grid import NONE_WORDS

    flags = []
    for key, value in candidate.items():
        word = NONE_WORDS.get(key, "auto") if value is None else str(value)
        flags += [f"--{key.replace('_', '-')}", word]
    return flags


def max_rate_of(folder: Path, candidate: dict[str, Any]) -> float:
    """The max rate a plan's sweep.csv gives `candidate` (NaN when it is not there)."""
    import pandas as pd

    sweep = pd.read_csv(folder / "sweep.csv")
    match = pd.Series(True, index=sweep.index)
    for key, value in candidate.items():
        if key in sweep:
            match &= sweep[key].isna() if value is None else sweep[key] == value
    return float(sweep[match]["max_rate"].iloc[0]) if match.any() else math.nan


def run_plan(flags: list[str], out: Path) -> tuple[dict[str, Any], float]:
    """Run `batchtwin plan FLAGS --out OUT --overwrite`; its config.json and wall seconds."""
    from experiments.main import main as batchtwin

    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        code = batchtwin(["plan", *flags, "--out", str(out), "--overwrite", "--no-progress"])
    seconds = time.perf_counter() - start
    if code not in (0, 3):
        raise SystemExit(f"plan {' '.join(flags)} exited {code}")
    sys.stdout.write(printed.getvalue())
    return json.loads((out / "config.json").read_text()), seconds


def resimulate(folder: Path, candidate: dict[str, Any], rate: float | None, scale: int,
               seeds: tuple[int, ...]) -> dict[str, Any]:
    """Run `candidate` at `rate` with `scale` x the requests the plan ran at its max rate,
    once per seed; whether every SLO holds on each whole run and each window."""
    import pandas as pd

    from experiments.plan.grid import Candidate
    from experiments.plan.point import PlanSpec, Point, WorkloadSpec, load_engine, simulate_point
    from experiments.plan.slo import SLOTargets
    from experiments.plan.steady_state import measure

    if rate is None:
        return {"meets": False, "why": "the plan recommends no rate"}
    config = json.loads((folder / "config.json").read_text())
    runs = pd.read_csv(folder / "runs.csv")
    at_max = runs[(runs["phase"] == "search") & (runs["rate"] == config["best_rate"])]
    n = int(at_max["num_requests"].max()) if len(at_max) else config["workload"]["num_requests"]
    fields = {f.name for f in dataclasses.fields(Candidate)}
    c = Candidate(**{k: v for k, v in candidate.items() if k in fields})
    slo = SLOTargets.parse(config["slo"])
    workload = WorkloadSpec(**{**config["workload"], "num_requests": n * scale})
    spec = PlanSpec(config["model"], workload, slo, seeds, cost_model=config["cost_model"])
    out = []
    for seed in seeds:
        result = simulate_point(spec, Point(c, rate, seed, "curve"))
        window = measure(result, load_engine(result), tuple(slo.limits()))
        whole, windowed = slo.violations(result.summary), slo.violations(window.summary)
        out.append({"seed": seed, "requests": len(result.requests),
                    "whole_run": {k: result.summary[k] for k in slo.limits()},
                    "window": {k: window.summary[k] for k in slo.limits()},
                    "missed": [str(v) for v in whole] + [f"window: {v}" for v in windowed],
                    "queue_growth": window.growth})
    meets = all(not r["missed"] and math.isfinite(r["queue_growth"]) for r in out)
    return {"meets": meets, "runs": out}


if __name__ == "__main__":
    sys.exit(main())
