"""`predict(spec)`: run the simulator on one expressed row and return the number to set
beside the published one (in the published unit)."""

from __future__ import annotations

from typing import NamedTuple

from experiments.published_check.row_spec import RowSpec, WorkloadSpec

SHAREGPT_SIGMA = 1.0


class Prediction(NamedTuple):
    row_id: str
    predicted: float
    sim_seconds: float   # the simulated run's duration


def predict(spec: RowSpec) -> Prediction:
    import sim

    result = sim.simulate(build_workload(spec.workload, _vocab(spec)), seed=0, **spec.sim_args)
    return Prediction(spec.row_id, result.summary[spec.metric] * spec.scale,
                      result.summary["duration"])


def build_workload(w: WorkloadSpec, vocab_size: int):
    """Fixed lengths, or the ShareGPT-like lognormal mix (with medians giving the published
    means when they are known: mean = median * exp(sigma^2 / 2)); EOS ignored, so each
    request generates exactly its output length, as the benchmarks' fixed-length runs do."""
    import math

    from shared import SamplingParams, Workload

    params = SamplingParams(max_new_tokens=max(w.output_len, 1), ignore_eos=True)
    if not w.sharegpt:
        return Workload.synthetic(w.num_prompts, w.input_len, w.output_len, vocab_size=vocab_size,
                                  rate=w.rate, sampling_params=params)
    medians = {}
    if w.input_len and w.output_len:
        ratio = math.exp(SHAREGPT_SIGMA ** 2 / 2)
        medians = {"prompt_median": w.input_len / ratio, "output_median": w.output_len / ratio}
    return Workload.sharegpt_like(w.num_prompts, vocab_size=vocab_size, rate=w.rate,
                                  sigma=SHAREGPT_SIGMA, sampling_params=params, **medians)


def _vocab(spec: RowSpec) -> int:
    from sim.model_shapes import get_model_shape

    return get_model_shape(spec.sim_args["model"]).vocab_size
