"""Decode runs (shared.loop.decode_run): applying a run of decode steps at once changes nothing."""

import dataclasses

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from shared import EngineConfig, FinishReason, ModelInfo, SamplingParams, Scheduler, Workload
from shared.workload.workload import WorkloadRequest
from sim.cost.base import CostModel, StepCost
from sim.cost.batch_shape import BatchShape
from sim.cost.roofline.model import RooflineCostModel
from sim.hardware.lookup import get_hardware
from sim.model.from_config import get_model_shape
from sim.run.driver import delays_to, drive_workload
from sim.run.sim_model_runner import SimModelRunner
from sim.run.token_source import ReplayTokenSource, SyntheticTokenSource
from tests.strategies import scheduler_cases

VOCAB = 10  # token 0 is EOS: a uniform source ends about one request in ten per step
MODEL = ModelInfo(vocab_size=VOCAB, eos_token_ids=(0,), context_length=4096)
CLOCK = RooflineCostModel(get_model_shape("smollm2-135m"), get_hardware("h100"))


class SlowerWithLength(CostModel):
    """A cost model without a decode_step_times of its own (the base class's is used)."""

    def step_cost(self, shape: BatchShape) -> StepCost:
        return StepCost(attention=1e-6 * shape.kv_tokens, overhead=1e-3)


def _workload(reqs, ignore_eos=(False,)) -> Workload:
    """`ignore_eos[i % len]` for request i (EOS may end the others)."""
    return Workload(tuple(
        WorkloadRequest(f"r{i}", arrival, tuple(prompt),
                        SamplingParams(max_new_tokens=m, ignore_eos=ignore_eos[i % len(ignore_eos)]))
        for i, (prompt, m, arrival) in enumerate(reqs)))


def _simulate(config: dict, workload: Workload, runs: bool, source=None, clock: CostModel = CLOCK):
    scheduler = Scheduler(EngineConfig(**config), MODEL)
    source = source or SyntheticTokenSource(7, VOCAB, eos_token_ids=())
    runner = SimModelRunner(clock, source, scheduler.config, MODEL)
    applied = []
    apply = scheduler.apply_decode_run

    def counted(tokens, *args, **kwargs):
        applied.append(len(tokens))
        return apply(tokens, *args, **kwargs)

    scheduler.apply_decode_run = counted
    trace = drive_workload(scheduler, runner, workload, finished_hook=source.finished, decode_runs=runs)
    return scheduler, trace, applied


def _assert_same_run(a: Scheduler, b: Scheduler) -> None:
    steps_a, steps_b = a.trace.steps, b.trace.steps
    assert len(steps_a) == len(steps_b)
    for x, y in zip(steps_a, steps_b, strict=True):
        assert x.diff(y, ignore=()) is None, (x.step, x.diff(y, ignore=()))
    assert a.trace.requests == b.trace.requests
    assert a.new_token_ratio.value == b.new_token_ratio.value
    assert np.array_equal(a.mem.req_to_token_pool.req_to_token, b.mem.req_to_token_pool.req_to_token)
    assert a.mem.allocator.backup_state().free_pages.tolist() == b.mem.allocator.backup_state().free_pages.tolist()
    b.mem.check_integrity()


@given(case=scheduler_cases(), roofline=st.booleans(),
       ignore_eos=st.lists(st.booleans(), min_size=1, max_size=4))
def test_decode_runs_leave_every_step_request_and_pool_unchanged(case, roofline, ignore_eos):
    """With decode runs the trace (times included), the requests, the KV pool and the
    admission ratio equal the step-by-step loop's, under EOS hits, ignore_eos (its own
    admission path without a radix cache), retraction, paging and both schedules."""
    config, reqs = case
    clock = CLOCK if roofline else SlowerWithLength()
    a, _, _ = _simulate(config, _workload(reqs, ignore_eos), runs=False, clock=clock)
    b, _, _ = _simulate(config, _workload(reqs, ignore_eos), runs=True, clock=clock)
    _assert_same_run(a, b)


def test_decode_runs_are_taken_and_cover_most_decode_steps():
    """On a steady workload most decode steps go through runs (the property above is not
    vacuous)."""
    reqs = [([1 + i % 9] * 20, 30 + 10 * (i % 3), 0.0) for i in range(24)]
    config = dict(max_total_tokens=4096, disable_cuda_graph=True)
    never_eos = SyntheticTokenSource(7, VOCAB, eos_token_ids=(0,))
    a, _, _ = _simulate(config, _workload(reqs), runs=False, source=never_eos)
    b, _, applied = _simulate(config, _workload(reqs), runs=True, source=never_eos)
    _assert_same_run(a, b)
    decodes = sum(s.forward_mode == "DECODE" for s in b.trace.steps)
    assert len(applied) > 0 and sum(applied) > decodes / 2


def test_decode_runs_stop_where_a_replayed_run_ended_a_request():
    """A replay that ends a request by a stop string mid-decode ends it at the same step
    with and without runs."""
    reqs = [([1, 2, 3] * 5, 40, 0.0), ([4, 5] * 6, 40, 0.0), ([6] * 9, 40, 0.01)]
    config = dict(max_total_tokens=2048, disable_cuda_graph=True)
    _, recorded, _ = _simulate(config, _workload(reqs), runs=False,
                               source=SyntheticTokenSource(7, VOCAB, eos_token_ids=(0,)))
    rec = recorded.requests["r1"]
    cut = max(2, rec.output_len // 2)
    recorded.requests["r1"] = dataclasses.replace(
        rec, output_len=cut, output_ids=rec.output_ids[:cut], finish_reason=FinishReason.by_stop("\n\n"))
    replays = [_simulate(config, _workload(reqs), runs=r, source=ReplayTokenSource(recorded))
               for r in (False, True)]
    _assert_same_run(replays[0][0], replays[1][0])
    assert replays[1][1].requests["r1"].output_len == cut
    assert replays[1][1].requests["r1"].finish_reason == FinishReason.by_stop("\n\n")


@given(seq=st.lists(st.integers(1, 5000), min_size=1, max_size=40), pad=st.integers(0, 8),
       tp=st.sampled_from((1, 2)))
def test_roofline_decode_step_times_equal_its_step_times(seq, pad, tp):
    """The roofline's arithmetic decode prices are the floats step_time gives each shape."""
    model = RooflineCostModel(get_model_shape("llama-3-8b"), get_hardware("h100"), tp=tp)
    seq_lens = np.array(seq, dtype=np.int64)
    times = model.decode_step_times(seq_lens, len(seq) + pad)
    for j in range(5):
        assert next(times) == model.step_time(BatchShape.decode(seq_lens + j, len(seq) + pad))


@given(now=st.floats(0, 1e7), delay=st.floats(0, 1e4))
def test_delays_to_land_simpy_time_exactly_on_the_target(now, delay):
    """Adding the delays one by one to now, as SimPy does, gives the target exactly."""
    target = now + delay
    t = now
    for d in delays_to(now, target):
        assert d >= 0
        t = t + d
    assert t == target
