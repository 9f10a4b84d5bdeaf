"""`predict(spec)`: run the simulator on one expressed row and return the number to set
beside the published one (in the published unit)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import NamedTuple

from experiments.published_check.row_spec import RowSpec, WorkloadSpec

SHAREGPT_SIGMA = 1.0


class Prediction(NamedTuple):
    row_id: str
    predicted: float
    sim_seconds: float   # the simulated run's duration


def predict(spec: RowSpec) -> Prediction:
    import sim

    if spec.metric == "decode_throughput":
        return _fixed_batch_decode(spec)
    result = sim.simulate(build_workload(spec.workload, _vocab(spec)), seed=0, bounds=False,
                          **spec.sim_args)
    concurrency = spec.workload.concurrency
    value = (closed_loop_ttft(result.completed_requests, concurrency, spec.metric)
             if concurrency is not None and spec.metric.startswith("ttft")
             else metric_value(result, spec.metric))
    return Prediction(spec.row_id, value * spec.scale, result.summary["duration"])


def closed_loop_ttft(requests, concurrency: int, metric: str) -> float:
    """TTFT as a closed-loop client measures it: from when it sends a request, which is when
    a request of the `concurrency` in flight finished, not from t=0 (the simulated run queues
    every request at t=0 behind a running cap of `concurrency`). The k-th request to start
    (by its first token) was sent at the (k - concurrency)-th finish; `metric` ttft_mean or
    ttft_p50."""
    import numpy as np

    first = np.sort(requests["first_token_time"].to_numpy())
    finish = np.sort(requests["finish_time"].to_numpy())
    sent = np.zeros_like(first)
    sent[concurrency:] = finish[: max(0, len(first) - concurrency)]
    ttft = np.maximum(first - sent, 0.0)
    return float(np.median(ttft) if metric == "ttft_p50" else ttft.mean())


def predict_all(specs: Sequence[RowSpec], jobs: int) -> list[Prediction]:
    """`predict` of every spec on a pool of `jobs` processes, in the specs' order.
    NOTE: the runs start largest first (by request count), so a long run does not start
    last and hold the pool's end alone."""
    order = sorted(range(len(specs)), key=lambda i: -specs[i].workload.num_prompts)
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        done = dict(zip(order, pool.map(predict, [specs[i] for i in order]), strict=True))
    return [done[i] for i in range(len(specs))]


def metric_value(result, metric: str) -> float:
    """A summary metric, or the prefill phase's throughput: prompt tokens of the completed
    requests / the run's duration ("input_throughput")."""
    if metric == "input_throughput":
        done = result.completed_requests
        return float(done["prompt_len"].sum()) / result.summary["duration"]
    return result.summary[metric]


def _fixed_batch_decode(spec: RowSpec) -> Prediction:
    """A decode-only stress test at a fixed batch: the simulation's cost model prices the
    decode step of `concurrency` requests at the mean KV length (input + output / 2);
    throughput = batch / step time (under the engine's overlap setting)."""
    import numpy as np

    from sim.cost.batch_shape import BatchShape
    from sim.run.build import build_simulation

    w, s = spec.workload, build_simulation(seed=0, **spec.sim_args)
    kv = w.input_len + w.output_len // 2
    shape = BatchShape.decode(np.full(w.concurrency, kv), w.concurrency)
    step = s.cost_model.step_time(shape, s.scheduler.config.overlap)
    return Prediction(spec.row_id, w.concurrency / step * spec.scale, step)


def build_workload(w: WorkloadSpec, vocab_size: int):
    """Fixed lengths, a dataset's length distributions, or the ShareGPT-like lognormal mix
    (with medians giving the published means when they are known: mean = median *
    exp(sigma^2 / 2)); EOS ignored, so each request generates exactly its output length, as
    the benchmarks' fixed-length runs do."""
    import math

    from shared import SamplingParams, ShareGPTLike, Synthetic

    if w.input_dist is not None:
        params = SamplingParams(max_new_tokens=w.output_dist.max_len, ignore_eos=True)
        return Synthetic(w.num_prompts, w.input_dist, w.output_dist,
                         sampling_params=params).build(vocab_size=vocab_size, rate=w.rate)
    params = SamplingParams(max_new_tokens=max(w.output_len, 1), ignore_eos=True)
    if not w.sharegpt:
        return Synthetic(w.num_prompts, w.input_len, w.output_len,
                         sampling_params=params).build(vocab_size=vocab_size, rate=w.rate)
    medians = {}
    if w.input_len and w.output_len:
        ratio = math.exp(SHAREGPT_SIGMA ** 2 / 2)
        medians = {"prompt_median": w.input_len / ratio, "output_median": w.output_len / ratio}
    return ShareGPTLike(w.num_prompts, sigma=SHAREGPT_SIGMA, sampling_params=params,
                        **medians).build(vocab_size=vocab_size, rate=w.rate)


def _vocab(spec: RowSpec) -> int:
    from sim.model.from_config import get_model_shape

    return get_model_shape(spec.sim_args["model"]).vocab_size
