"""SimModelRunner: the spec's ModelRunner, pricing batches instead of computing them."""

import numpy as np

from shared import ForwardBatch, Synthetic
from sim.cost.batch_shape import BatchShape
from sim.run.build import build_simulation
from sim.run.driver import drive_workload


def _simulation(**engine_args):
    return build_simulation(model="smollm2-135m", hardware="h100", **engine_args)


def _workload(n=16, output=100):
    return Synthetic(n, 64, output).build(vocab_size=49152, seed=1)


class Recorder:
    """Wraps a runner; checks each forward's output and each sample against the contract."""

    def __init__(self, runner):
        self.runner, self.checked = runner, 0

    def forward(self, fb: ForwardBatch):
        out = self.runner.forward(fb)
        assert out.logit_rows is fb.logit_rows and out.logits is None
        assert out.logits_shape == (fb.batch_size, self.runner.vocab_size)
        shape = BatchShape.from_forward_batch(fb, out.padded_batch_size)
        assert out.duration == self.runner.cost_model.step_time(shape, self.runner.overlap)
        return out

    def sample(self, out, fb: ForwardBatch):
        ids = self.runner.sample(out, fb)
        lens = [len(o) for o in fb.output_ids]
        assert self.runner.output_indices(fb).tolist() == lens
        assert ids.tolist() == self.runner.token_source.token_ids(fb.rids, lens).tolist()
        assert ids.dtype == np.int64 and len(ids) == fb.batch_size
        self.checked += 1
        return ids


def test_forward_prices_the_batch_and_sample_reads_the_token_source():
    """Under retractions and mixed chunks: logit rows are the spec's, no logits, the duration
    is the cost model's price, and each row samples output index len(output_ids)."""
    sim = _simulation(max_total_tokens=700, chunked_prefill_size=48, enable_mixed_chunk=True)
    recorder = Recorder(sim.runner)
    trace = drive_workload(sim.scheduler, recorder, _workload())
    assert recorder.checked == len(trace.steps)
    modes = {s.forward_mode for s in trace.steps}
    assert {"EXTEND", "DECODE", "MIXED"} <= modes
    assert sum(r.num_retractions for r in trace.requests.values()) > 0


def test_graph_sizes_follow_the_effective_config():
    """The runner's captured sizes are the spec's for the scheduler's resolved config
    (capped at max_running_requests)."""
    sim = _simulation(max_running_requests=20)
    assert sim.runner.graph_sizes[-1] <= 20
    assert _simulation(disable_cuda_graph=True).runner.graph_sizes == []


def test_a_runner_reused_for_another_run_samples_the_right_indices():
    """Reusing one runner on a fresh scheduler whose rids repeat the last run's (with other
    prompt lengths) still samples output index len(output_ids) on every row."""
    first = _simulation()
    recorder = Recorder(first.runner)
    drive_workload(first.scheduler, recorder, Synthetic(4, 64, 5).build(vocab_size=49152))
    second = _simulation()
    trace = drive_workload(second.scheduler, recorder,
                           Synthetic(4, 32, 5).build(vocab_size=49152))
    assert recorder.checked > len(trace.steps)
