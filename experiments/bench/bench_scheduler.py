"""Benchmark: the spec's own cost per decode step (no model), at several batch sizes.

A runner that returns a constant token stands in for the model, so what is timed is the
scheduler's work: `get_next_batch_to_run` + `ForwardBatch.init_new` + `process_batch_result`
(including the step record). Trace materialisation (numpy -> StepRecord tuples, paid once
when a trace is read or saved) is timed separately.

    python -m experiments.bench.bench_scheduler [--steps 2000] [--batch-sizes 32 64 256]

Writes experiments/results/bench_scheduler.json with the configuration it ran.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from experiments.bench.cpu_info import cpu_model
from shared import (
    EngineConfig,
    ForwardBatch,
    ModelInfo,
    Req,
    RunnerOutput,
    SamplingParams,
    Scheduler,
)


@dataclass(frozen=True)
class BenchConfig:
    batch_sizes: tuple[int, ...] = (32, 64, 256)
    steps: int = 2000
    warmup_steps: int = 50
    prompt_len: int = 64
    repeats: int = 3
    seed: int = 0


class ConstantRunner:
    """Every row samples token 1; logits exist only as a shape."""

    def forward(self, fb: ForwardBatch) -> RunnerOutput:
        return RunnerOutput(fb.logit_rows, (fb.batch_size, 32000), padded_batch_size=fb.batch_size)

    def sample(self, output: RunnerOutput, fb: ForwardBatch) -> np.ndarray:
        return np.ones(fb.batch_size, dtype=np.int64)


def _scheduler(c: BenchConfig, bs: int) -> Scheduler:
    max_new = c.warmup_steps + c.steps + 8
    model = ModelInfo(vocab_size=32000, eos_token_ids=(2,), context_length=c.prompt_len + max_new + 8)
    config = EngineConfig(max_total_tokens=bs * (c.prompt_len + max_new + 8),
                          max_running_requests=bs, disable_cuda_graph=True)
    sched = Scheduler(config, model)
    rng = np.random.default_rng(c.seed)
    params = SamplingParams(max_new_tokens=max_new, ignore_eos=True)
    for i in range(bs):
        sched.add_request(Req(f"r{i}", rng.integers(3, 32000, c.prompt_len).tolist(), params))
    return sched


def _step(sched: Scheduler, runner: ConstantRunner, now: float) -> str:
    batch = sched.get_next_batch_to_run(now)
    fb = ForwardBatch.init_new(batch)
    out = runner.forward(fb)
    sched.process_batch_result(batch, out, runner.sample(out, fb), now)
    return batch.forward_mode.name


def time_decode_steps(c: BenchConfig, bs: int) -> dict[str, float]:
    sched, runner = _scheduler(c, bs), ConstantRunner()
    now = 0.0
    while _step(sched, runner, now) != "DECODE" or len(sched.running_batch) < bs:
        now += 1.0
    for _ in range(c.warmup_steps):
        _step(sched, runner, now)
    per_step = []
    t0 = time.perf_counter()
    for _ in range(c.steps):
        s = time.perf_counter()
        assert _step(sched, runner, now) == "DECODE"
        per_step.append(time.perf_counter() - s)
    total = time.perf_counter() - t0
    m0 = time.perf_counter()
    n = len(sched.trace.steps)
    materialise = (time.perf_counter() - m0) / max(1, n)
    return {"mean_us": total / c.steps * 1e6, "median_us": statistics.median(per_step) * 1e6,
            "p90_us": float(np.percentile(per_step, 90) * 1e6),
            "materialise_us_per_step": materialise * 1e6}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=BenchConfig.steps)
    p.add_argument("--batch-sizes", type=int, nargs="+", default=list(BenchConfig.batch_sizes))
    p.add_argument("--out", default="experiments/results/bench_scheduler.json")
    args = p.parse_args(argv)
    c = BenchConfig(batch_sizes=tuple(args.batch_sizes), steps=args.steps)
    results = {}
    for bs in c.batch_sizes:
        runs = [time_decode_steps(c, bs) for _ in range(c.repeats)]
        results[bs] = min(runs, key=lambda r: r["median_us"])
        print(f"bs={bs:4d}  median {results[bs]['median_us']:7.1f} us/step  mean "
              f"{results[bs]['mean_us']:7.1f}  p90 {results[bs]['p90_us']:7.1f}  "
              f"(trace materialisation {results[bs]['materialise_us_per_step']:.1f} us/step)")
    report = {"config": asdict(c), "machine": cpu_model(),
              "python": platform.python_version(), "results_by_batch_size": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
