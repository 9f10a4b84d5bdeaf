"""The shadow-KV invariant (sim.conformance.shadow_kv) holds on the spec and catches what breaks it."""

import numpy as np
import pytest

from shared import EngineConfig, ForwardBatch, ModelInfo, Req, SamplingParams, Scheduler
from sim.conformance.shadow_kv import ShadowKV, ShadowKVError, check_outcomes
from tests.scripted_runner import ScriptedRunner, drive

MODEL = ModelInfo(vocab_size=50, eos_token_ids=(0,), context_length=512)
PROMPT = [3, 4, 5, 6, 7, 8, 9, 10]


def _run(mutate=None, **config):
    """Two requests sharing a cached prefix, step by step; `mutate(scheduler, step)` runs
    after each step is scheduled, before the shadow check."""
    sched = Scheduler(EngineConfig(max_total_tokens=256, disable_cuda_graph=True, **config), MODEL)
    shadow, runner, steps = ShadowKV(sched.mem, sched.reqs), ScriptedRunner(MODEL.vocab_size), []

    def build(batch):
        if mutate is not None:
            mutate(sched, len(steps))
        fb = ForwardBatch.init_new(batch)
        shadow.check(fb)
        steps.append(fb.forward_mode.name)
        return fb

    reqs = [Req("a", PROMPT, SamplingParams(max_new_tokens=5, ignore_eos=True)),
            Req("b", [*PROMPT[:6], 20, 21], SamplingParams(max_new_tokens=5, ignore_eos=True),
                arrival_time=0.02)]
    drive(sched, runner, reqs, build=build)
    return sched, shadow


@pytest.mark.parametrize("overlap", [False, True])
def test_a_correct_run_passes_at_every_forward(overlap):
    """Prefix-cached, decoding requests read their own tokens at every step, both schedules."""
    sched, shadow = _run(disable_overlap_schedule=not overlap)
    assert shadow.forwards == len(sched.trace.steps) > 4
    check_outcomes(sched.trace)


def _row(sched, rid):
    req = sched.reqs[rid]
    return sched.mem.req_to_token_pool.req_to_token[req.req_pool_idx]


def test_swapped_slots_in_a_row_are_caught():
    """A row whose slots 0 and 1 are swapped reads its tokens at the wrong positions."""
    def swap(sched, step):
        if step == 3 and "a" in sched.reqs:
            row = _row(sched, "a")
            row[0], row[1] = row[1], row[0]
    with pytest.raises(ShadowKVError, match=r"a .* reads KV of other positions"):
        _run(swap)


def test_a_prefix_hit_on_other_tokens_is_caught():
    """A request pointed at another request's slots of different tokens is caught."""
    def repoint(sched, step):
        if "b" in sched.reqs and "a" in sched.reqs and sched.reqs["b"].req_pool_idx is not None:
            a, b = _row(sched, "a"), _row(sched, "b")
            b[6] = a[6]                 # NOTE: a's token 9 at position 6, b's is 20
    with pytest.raises(ShadowKVError, match="reads KV of other tokens"):
        _run(repoint)


def test_reading_a_free_slot_is_caught():
    """A slot given back to the allocator while a request still reads it is caught."""
    def free_one(sched, step):
        if step == 2 and "a" in sched.reqs:
            slot = _row(sched, "a")[7:8].astype(np.int64)
            sched.mem.allocator.free(slot)
    with pytest.raises(ShadowKVError, match="reads a free slot"):
        _run(free_one)


def test_too_many_outputs_are_caught():
    """A request holding more outputs than max_new_tokens is caught at its next forward."""
    def extra(sched, step):
        if step == 2 and "a" in sched.reqs:
            sched.reqs["a"].output_ids.extend([1] * 10)
    with pytest.raises(ShadowKVError):
        _run(extra)
