"""The golden example of ARCHITECTURE.md §4 on the simulator's side (no torch): the workload, the
engine configuration, the per-step view of a runner, and the simulated run.

`run_sim` serves the example on a fresh scheduler with `SimModelRunner` under the roofline
clock; `explain_sim` is `batchtwin explain --sim-only`: the simulator alone, its tokens drawn
from a seeded `SyntheticTokenSource` (experiments.explain replays exec's tokens instead).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shared.batch.forward_batch import ForwardBatch
from shared.config.engine_config import EngineConfig, ModelInfo
from shared.loop.model_runner import ModelRunner, RunnerOutput
from shared.loop.scheduler import Scheduler
from shared.request.sampling_params import SamplingParams
from shared.trace.trace import Trace
from shared.workload.workload import Workload, WorkloadRequest
from sim.cost.roofline.model import RooflineCostModel
from sim.hardware.lookup import get_hardware
from sim.model.from_config import get_model_shape
from sim.run.driver import drive_workload
from sim.run.sim_model_runner import SimModelRunner
from sim.run.token_source import SyntheticTokenSource, TokenSource

TINY_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 256,
               "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2,
               "max_position_embeddings": 64, "eos_token_id": 0, "torch_dtype": "float32"}
TINY_INFO = ModelInfo(TINY_CONFIG["vocab_size"], (TINY_CONFIG["eos_token_id"],),
                      TINY_CONFIG["max_position_embeddings"])
# ARCHITECTURE §4's configuration: page_size 1, fcfs, no chunking, no mixed chunk.
ENGINE = EngineConfig(max_total_tokens=256, chunked_prefill_size=None, disable_cuda_graph=True,
                      disable_overlap_schedule=True)  # ARCHITECTURE §4's schedule
GREEDY = {"temperature": 0.0, "ignore_eos": True}
REQUESTS = (("warm", 0.0, (21, 22, 23), 1),
            ("a", 1.0, (11, 12, 13, 14, 15, 16), 2),
            ("b", 1.0, (21, 22, 23, 24, 25, 26), 2))
NOTES = ("warm-up: request 'warm' leaves [21, 22, 23] in the radix cache",
         "ARCHITECTURE §4 EXTEND: 'a' computes 6 rows; 'b' reuses 3 cached tokens, computes 3",
         "ARCHITECTURE §4 DECODE: the ids the EXTEND sampled are the inputs")
ARRAY_FIELDS = ("input_ids", "positions", "seq_lens", "extend_prefix_lens", "extend_seq_lens",
                "extend_start_loc", "out_cache_loc", "req_pool_indices")
FIELDS = ("forward_mode", "batch_size", "rids", *ARRAY_FIELDS, "selected_rows", "logits_shape",
          "next_token_ids")
EXTEND_ONLY = ("extend_prefix_lens", "extend_seq_lens", "extend_start_loc")


def golden_workload() -> Workload:
    """'warm' at t=0, then 'a' and 'b' at t=1 s (after 'warm' finished)."""
    return Workload(tuple(
        WorkloadRequest(rid, t, ids, SamplingParams(max_new_tokens=n, **GREEDY))
        for rid, t, ids, n in REQUESTS), name="design-4-golden")


def roofline_clock(hardware: str) -> RooflineCostModel:
    """The clock both executors run under: the tiny model's roofline on `hardware`."""
    return RooflineCostModel(get_model_shape(TINY_CONFIG, "fp32", "fp32"), get_hardware(hardware))


class Recorder:
    """Wraps a ModelRunner; keeps, per forward, what it was given and what it produced
    (plain ints, copied at once: the batch's arrays are the scheduler's)."""

    def __init__(self, runner: ModelRunner) -> None:
        self.runner = runner
        self.steps: list[dict[str, Any]] = []

    def forward(self, fb: ForwardBatch) -> RunnerOutput:
        out = self.runner.forward(fb)
        self.steps.append(batch_view(fb, out))
        return out

    def sample(self, output: RunnerOutput, fb: ForwardBatch) -> np.ndarray:
        ids = self.runner.sample(output, fb)
        self.steps[-1]["next_token_ids"] = np.asarray(ids).tolist()
        return ids


def batch_view(fb: ForwardBatch, out: RunnerOutput) -> dict[str, Any]:
    """The ForwardBatch fields a runner reads and the logit rows it reports using."""
    view: dict[str, Any] = {"forward_mode": fb.forward_mode.name, "batch_size": fb.batch_size,
                            "rids": list(fb.rids)}
    for name in ARRAY_FIELDS:
        view[name] = np.asarray(getattr(fb, name)).tolist()
    view["selected_rows"] = np.asarray(out.logit_rows.pruned_rows).tolist()
    view["logits_shape"] = [int(n) for n in out.logits_shape]
    return view


def run_sim(config: EngineConfig, info: ModelInfo, source: TokenSource,
            clock: RooflineCostModel) -> tuple[list[dict[str, Any]], Trace]:
    """The example on a fresh scheduler, `SimModelRunner` priced by `clock`, ids from `source`."""
    scheduler = Scheduler(config, info)
    runner = Recorder(SimModelRunner(clock, source, scheduler.config, info))
    trace = drive_workload(scheduler, runner, golden_workload(), clock=clock,
                           finished_hook=source.finished)
    return runner.steps, trace


def priced_ms(trace: Trace) -> list[float]:
    """The simulator's price of each step, in ms (one per forward)."""
    return [round(r.duration * 1e3, 4) for r in trace.steps]


def explain_sim(seed: int = 0, hardware: str = "h100") -> dict[str, Any]:
    """The example on the simulator alone (`explain --sim-only`); token ids seeded by `seed`."""
    source = SyntheticTokenSource(seed, TINY_INFO.vocab_size, TINY_INFO.eos_token_ids)
    steps, trace = run_sim(ENGINE, TINY_INFO, source, roofline_clock(hardware))
    return {"example": "ARCHITECTURE.md §4", "seed": seed,
            "sim": f"SimModelRunner, roofline on {hardware}, synthetic token ids (seed {seed})",
            "steps": [{"step": i, "note": NOTES[i] if i < len(NOTES) else "",
                       "sim_priced_ms": ms, "sim": view}
                      for i, (view, ms) in enumerate(zip(steps, priced_ms(trace), strict=True))],
            "step_counts": [len(steps)]}
