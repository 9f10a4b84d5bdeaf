"""Lockstep agreement (ARCHITECTURE §6): for the same workload, the simulator's schedule is the real
executor's schedule step by step, and the real executor computes exactly what the spec says.

Tokens: exec's TorchModelRunner samples for real (greedy and seeded temperature, EOS and stop
tokens allowed) on a tiny random-weight Llama; the simulator replays them from exec's saved
trace (`ReplayTokenSource`). Both run under the SimPy driver with the same roofline clock, so
arrivals interleave with steps identically. Everything goes through the conformance kit
(`sim.conformance`), which users run against their own runners; exec's probe is
`exec.runner.spec_probe.TorchSpecProbe`.
"""

from __future__ import annotations

import pytest
from hypothesis import event, example, given, settings

from exec.device.torch_threads import torch_threads
from exec.runner.spec_probe import TorchSpecProbe
from experiments.dev.tiny_exec import ARRIVAL_TICK, TINY_INFO, TinyExec
from shared import (
    EngineConfig,
    SamplingParams,
    Scheduler,
    SharedPrefix,
    StepRecord,
    Synthetic,
    Trace,
)
from shared.loop.model_runner import RunnerOutput
from shared.memory.token_allocator import AllocatorState
from shared.workload.length_dist import Uniform
from sim.conformance import (
    AgreementError,
    ConformanceCase,
    ConformanceError,
    StepClock,
    cases,
    check_agreement,
    check_conformance,
    first_divergence,
    replay_runner,
)
from sim.run.replay import replay
from sim.run.sim_model_runner import SimModelRunner
from sim.run.token_source import SyntheticTokenSource

AGREEMENT_EXAMPLES = max(200, settings.default.max_examples)


# --- the real executor (experiments.dev.tiny_exec), built once per module -------------


def tiny_exec_fixture(tiny_checkpoint):
    folder, _ = tiny_checkpoint("llama")
    with torch_threads(1):
        yield TinyExec(folder)


tiny_exec = pytest.fixture(scope="module", name="tiny_exec")(tiny_exec_fixture)


# --- the agreement property ------------------------------------------------------------


def _events(case: ConformanceCase, trace: Trace) -> None:
    """Hypothesis statistics (`--hypothesis-show-statistics`): what the examples exercised."""
    reqs = trace.requests.values()
    modes = {s.forward_mode for s in trace.steps}
    event(f"page_size={case.config.page_size}")
    event(f"requests: {len(case.workload) // 4 * 4}+")
    event(f"steps: {len(trace.steps) // 20 * 20}+")
    event(f"policy={case.config.schedule_policy}")
    for name, hit in (("retraction", any(r.num_retractions for r in reqs)),
                      ("chunked prefill", any(-1 in s.next_token_ids for s in trace.steps)),
                      ("mixed step", "MIXED" in modes),
                      ("prefix-cache hit", any(r.cached_tokens for r in reqs)),
                      ("EOS/stop finish", any(r.finish_reason.type == "stop" for r in reqs)),
                      ("input logprobs", any(r.sampling_params.return_logprob for r in reqs)),
                      ("graph-padded decode", any(s.padded_batch_size > len(s.rids) for s in trace.steps))):
        event(f"{name}: {'yes' if hit else 'no'}")


def retraction_case(page_size: int, chunk: int | None, max_total_tokens: int) -> ConformanceCase:
    """Eight requests (prompts 16-64, outputs 8-16, greedy, EOS ignored) arriving within ~3 ms
    into a pool that holds about their prompts: decode runs out of KV and retracts. Random
    examples retract rarely (outputs <= 16 are small next to the prompts), so these two
    always run."""
    workload = Synthetic(8, Uniform(16, 64), Uniform(8, 16),
                         sampling_params=SamplingParams(temperature=0, ignore_eos=True)).build(
                             vocab_size=TINY_INFO.vocab_size, seed=0, rate=3000.0)
    config = EngineConfig(page_size=page_size, max_total_tokens=max_total_tokens,
                          chunked_prefill_size=chunk, schedule_conservativeness=0.01,
                          disable_cuda_graph=True)
    return ConformanceCase(config, workload, TINY_INFO)


RETRACTION_CASES = (retraction_case(1, None, 313), retraction_case(16, 32, 368))


def padded_case() -> ConformanceCase:
    """Seven greedy requests arriving together, decode CUDA graphs on: decode batches of 7
    (and fewer, as they finish at different lengths) run padded to 8, 4 or 2."""
    workload = Synthetic(7, Uniform(4, 24), Uniform(4, 12),
                         sampling_params=SamplingParams(temperature=0, ignore_eos=True)).build(
                             vocab_size=TINY_INFO.vocab_size, seed=3, rate=1e6)
    return ConformanceCase(EngineConfig(max_total_tokens=512, cuda_graph_max_bs=8), workload, TINY_INFO)


@settings(max_examples=AGREEMENT_EXAMPLES)
@given(case=cases(TINY_INFO, arrival_tick=ARRIVAL_TICK))
@example(case=RETRACTION_CASES[0])
@example(case=RETRACTION_CASES[1])
@example(case=padded_case())
def test_sim_schedules_every_step_exactly_as_exec_does(tiny_exec, case):
    """exec (tiny Llama, CPU) and sim (replaying exec's tokens) give equal StepRecords (times
    aside) and request outcomes; every exec forward feeds rotary the spec's positions, writes
    exactly out_cache_loc and gives the LM head pruned_rows; pools stay consistent and leak
    nothing; a teacher-forced replay of exec's trace re-schedules 100% of its steps."""
    agreement = check_agreement(tiny_exec.make_runner, replay_runner(), case,
                                header_a=tiny_exec.header, clock=tiny_exec.clock, probe_a=TorchSpecProbe)
    result = replay(agreement.reference, cost_model=tiny_exec.clock)
    assert (result.agree_fraction, result.first_divergence) == (1.0, None), result.steps
    assert result.mape < 1e-9
    _events(case, agreement.reference)


MOE_EXAMPLES = 40


@pytest.fixture(scope="module")
def tiny_moe_exec(tiny_checkpoint):
    """exec on the tiny Mixtral (top-2 of 8 experts in every layer). NOTE: a step clock, not
    the roofline: the simulator's model shapes do not price MoE configs yet."""
    folder, _ = tiny_checkpoint("mixtral")
    with torch_threads(1):
        yield TinyExec(folder, clock=StepClock(1.9e-4, 1e-7))


@settings(max_examples=MOE_EXAMPLES)
@given(case=cases(TINY_INFO, arrival_tick=ARRIVAL_TICK))
@example(case=padded_case())
def test_sim_schedules_every_step_exactly_as_exec_runs_a_moe_model(tiny_moe_exec, case):
    """The agreement property on a MoE model: exec's tiny Mixtral and sim replaying its
    tokens give equal StepRecords and outcomes, under the spec probe's checks."""
    check_agreement(tiny_moe_exec.make_runner, replay_runner(), case,
                    header_a=tiny_moe_exec.header, clock=tiny_moe_exec.clock, probe_a=TorchSpecProbe)


@pytest.fixture(scope="module")
def tiny_mla_exec(tiny_checkpoint):
    """exec on the tiny DeepSeek-V3 (MLA latent cache, grouped routing); a step clock too."""
    folder, _ = tiny_checkpoint("deepseek_v3")
    with torch_threads(1):
        yield TinyExec(folder, clock=StepClock(1.9e-4, 1e-7))


@settings(max_examples=MOE_EXAMPLES)
@given(case=cases(TINY_INFO, arrival_tick=ARRIVAL_TICK))
@example(case=padded_case())
def test_sim_schedules_every_step_exactly_as_exec_runs_an_mla_model(tiny_mla_exec, case):
    """The agreement property on an MLA model: exec's tiny DeepSeek-V3 (latent KV pool) and
    sim replaying its tokens give equal StepRecords and outcomes."""
    check_agreement(tiny_mla_exec.make_runner, replay_runner(), case,
                    header_a=tiny_mla_exec.header, clock=tiny_mla_exec.clock, probe_a=TorchSpecProbe)


@pytest.fixture(scope="module")
def tiny_gpt_oss_exec(tiny_checkpoint):
    """exec on the tiny gpt-oss (a sliding layer of window 6 then a full one, sinks, biased
    experts); a step clock too."""
    folder, _ = tiny_checkpoint("gpt_oss")
    with torch_threads(1):
        yield TinyExec(folder, clock=StepClock(1.9e-4, 1e-7))


@settings(max_examples=MOE_EXAMPLES)
@given(case=cases(TINY_INFO, arrival_tick=ARRIVAL_TICK))
@example(case=padded_case())
def test_sim_schedules_every_step_exactly_as_exec_runs_a_sliding_window_model(tiny_gpt_oss_exec,
                                                                             case):
    """The agreement property on gpt-oss: exec's sliding-window layers (full KV pool,
    windowed masks, padded CUDA-graph decode included) and sim replaying its tokens give
    equal StepRecords and outcomes."""
    check_agreement(tiny_gpt_oss_exec.make_runner, replay_runner(), case,
                    header_a=tiny_gpt_oss_exec.header, clock=tiny_gpt_oss_exec.clock,
                    probe_a=TorchSpecProbe)


# --- the kit can fail, and works for any runner ----------------------------------------


def _small_case(**config) -> ConformanceCase:
    workload = SharedPrefix(2, 3, 12, 6, 5).build(vocab_size=TINY_INFO.vocab_size, seed=1,
                                                  rate=2000.0)
    base = {"max_total_tokens": 256, "chunked_prefill_size": 8, "page_size": 4,
            "disable_cuda_graph": True}
    return ConformanceCase(EngineConfig(**{**base, **config}), workload, TINY_INFO)


def _synthetic_sim(scheduler: Scheduler, reference: Trace | None) -> SimModelRunner:
    source = SyntheticTokenSource(7, TINY_INFO.vocab_size, TINY_INFO.eos_token_ids)
    return SimModelRunner(StepClock(), source, scheduler.config, scheduler.model_info)


def test_conformance_check_passes_a_runner_without_a_probe():
    """The kit's checks run on any ModelRunner: the sim runner with synthetic tokens conforms."""
    trace = check_conformance(_synthetic_sim, _small_case())
    assert len(trace.steps) > 6 and all(r.output_len == 5 for r in trace.requests.values())


def test_conformance_check_catches_a_runner_using_other_logit_rows():
    """A runner reporting logit rows other than the spec's fails with ConformanceError."""
    class FirstRow(SimModelRunner):
        def forward(self, fb):
            out = super().forward(fb)
            rows = out.logit_rows._replace(pruned_rows=out.logit_rows.pruned_rows * 0)
            return out.__class__(rows, out.logits_shape, padded_batch_size=out.padded_batch_size)

    def make(scheduler, reference):
        return FirstRow(StepClock(), SyntheticTokenSource(0, 256), scheduler.config, TINY_INFO)

    with pytest.raises(ConformanceError, match="pruned_rows"):
        check_conformance(make, _small_case())


def test_explicit_padded_example_pads_decode_batches():
    """The padded example of the agreement test does run decode batches at a larger size."""
    trace = check_conformance(_synthetic_sim, padded_case())
    assert any(s.graph and s.padded_batch_size > len(s.rids) for s in trace.steps)


def test_exec_pads_decode_like_a_graph_and_agrees_with_sim(tiny_exec):
    """exec on CPU runs graph-padded decode batches eagerly at the padded size; the probe's
    checks (against the padded batch) and agreement with the simulator hold."""
    agreement = check_agreement(tiny_exec.make_runner, replay_runner(), padded_case(),
                                header_a=tiny_exec.header, clock=tiny_exec.clock, probe_a=TorchSpecProbe)
    padded = [s for s in agreement.reference.steps if s.padded_batch_size > len(s.rids)]
    assert padded and all(s.graph for s in padded)


def test_probe_catches_padding_rows_fed_the_wrong_position(tiny_exec):
    """Padding rows at position 1 instead of the spec's 0 fail the padded-batch check."""
    def shifted(scheduler, reference):
        runner = tiny_exec.make_runner(scheduler)
        fill = runner.graphs._fill

        def bad_fill(g, fb, bs, window):
            fill(g, fb, bs, window)
            g.positions[fb.batch_size:] += 1
        runner.graphs._fill = bad_fill
        return runner

    with pytest.raises(ConformanceError, match="positions fed to rotary"):
        check_conformance(shifted, padded_case(), probe=TorchSpecProbe)


def test_a_runner_leaving_padded_batch_size_out_conforms():
    """RunnerOutput's default padded_batch_size is the batch size, so an eager runner that
    does not set it passes the kit's checks."""
    class Eager(SimModelRunner):
        def forward(self, fb):
            out = super().forward(fb)
            return RunnerOutput(out.logit_rows, out.logits_shape, duration=out.duration)

    def make(scheduler, reference):
        return Eager(StepClock(), SyntheticTokenSource(0, 256), scheduler.config, TINY_INFO)

    trace = check_conformance(make, _small_case())
    assert all(s.padded_batch_size == len(s.rids) for s in trace.steps)


def test_probe_catches_exec_feeding_rotary_shifted_positions(tiny_exec):
    """With positions shifted by one inside the torch runner, the probe reports the forward."""
    def shifted(scheduler, reference):
        runner = tiny_exec.make_runner(scheduler)
        tensor = runner._tensor
        runner._tensor = lambda fb, name: tensor(fb, name) + (name == "positions")
        return runner

    with pytest.raises(ConformanceError, match="positions fed to rotary"):
        check_conformance(shifted, _small_case(), probe=TorchSpecProbe)


def test_agreement_check_names_the_first_differing_step_and_field(tiny_exec):
    """A scheduler whose allocator takes pages from the back of its free list disagrees with
    the spec's; the error names the step and the field (out_cache_loc)."""
    def back_of_free_list(scheduler, reference):
        alloc = scheduler.mem.allocator

        def take(n):
            state = alloc.backup_state()
            cut = len(state.free_pages) - n
            if cut < 0:
                return None
            pages = state.free_pages[cut:]
            state.is_free[pages] = False
            alloc.restore_state(AllocatorState(state.free_pages[:cut], state.is_free))
            return pages

        alloc._take = take
        return tiny_exec.make_runner(scheduler)

    with pytest.raises(AgreementError, match=r"step 0 differs in 'out_cache_loc'"):
        check_agreement(back_of_free_list, replay_runner(), _small_case(), clock=tiny_exec.clock)


@pytest.mark.parametrize("case", RETRACTION_CASES, ids=("page1", "page16-chunk32"))
def test_explicit_examples_retract(case):
    """The explicit examples of the agreement test do exercise retraction."""
    trace = check_conformance(_synthetic_sim, case, clock=StepClock(1.9e-4, 0))
    assert sum(r.num_retractions for r in trace.requests.values()) > 0


def test_first_divergence_reports_a_missing_step():
    """Sequences of different lengths diverge at the first step one of them lacks."""
    trace = check_conformance(_synthetic_sim, _small_case())
    steps: list[StepRecord] = trace.steps
    assert first_divergence(steps, steps) is None
    d = first_divergence(steps, steps[:-1])
    assert (d.step, d.field, d.b) == (len(steps) - 1, "missing step", None)
