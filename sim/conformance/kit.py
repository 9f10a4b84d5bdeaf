"""The conformance kit: property-test any `ModelRunner` against the spec and against ours.

Agreement (ARCHITECTURE §6) for one workload, engine config and token source means: (1) the
StepRecords of two executors are equal in every field but `start_time` and `duration`;
(2) the runner computes what the spec says: the positions it feeds to rotary embeddings, the
KV slots it writes and the hidden rows it sends to the LM head are the ForwardBatch's.

    from hypothesis import given, settings
    from sim.conformance import cases, check_agreement, check_conformance, replay_runner

    @settings(max_examples=200)
    @given(case=cases(MODEL_INFO))
    def test_my_runner(case):
        check_conformance(make_mine, case, probe=MyProbe)     # honours the spec
        check_agreement(make_mine, replay_runner(), case)     # sim schedules identically

A runner factory is `make_runner(scheduler, reference) -> ModelRunner`: build the runner for
`scheduler.config` / `scheduler.model_info`; `reference` is the trace of the run it must agree
with (None for a conformance check and for runner A), which a simulator needs for its tokens.
Runner A samples for real; runner B is driven with the effective config read back from A's
saved trace header, so a replaying runner B (`replay_runner`) sees A's tokens. Both runs go
through the SimPy driver under the same clock (a `CostModel`; default `StepClock()`).

Strategies (`cases`, `workloads`, `engine_configs`, `sampling_params`) draw small workloads
with shared prefixes, greedy and seeded temperature sampling, EOS / stop-token finishes,
input logprobs, arrivals in virtual seconds, page sizes 1/2/4/16, small or no chunking, mixed
chunks, fcfs/lpm, both schedules, decode CUDA graphs on and off (padded decode batches; a
torch runner off CUDA runs the padded inputs eagerly) and KV pools tight enough to force
retraction. A graph-padded forward is checked against the spec's padded batch
(`shared.batch.cuda_graph.pad_decode_batch`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np

from shared.batch.cuda_graph import pad_decode_batch
from shared.batch.forward_batch import ForwardBatch
from shared.loop.model_runner import ModelRunner, RunnerOutput
from shared.loop.scheduler import Scheduler
from shared.loop.spec_observation import SpecObservation
from shared.trace.step_record import StepRecord
from shared.trace.trace import Trace, TraceHeader
from shared.workload.workload import Workload
from sim.conformance.shadow_kv import ShadowKV, check_outcomes
from sim.conformance.strategies import (
    ConformanceCase,
    cases,
    engine_configs,
    min_total_tokens,
    sampling_params,
    workloads,
)
from sim.cost.base import CostModel, StepCost, ZeroCostModel
from sim.cost.batch_shape import BatchShape
from sim.run.driver import drive_workload
from sim.run.sim_model_runner import SimModelRunner
from sim.run.token_source import ReplayTokenSource, TokenSource

__all__ = [
    "Agreement", "AgreementError", "ConformanceCase", "ConformanceError", "Divergence",
    "PushTokenSource", "SpecCheckingRunner", "SpecObservation", "SpecProbe", "StepClock",
    "assert_traces_agree", "cases", "check_agreement", "check_conformance", "engine_configs",
    "first_divergence", "min_total_tokens", "replay_runner", "sampling_params", "workloads",
]

RunnerFactory = Callable[[Scheduler, "Trace | None"], ModelRunner]
ProbeFactory = Callable[[ModelRunner], "SpecProbe"]
TIMING_FIELDS = ("start_time", "duration")
OUTCOME_FIELDS = ("output_ids", "output_len", "finish_reason", "cached_tokens", "num_retractions")


class ConformanceError(AssertionError):
    """A runner did not do what the spec says (names the forward and what differed)."""


class AgreementError(AssertionError):
    """Two executors scheduled differently (names the first differing step and field)."""


# --- strategies ------------------------------------------------------------------------


@dataclass(frozen=True)
class StepClock(CostModel):
    """A simple deterministic clock: `per_step` seconds plus `per_token` per token row."""

    per_step: float = 1e-3
    per_token: float = 1e-5

    def step_cost(self, shape: BatchShape) -> StepCost:
        return StepCost(linear=self.per_token * shape.rows, overhead=self.per_step)


class PushTokenSource(TokenSource):
    """Tokens pushed in as another executor samples them (lockstep runs): `push(rids,
    indices, ids)` stores output token `indices[i]` of `rids[i]`; asking for a token never
    pushed raises AgreementError (the simulator scheduled what the reference did not)."""

    def __init__(self) -> None:
        self.tokens: dict[tuple[str, int], int] = {}

    def push(self, rids: Sequence[str], indices: Sequence[int], ids: Sequence[int]) -> None:
        for rid, k, t in zip(rids, indices, np.asarray(ids).tolist(), strict=True):
            self.tokens[(rid, int(k))] = int(t)

    def push_batch(self, fb: ForwardBatch, ids: Sequence[int]) -> None:
        """Push what a runner sampled for `fb` (call before the scheduler appends it)."""
        self.push(fb.rids, [len(o) for o in fb.output_ids], ids)

    def token_ids(self, rids: Sequence[str], indices: Sequence[int]) -> np.ndarray:
        try:
            return np.array([self.tokens[(rid, int(k))] for rid, k in zip(rids, indices, strict=True)],
                            dtype=np.int64)
        except KeyError as e:
            raise AgreementError(f"no token was pushed for output {e.args[0][1]} of request "
                                 f"{e.args[0][0]!r}: the reference never sampled it") from None


def replay_runner(cost_model: CostModel | None = None) -> RunnerFactory:
    """A factory for runner B of `check_agreement`: a SimModelRunner pricing with
    `cost_model` (default: free) and taking its tokens from the reference trace."""
    def make(scheduler: Scheduler, reference: Trace | None) -> ModelRunner:
        if reference is None:
            raise ValueError("replay_runner needs a reference trace: use it as runner B of "
                             "check_agreement, not for a conformance check")
        return SimModelRunner(cost_model or ZeroCostModel(), ReplayTokenSource(reference),
                              scheduler.config, scheduler.model_info)
    return make


# --- spec conformance ------------------------------------------------------------------


class SpecProbe(Protocol):
    """Watches one runner's internals (executor-specific; lives with the executor, e.g.
    `exec.runner.spec_probe.TorchSpecProbe`)."""

    def observe(self, fb: ForwardBatch, forward: Callable[[ForwardBatch], RunnerOutput]
                ) -> tuple[RunnerOutput, SpecObservation]:
        """Run `forward(fb)` while watching; return its output and what was seen."""


class SpecCheckingRunner:
    """Wraps a runner and checks every forward and sample against the spec: the logit rows
    it reports, the logits shape, the padded size, one in-vocabulary id per request, and,
    with a probe, positions, written KV slots and LM-head rows. `before_forward` runs first
    (e.g. the scheduler's `mem.check_integrity`), then `shadow.check(fb)` (the shadow-KV
    invariant, `sim.conformance.shadow_kv`)."""

    def __init__(self, runner: ModelRunner, probe: SpecProbe | None = None,
                 before_forward: Callable[[], None] | None = None,
                 shadow: ShadowKV | None = None) -> None:
        self.runner, self.probe, self.before_forward = runner, probe, before_forward
        self.shadow = shadow
        self.forwards = 0

    def forward(self, fb: ForwardBatch) -> RunnerOutput:
        if self.before_forward is not None:
            self.before_forward()
        if self.shadow is not None:
            self.shadow.check(fb)
        if self.probe is None:
            out, seen = self.runner.forward(fb), None
        else:
            out, seen = self.probe.observe(fb, self.runner.forward)
        self._check_output(fb, out)
        if seen is not None:
            self._check_observation(fb, seen, _expected(fb, out))
        self.forwards += 1
        return out

    def sample(self, output: RunnerOutput, fb: ForwardBatch) -> np.ndarray:
        ids = np.asarray(self.runner.sample(output, fb))
        self._require(ids.shape == (fb.batch_size,) and ids.dtype.kind in "iu", fb,
                      f"sample returned {ids.dtype} {ids.shape}, need [{fb.batch_size}] ints")
        self._require(bool(((ids >= 0) & (ids < fb.vocab_size)).all()), fb,
                      f"sampled ids outside [0, {fb.vocab_size}): {ids.tolist()}")
        return ids

    def _require(self, ok: bool, fb: ForwardBatch, what: str) -> None:
        if not ok:
            raise ConformanceError(f"forward {self.forwards} ({fb.forward_mode.name}, rids "
                                   f"{list(fb.rids)}): {what}")

    def _check_output(self, fb: ForwardBatch, out: RunnerOutput) -> None:
        for name, spec, got in zip(fb.logit_rows._fields, fb.logit_rows, out.logit_rows, strict=True):
            self._require(np.array_equal(spec, got), fb, f"logit_rows.{name} {np.asarray(got).tolist()} "
                          f"!= the spec's {spec.tolist()}")
        self._require(tuple(out.logits_shape) == (fb.batch_size, fb.vocab_size), fb,
                      f"logits shape {tuple(out.logits_shape)} != {(fb.batch_size, fb.vocab_size)}")
        self._require(out.padded_batch_size == fb.batch_size or (
            out.graph and out.padded_batch_size > fb.batch_size), fb,
            f"padded_batch_size {out.padded_batch_size} for a batch of {fb.batch_size} "
            f"(graph={out.graph})")
        if out.input_token_logprobs is not None:
            n = len(fb.logit_rows.input_logprob_indices)
            self._require(len(out.input_token_logprobs) == n, fb,
                          f"{len(out.input_token_logprobs)} input logprobs for {n} rows")

    def _check_observation(self, fb: ForwardBatch, seen: SpecObservation,
                           spec: _Expected) -> None:
        if seen.positions is not None:
            self._require(np.array_equal(seen.positions, spec.positions), fb,
                          f"positions fed to rotary {np.asarray(seen.positions).tolist()} != the "
                          f"spec's {spec.positions.tolist()}")
        if seen.written_slots is not None:
            got = set(np.unique(seen.written_slots).tolist())
            want = set(fb.out_cache_loc.tolist())
            # NOTE: a padding row may rewrite the dummy slot with the values it already
            # holds, so the probe may or may not see that write.
            self._require(got - spec.dummy_slots == want - spec.dummy_slots and want <= got, fb,
                          f"KV written at slots {sorted(got)}, the spec's out_cache_loc is "
                          f"{fb.out_cache_loc.tolist()}")
        if seen.hidden is not None and seen.lm_head_input is not None:
            rows = spec.lm_head_rows
            self._require(np.array_equal(seen.lm_head_input, seen.hidden[rows]), fb,
                          f"the LM head did not get hidden rows {rows.tolist()} (the spec's "
                          f"pruned_rows)")


class _Expected(NamedTuple):
    """What a probe should see in one forward: the positions given to rotary, the hidden
    rows sent to the LM head, and slots that may be written beyond out_cache_loc."""

    positions: np.ndarray
    lm_head_rows: np.ndarray
    dummy_slots: set[int]


def _expected(fb: ForwardBatch, out: RunnerOutput) -> _Expected:
    """The batch's own arrays, or, for a graph-padded decode, its padded batch's (padding
    rows at position 0 writing the reserved slot 0, all `padded_batch_size` rows to the
    LM head, as a captured graph computes them)."""
    if not (out.graph and out.padded_batch_size > fb.batch_size):
        return _Expected(fb.positions, fb.logit_rows.pruned_rows, set())
    padded = pad_decode_batch(fb, out.padded_batch_size)
    return _Expected(padded.positions, np.arange(out.padded_batch_size), {0})


def check_conformance(make_runner: RunnerFactory, case: ConformanceCase, *,
                      clock: CostModel | None = None, probe: ProbeFactory | None = None,
                      header: TraceHeader | None = None) -> Trace:
    """Serve `case.workload` on a fresh `Scheduler(case.config, case.model_info)` with
    `make_runner(scheduler, None)` under the SimPy driver (`clock`, default StepClock()), and
    check every step with a SpecCheckingRunner (`probe(runner)` when given), the pools'
    integrity before every forward, that every request finished, and the idle leak check at
    the end. Returns the run's trace (its header `header`); raises ConformanceError (or the
    spec's own errors)."""
    scheduler = Scheduler(case.config, case.model_info, header=header)
    return _serve(scheduler, make_runner(scheduler, None), case.workload, clock, probe)


def _serve(scheduler: Scheduler, runner: ModelRunner, workload: Workload,
           clock: CostModel | None, probe: ProbeFactory | None) -> Trace:
    checked = SpecCheckingRunner(runner, probe(runner) if probe is not None else None,
                                 scheduler.mem.check_integrity,
                                 ShadowKV(scheduler.mem, scheduler.reqs))
    hook = getattr(getattr(runner, "token_source", None), "finished", None)
    trace = drive_workload(scheduler, checked, workload, clock=clock or StepClock(),
                           finished_hook=hook)
    scheduler.mem.check_integrity()
    scheduler.mem.check_idle()
    check_outcomes(trace)
    if checked.forwards != len(trace):
        raise ConformanceError(f"{checked.forwards} forwards for {len(trace)} recorded steps")
    return trace


# --- agreement -------------------------------------------------------------------------


class Divergence(NamedTuple):
    """The first step where two step sequences differ: `field` is a StepRecord field, or
    'missing step' when one sequence is shorter."""

    step: int
    field: str
    a: Any
    b: Any


class Agreement(NamedTuple):
    reference: Trace   # runner A's run, as read back from its saved trace
    candidate: Trace   # runner B's run


def first_divergence(a: Sequence[StepRecord], b: Sequence[StepRecord],
                     ignore: tuple[str, ...] = TIMING_FIELDS) -> Divergence | None:
    """The first differing step of `a` and `b` (fields in `ignore` not compared), or None."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        d = x.diff(y, ignore)
        if d is not None:
            return Divergence(i, d.field, d.left, d.right)
    if len(a) != len(b):
        n = min(len(a), len(b))
        return Divergence(n, "missing step", a[n] if n < len(a) else None,
                          b[n] if n < len(b) else None)
    return None


def assert_traces_agree(a: Trace, b: Trace, names: tuple[str, str] = ("A", "B")) -> None:
    """Raise AgreementError naming the first differing step and field (with both records),
    or the first request whose outcome (tokens, finish reason, cache hits) differs."""
    d = first_divergence(a.steps, b.steps)
    if d is not None:
        rec = lambda steps: steps[d.step] if d.step < len(steps) else None  # noqa: E731
        raise AgreementError(
            f"step {d.step} differs in {d.field!r}: {names[0]} {d.a!r} vs {names[1]} {d.b!r}\n"
            f"  {names[0]}: {rec(a.steps)!r}\n  {names[1]}: {rec(b.steps)!r}")
    for rid, ra in a.requests.items():
        rb = b.requests.get(rid)
        for name in OUTCOME_FIELDS:
            if rb is None or getattr(ra, name) != getattr(rb, name):
                raise AgreementError(f"request {rid!r} differs in {name!r}: {names[0]} "
                                     f"{getattr(ra, name)!r} vs {names[1]} "
                                     f"{getattr(rb, name, None)!r}")


def check_agreement(make_runner_a: RunnerFactory, make_runner_b: RunnerFactory,
                    case: ConformanceCase, *, clock: CostModel | None = None,
                    probe_a: ProbeFactory | None = None,
                    probe_b: ProbeFactory | None = None,
                    header_a: TraceHeader | None = None) -> Agreement:
    """Run A as `check_conformance` does; save its trace and read it back; run B on a
    scheduler built from that header's effective EngineConfig and ModelInfo, with
    `make_runner_b(scheduler, reference)`, the same workload and clock, and the same checks;
    then require equal StepRecords (times ignored) and equal request outcomes."""
    trace_a = check_conformance(make_runner_a, case, clock=clock, probe=probe_a, header=header_a)
    reference = _read_back(trace_a)
    scheduler = Scheduler(reference.engine_config, reference.model_info)
    trace_b = _serve(scheduler, make_runner_b(scheduler, reference), case.workload, clock, probe_b)
    assert_traces_agree(reference, trace_b)
    return Agreement(reference, trace_b)


def _read_back(trace: Trace) -> Trace:
    """The trace as a file holds it (header and steps through JSON)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.jsonl"
        trace.save(path)
        return Trace.load(path)
