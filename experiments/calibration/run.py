"""Calibrating the simulator to this machine: measure the real executor on a grid of batch
shapes, fit `sim.cost.calibrated.CalibratedCostModel`, and check it on shapes it was not fitted on and on a
real online trace re-priced by `sim.run.replay` (teacher forcing).

Protocol: a fixed torch thread count, one warm-up pass (discarded), then `repeats` passes
over the training grid and the held-out grid (`experiments.calibration.grid`); every step of
every pass is a data point. The fit uses the training steps only.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch

from experiments.calibration.config import CalibrationConfig
from experiments.calibration.grid import Scenario, scenarios
from experiments.calibration.machine_probe import MachineRates, measure_machine
from experiments.tiny_checkpoint import TinyModelConfig, write_tiny_checkpoint
from shared.request.sampling_params import SamplingParams
from shared.workload.sharegpt import ShareGPTLike
from sim.cost.batch_shape import BatchShape
from sim.cost.calibrated import FEATURES, CalibratedCostModel, shape_features
from sim.run.replay import ReplayResult, replay

if TYPE_CHECKING:
    import pandas as pd

    from exec.engine.engine import Engine
    from shared.trace.step_record import StepRecord


class Calibration(NamedTuple):
    """The fitted model, per-step measurements (`steps`: scenario, split, features,
    measured and predicted seconds), errors, the machine's rates and the replay check."""

    cost_model: CalibratedCostModel
    steps: pd.DataFrame
    train_mape: float
    held_out_mape: float
    held_out_median_ape: float
    rates: MachineRates
    replay: ReplayResult | None      # None: no online trace was re-priced
    model: str


def resolve_model(model: str | None, scratch: Path) -> str:
    """The model path to run: `model`, else the default SmolLM2 GGUF, else a tiny random
    checkpoint written under `scratch` (printed, so the user knows)."""
    from exec.loading.model_files import ModelNotFoundError, default_model_path

    if model is not None:
        return model
    try:
        return str(default_model_path())
    except ModelNotFoundError as e:
        print(f"note: {e}; using a tiny random model instead")
        return str(write_tiny_checkpoint(scratch / "tiny-model", TinyModelConfig()))


def resolve_dtype(dtype: str, device: torch.device) -> str:
    """`dtype`, with "auto" resolved: bfloat16, but float32 on a CPU whose oneDNN has no fast
    bfloat16 kernels (the engine would warn that bfloat16 runs several times slower there)."""
    from exec.layers.packed_linear import cpu_has_fast_kernels

    if dtype != "auto":
        return dtype
    slow = device.type == "cpu" and not cpu_has_fast_kernels(torch.bfloat16)
    return "float32" if slow else "bfloat16"


def open_engine(c: CalibrationConfig, model: str, **engine_args) -> Engine:
    from exec.engine.engine import Engine

    torch.set_num_threads(c.threads)
    return Engine(model, device=c.device, dtype=c.dtype, **engine_args)


def calibrate(c: CalibrationConfig, scratch: Path | None = None, progress=print) -> Calibration:
    """Open the model (`resolve_model`) on a calibration engine and `calibrate_engine` it."""
    with tempfile.TemporaryDirectory() as tmp:
        model = resolve_model(c.model, Path(scratch or tmp))
        return calibrate_engine(calibration_engine(c, model), c, model, progress)


def calibration_engine(c: CalibrationConfig, model: str) -> Engine:
    """An engine that can form every calibrated shape: mixed chunks, `c.chunk_size` chunks."""
    return open_engine(c, model, enable_mixed_chunk=True, chunked_prefill_size=c.chunk_size,
                       max_total_tokens=c.max_total_tokens, random_seed=c.seed)


def calibrate_engine(engine: Engine, c: CalibrationConfig, model: str, progress=print) -> Calibration:
    """Measure the grids on `engine` (left reset), fit, and with `c.online_requests` > 0
    re-price a real online trace."""
    vocab = engine.model_info.vocab_size
    progress("measuring this machine's bandwidth and matmul FLOP/s")
    rates = measure_machine(c.device)
    serve(engine, scenarios(c.train_grid, vocab, c.chunk_size, c.seed, "warmup-", c.temperature)[:4])
    rows = []
    for r in range(c.repeats):
        progress(f"pass {r + 1}/{c.repeats} over the shape grids")
        for k, (split, grid) in enumerate((("train", c.train_grid), ("held_out", c.held_out_grid))):
            seed = c.seed + 1 + 2 * r + k  # NOTE: fresh tokens per pass and split: no cache hits
            for sc, rec in serve(engine, scenarios(grid, vocab, c.chunk_size, seed, f"{split}{r}-",
                                                  c.temperature)):
                rows.append((sc, split, rec))
    fitted = fit(rows, f"batchtwin calibrate: {Path(model).name}, {c.device}, {c.dtype}, "
                       f"{c.threads} threads")
    replayed = None
    if c.online_requests:
        progress("re-pricing a real online trace (sim.run.replay, teacher forcing)")
        replayed = replay(online_trace(engine, c, vocab), fitted)
    engine.reset()
    return summarise(fitted, rows, rates, replayed, model)


def serve(engine: Engine, scs: list[Scenario]) -> list[tuple[str, StepRecord]]:
    """Serve each scenario's workloads in turn; (scenario name, step record) per step."""
    out = []
    for sc in scs:
        for w in sc.workloads:
            out += [(sc.name, rec) for rec in engine.run(w).trace.steps]
    return out


def online_trace(engine: Engine, c: CalibrationConfig, vocab: int):
    """A short Poisson run on the reset engine (so a fresh scheduler can replay it)."""
    engine.reset()
    w = ShareGPTLike(c.online_requests, prompt_median=c.online_prompt_median,
                     output_median=c.online_output_median, sigma=0.6, max_len=1024,
                     sampling_params=SamplingParams(temperature=c.temperature, ignore_eos=True),
                     name="calibrate-online").build(vocab_size=vocab, seed=c.seed,
                                                    rate=c.online_rate)
    return engine.run(w).trace


def fit(rows: list[tuple[str, str, StepRecord]], source: str) -> CalibratedCostModel:
    train = [rec for _, split, rec in rows if split == "train"]
    return CalibratedCostModel.fit(train, source)


def summarise(model: CalibratedCostModel, rows, rates: MachineRates, replayed: ReplayResult | None,
              model_path: str) -> Calibration:
    import pandas as pd

    shapes = [BatchShape.from_step_record(rec) for _, _, rec in rows]
    feats = np.stack([shape_features(s) for s in shapes])
    frame = pd.DataFrame(feats, columns=list(FEATURES)).drop(columns="constant")
    frame.insert(0, "scenario", [sc for sc, _, _ in rows])
    frame.insert(1, "split", [split for _, split, _ in rows])
    frame.insert(2, "forward_mode", [rec.forward_mode for _, _, rec in rows])
    frame["measured_s"] = [rec.duration for _, _, rec in rows]
    frame["predicted_s"] = [model.step_time(s) for s in shapes]
    ape = (frame["predicted_s"] - frame["measured_s"]).abs() / frame["measured_s"]
    frame["ape"] = ape
    held = frame["split"] == "held_out"
    return Calibration(model, frame, float(ape[~held].mean()), float(ape[held].mean()),
                       float(ape[held].median()), rates, replayed, model_path)
