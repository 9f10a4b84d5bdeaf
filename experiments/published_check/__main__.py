"""`python -m experiments.published_check [--csv PATH ...] [--out CSV] [--jobs N] [--only ID...]`

Expresses every row of the published calibration set it can as a simulator run (workload
lengths, arrivals, hardware, TP/EP, dtypes), runs them on a process pool, and prints the
published and predicted numbers with the signed error per row, the median absolute error
overall, per group and per half of the source split, and the rows it cannot express with
the reason. Nothing is fitted here.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from pathlib import Path

import pandas as pd

from experiments.published_check.express import express
from experiments.published_check.fit import fit, parse_grid
from experiments.published_check.predict import predict_all
from experiments.published_check.report import render, rows_frame, summary_frame
from experiments.published_check.row_spec import RowSpec, Unexpressed
from sim.cost.kernel.params import KernelParams
from sim.cost.registry import COST_MODELS

# NOTE: the team folder beside the repository; read from there, never copied in.
DEFAULT_CSV = Path(__file__).resolve().parents[3] / "shared" / "reference" / \
    "published-calibration-set.csv"
# The rows this project added (2025-26 vLLM V1 and SGLang 0.5 runs; data/README.md).
ADDED_CSV = Path(__file__).resolve().parent / "data" / "runs_2025_26.csv"


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    table = read_tables(args.csv)
    if args.only:
        table = table[table["id"].isin(args.only)]
    expressed = [express(row) for row in table.to_dict("records")]
    specs = [e for e in expressed if isinstance(e, RowSpec)]
    start = time.perf_counter()
    params = None
    if args.fit:
        params, scores = fit(specs, parse_grid(args.fit), args.jobs)
        for point, score in sorted(scores, key=lambda ps: ps[1]):
            print(f"fit half median |error| {score:5.1f}%  {_changed(point)}")
        print(f"chosen: {_changed(params)}\n")
    specs = [s.with_cost_model(args.cost_model, params) for s in specs]
    if args.cost_model != "kernel":
        expressed += [Unexpressed(s.row_id, s.source, "attention DP is priced by the kernel "
                                  "cost model only") for s in specs if _dp_attention(s)]
        specs = [s for s in specs if not _dp_attention(s)]
    predictions = predict_all(specs, args.jobs)
    rows = rows_frame(specs, predictions)
    unexpressed = [e for e in expressed if not isinstance(e, RowSpec)]
    print(render(rows, summary_frame(rows), unexpressed, len(table)))
    print(f"\nsimulated {len(specs)} rows in {time.perf_counter() - start:.0f} s "
          f"on {args.jobs} processes")
    if args.out:
        rows.to_csv(args.out, index=False)


def read_tables(paths: list[Path]) -> pd.DataFrame:
    """The rows of every CSV in `paths`, in order; SystemExit naming an id two rows share."""
    table = pd.concat([pd.read_csv(p, dtype=str, keep_default_na=False) for p in paths],
                      ignore_index=True)
    repeated = table["id"][table["id"].duplicated()]
    if len(repeated):
        raise SystemExit(f"published_check: row id {repeated.iloc[0]!r} appears twice in "
                         f"{', '.join(map(str, paths))}")
    return table


def _dp_attention(spec: RowSpec) -> bool:
    return bool(spec.sim_args.get("enable_dp_attention"))


def _changed(params: KernelParams) -> str:
    """The fields of `params` that differ from the defaults, as NAME=VALUE."""
    default = KernelParams()
    return " ".join(f"{f.name}={getattr(params, f.name):g}" for f in dataclasses.fields(params)
                    if getattr(params, f.name) != getattr(default, f.name)) or "(defaults)"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m experiments.published_check",
                                description=__doc__.split("\n\n")[1])
    p.add_argument("--csv", type=Path, nargs="+", default=[DEFAULT_CSV, ADDED_CSV],
                   help="the calibration set's CSV files (default: the team's 58 published "
                        "runs and the 2025-26 runs of experiments/published_check/data)")
    p.add_argument("--out", type=Path, help="write the per-row table to this CSV")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--only", nargs="+", metavar="ID", help="run only these row ids")
    p.add_argument("--cost-model", default="kernel", choices=tuple(COST_MODELS),
                   help="the simulator's cost model (default: kernel)")
    p.add_argument("--fit", nargs="+", metavar="NAME=V1,V2", help="grid of KernelParams "
                   "fields, chosen on the fit half of the sources and reported on all rows")
    return p


if __name__ == "__main__":
    main()
