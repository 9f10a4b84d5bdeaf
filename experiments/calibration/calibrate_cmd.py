"""`batchtwin calibrate`: fit the simulator's cost model to the real executor on this machine.

    batchtwin calibrate [--model PATH] [--dtype auto] [--threads 1] [--repeats 2] \
        [--out batchtwin-calibration]

Runs the real executor over a grid of batch shapes (experiments.calibration.grid), fits
`sim.cost.calibrated.CalibratedCostModel` on the training grid, and reports its error on the held-out grid
and on a real online trace re-priced by `sim.run.replay`. Writes to `--out`:

- `cost_model.json`: the calibrated model (`batchtwin simulate --cost-model`, `sim.run.simulate`);
- `hardware.json`: this machine's measured bandwidth and FLOP/s as a hardware entry
  (`--hardware batchtwin-calibration/hardware.json`);
- `steps.csv`: every measured step (scenario, split, features, measured and predicted s);
- `calibration.json`: the configuration and the error figures.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING

from experiments.calibration.config import CalibrationConfig
from experiments.cli.arg_types import non_negative_float, positive_int, seed

if TYPE_CHECKING:
    from experiments.calibration.run import Calibration

HELP = "fit the simulator's cost model to the real executor on this machine"
DTYPES = ("auto", "bfloat16", "float32", "float16")
DTYPE_HELP = ("auto (default): bfloat16, or float32 on a CPU without fast bfloat16 kernels "
              "(no AVX-512 or AVX-NE-CONVERT)")


def configure(p: argparse.ArgumentParser) -> None:
    d = CalibrationConfig()
    p.add_argument("--model", default=None,
                   help="checkpoint folder or .gguf (default: SmolLM2-135M, else a tiny random model)")
    p.add_argument("--device", default=d.device, help="cpu (default), cuda, cuda:N or mps")
    p.add_argument("--dtype", default="auto", choices=DTYPES, help=DTYPE_HELP)
    p.add_argument("--threads", type=positive_int, default=d.threads,
                   help="torch threads, fixed for the whole run (default 1: on a small shared "
                        "host one thread leaves a core to everything else and steadies timings)")
    p.add_argument("--repeats", type=positive_int, default=d.repeats,
                   help="passes over the shape grids")
    p.add_argument("--temperature", type=non_negative_float, default=d.temperature,
                   help="sampling temperature of the measured requests (0: greedy); calibrate "
                        "at the temperature you serve")
    p.add_argument("--seed", type=seed, default=d.seed)
    p.add_argument("--out", default="batchtwin-calibration", metavar="DIR")


def run(args: argparse.Namespace) -> int:
    from exec.device.torch_device import checked_device  # NOTE: torch
    from experiments.calibration.run import calibrate, resolve_dtype

    dtype = resolve_dtype(args.dtype, checked_device(args.device))
    c = CalibrationConfig(model=args.model, device=args.device, dtype=dtype, threads=args.threads,
                          repeats=args.repeats, seed=args.seed, temperature=args.temperature)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = calibrate(c, scratch=out)
    write(result, c, out)
    print(summary_text(result, out))
    return 0


def write(r: Calibration, c: CalibrationConfig, out: Path) -> None:
    from experiments.calibration.machine_probe import hardware_entry

    out.mkdir(parents=True, exist_ok=True)
    r.cost_model.save(out / "cost_model.json")
    (out / "hardware.json").write_text(json.dumps(hardware_entry(r.rates, str(date.today())), indent=2))
    r.steps.to_csv(out / "steps.csv", index=False)
    (out / "calibration.json").write_text(json.dumps(
        {"config": asdict(c), "model": r.model, "figures": figures(r)}, indent=2))


def figures(r: Calibration) -> dict[str, float]:
    nan = float("nan")
    return {"fit_mape": r.train_mape, "held_out_mape": r.held_out_mape,
            "held_out_median_ape": r.held_out_median_ape,
            "replay_mape": r.replay.mape if r.replay else nan,
            "replay_median_ape": r.replay.median_ape if r.replay else nan,
            "replay_agree_fraction": r.replay.agree_fraction if r.replay else nan,
            "mem_bw_GBps": r.rates.mem_bw / 1e9, "flops_bf16_G": r.rates.flops_bf16 / 1e9,
            "flops_fp32_G": r.rates.flops_fp32 / 1e9, "steps_measured": len(r.steps)}


def summary_text(r: Calibration, out: Path) -> str:
    f = figures(r)
    coef = "\n".join(f"  {k:<24} {v:.3e} s" for k, v in zip(r.cost_model.features,
                                                            r.cost_model.coefficients, strict=True))
    replayed = (f"  real online trace re-priced (sim.run.replay): MAPE {f['replay_mape']:.1%}, "
                f"median APE {f['replay_median_ape']:.1%}, schedule agreement "
                f"{f['replay_agree_fraction']:.0%}\n") if r.replay else ""
    return (f"calibrated {Path(r.model).name} on this machine ({f['steps_measured']} steps)\n"
            f"{coef}\n"
            f"  fit MAPE {f['fit_mape']:.1%}; held-out shapes: MAPE {f['held_out_mape']:.1%}, "
            f"median APE {f['held_out_median_ape']:.1%}\n{replayed}"
            f"  this machine: {f['mem_bw_GBps']:.1f} GB/s, {f['flops_bf16_G']:.0f} GFLOP/s bf16, "
            f"{f['flops_fp32_G']:.0f} GFLOP/s fp32\n"
            f"wrote {out}/cost_model.json, hardware.json, steps.csv, calibration.json")
