"""`LockstepMachine`: both executors in lockstep under one `RuleBasedStateMachine`
(Hypothesis's DatabaseComparison pattern, reference/style.md §8): exec (TorchModelRunner on the
tiny Llama) and sim (SimModelRunner), each behind its own Scheduler, get the same operations:
add a request built on a bundle of shared prefixes, abort a request, step. After every step
the latest StepRecords agree; after every rule the pools are consistent, and when both are idle
nothing leaked. Each example ends by stepping both until every request finished.

Tokens: exec samples for real (greedy and seeded temperature, EOS and stop tokens allowed);
each step its ids are pushed into the simulator's PushTokenSource before sim samples, so sim
sees exactly exec's tokens. Every exec forward is also checked against the spec (positions,
KV slots, LM-head rows) by the TorchSpecProbe. Run by tests/test_agreement_machine.py and
`python -m experiments.dev.mutation_check`.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    multiple,
    rule,
)

from exec.runner.spec_probe import TorchSpecProbe
from experiments.dev.tiny_exec import TINY_INFO, TinyExec
from shared import EngineConfig, InvalidRequestError, Req, Scheduler
from shared.batch.forward_batch import ForwardBatch
from sim.conformance import (
    AgreementError,
    PushTokenSource,
    SpecCheckingRunner,
    engine_configs,
    sampling_params,
)
from sim.conformance.shadow_kv import ShadowKV, check_outcomes
from sim.cost.base import ZeroCostModel
from sim.cost.batch_shape import BatchShape
from sim.run.sim_model_runner import SimModelRunner

MAX_PROMPT_LEN = 64
IDLE_TICK = 1e-4   # seconds a step with nothing to run takes
MAX_DRAIN_STEPS = 2000
TOKENS = st.integers(0, TINY_INFO.vocab_size - 1)


class LockstepMachine(RuleBasedStateMachine):
    """exec (a TinyExec runner, checked by TorchSpecProbe) and sim (SimModelRunner fed exec's
    tokens through a PushTokenSource) behind their own Schedulers, given the same add /
    abort / step operations; StepRecords, finished requests and pools are compared as they go."""

    prefixes = Bundle("prefixes")
    rids = Bundle("rids")

    def __init__(self, tiny: TinyExec) -> None:
        super().__init__()
        self.tiny = tiny
        self.now = 0.0
        self.count = 0
        self.compared = 0  # StepRecords of both traces compared so far

    @initialize(config=engine_configs(min_tokens=48))
    def build_both_executors(self, config: EngineConfig) -> None:
        self.exec = Scheduler(config, TINY_INFO)
        runner = self.tiny.make_runner(self.exec)
        self.exec_runner = SpecCheckingRunner(runner, TorchSpecProbe(runner),
                                              shadow=ShadowKV(self.exec.mem, self.exec.reqs))
        # NOTE: sim runs the effective config exec's trace header records.
        self.sim = Scheduler(self.exec.trace.engine_config, self.exec.trace.model_info)
        self.tokens = PushTokenSource()
        self.sim_runner = SpecCheckingRunner(
            SimModelRunner(ZeroCostModel(), self.tokens, self.sim.config, TINY_INFO),
            shadow=ShadowKV(self.sim.mem, self.sim.reqs))

    @rule(target=prefixes, prefix=st.lists(TOKENS, min_size=1, max_size=48))
    def new_prefix(self, prefix: list[int]) -> list[int]:
        return prefix

    @rule(target=rids, prefix=prefixes, n=st.integers(1, 4), data=st.data())
    def add_requests(self, prefix: list[int], n: int, data):
        """n requests arriving now, each a cut of `prefix` plus its own suffix."""
        return multiple(*(self.add_request(prefix, data) for _ in range(n)))

    def add_request(self, prefix: list[int], data) -> str:
        cut = data.draw(st.integers(0, len(prefix)), label="cut")
        suffix = data.draw(st.lists(TOKENS, min_size=0 if cut else 1,
                                    max_size=MAX_PROMPT_LEN - cut), label="suffix")
        prompt = prefix[:cut] + suffix
        params = data.draw(sampling_params(TINY_INFO, len(prompt)), label="params")
        rid, self.count = f"r{self.count}", self.count + 1
        outcomes = []
        for scheduler in (self.exec, self.sim):
            try:
                scheduler.add_request(Req(rid, prompt, params, arrival_time=self.now))
                outcomes.append(None)
            except InvalidRequestError as e:
                outcomes.append((e.field, e.reason))
        assert outcomes[0] == outcomes[1], f"validation differs: exec {outcomes[0]}, sim {outcomes[1]}"
        return rid

    @rule(rid=rids)
    def abort(self, rid: str) -> None:
        assert self.exec.abort(rid) == self.sim.abort(rid)

    @rule(steps=st.integers(1, 12))
    def run_steps(self, steps: int) -> None:
        for _ in range(steps):
            self.run_one_step()

    def run_one_step(self) -> None:
        batch_e = self.exec.get_next_batch_to_run(self.now)
        batch_s = self.sim.get_next_batch_to_run(self.now)
        assert (batch_e is None) == (batch_s is None), (batch_e, batch_s)
        if batch_e is None:
            self.compare_new_records()
            assert [r.rid for r in self.exec.take_finished()] == [r.rid for r in self.sim.take_finished()]
            self.now += IDLE_TICK
            return
        fb_e, fb_s = ForwardBatch.init_new(batch_e), ForwardBatch.init_new(batch_s)
        if (fb_e.forward_mode, fb_e.rids) != (fb_s.forward_mode, fb_s.rids):
            raise AgreementError(f"step {len(self.exec.trace)}: exec runs {fb_e.forward_mode.name} "
                                 f"{fb_e.rids}, sim runs {fb_s.forward_mode.name} {fb_s.rids}")
        out_e = self.exec_runner.forward(fb_e)
        ids_e = self.exec_runner.sample(out_e, fb_e)
        self.tokens.push_batch(fb_e, ids_e)
        out_s = self.sim_runner.forward(fb_s)
        ids_s = self.sim_runner.sample(out_s, fb_s)
        end = self.now + self.tiny.clock.step_time(
            BatchShape.from_forward_batch(fb_e, out_e.padded_batch_size))
        done_e = self.exec.process_batch_result(batch_e, out_e, ids_e, end)
        done_s = self.sim.process_batch_result(batch_s, out_s, ids_s, end)
        self.now = end
        self.compare_new_records()
        assert [r.rid for r in done_e] == [r.rid for r in done_s]

    def compare_new_records(self) -> None:
        """The StepRecords written since the last call (under overlap a step's record is
        written when its result is processed, at the next poll) agree."""
        new_e, new_s = self.exec.trace.steps[self.compared:], self.sim.trace.steps[self.compared:]
        assert len(new_e) == len(new_s), "one executor recorded a step the other did not"
        for rec_e, rec_s in zip(new_e, new_s, strict=True):
            diff = rec_e.diff(rec_s)
            if diff is not None:
                raise AgreementError(f"step {rec_e.step} differs in {diff.field!r}: exec "
                                     f"{diff.left!r} vs sim {diff.right!r}\n  exec: {rec_e!r}\n"
                                     f"  sim:  {rec_s!r}")
        self.compared += len(new_e)

    def teardown(self) -> None:
        """Drain: step both until every request finished, so every example ends idle."""
        for _ in range(MAX_DRAIN_STEPS):
            if not hasattr(self, "exec") or not (self.exec.reqs or self.exec.pending):
                break
            self.run_one_step()
            self.pools_are_consistent_and_idle_pools_leak_nothing()
        else:
            raise AssertionError(f"requests still unfinished after {MAX_DRAIN_STEPS} steps: "
                                 f"{sorted(self.exec.reqs)}")
        if hasattr(self, "exec"):
            check_outcomes(self.exec.trace)

    @invariant()
    def pools_are_consistent_and_idle_pools_leak_nothing(self) -> None:
        if not hasattr(self, "exec"):
            return
        for scheduler in (self.exec, self.sim):
            scheduler.mem.check_integrity()
        assert self.exec.has_work() == self.sim.has_work()
        assert set(self.exec.reqs) == set(self.sim.reqs)
        if not self.exec.reqs:  # every request finished: both are idle
            self.exec.mem.check_idle()
            self.sim.mem.check_idle()
