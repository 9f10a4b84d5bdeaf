"""Mutation check: do the agreement tests catch real defects? (Not part of the CI run.)

Plants one defect at a time in the real executor's instances only (its Scheduler and the
objects it owns, or its TorchModelRunner), by monkeypatching methods and attributes on those
instances (never a class, never a file), then runs the three checks of tests/test_agreement*.py
on the tiny random-weight Llama (`experiments.dev.tiny_exec`, `experiments.dev.tiny_models`)
and reports which one catches each defect:

- agreement:   `check_agreement(exec, replay_runner(), case)` (StepRecords and outcomes);
- conformance: `check_conformance(exec, case, probe=TorchSpecProbe)` (`exec.runner.spec_probe`:
               positions fed to rotary, KV slots written, LM-head rows, pools' integrity,
               leaks);
- machine:     the lockstep RuleBasedStateMachine (`experiments.dev.lockstep_machine`:
               add / abort / step, exec vs sim).

    python -m experiments.dev.mutation_check            # from the repository root (needs the
    python -m experiments.dev.mutation_check --json out.json   # test extra: transformers)

Exits 1 if some defect escaped every check.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

EXAMPLES = 200          # Hypothesis examples per check (ci-profile size), stopping at a failure
SEED_DERANDOMIZE = True  # fixed example sequence: the table is reproducible
CHECKS = ("agreement", "conformance", "machine")


class Defect(NamedTuple):
    name: str
    where: str
    plant: Callable[[Any, Any], None]   # (exec scheduler, exec runner) -> None


def _rotary_positions_plus_one(scheduler, runner) -> None:
    tensor = runner._tensor
    runner._tensor = lambda fb, name: tensor(fb, name) + (name == "positions")


def _kv_slots_plus_one(scheduler, runner) -> None:
    tensor = runner._tensor
    runner._tensor = lambda fb, name: tensor(fb, name) + (name == "out_cache_loc")


def _lm_head_row_before(scheduler, runner) -> None:
    """The runner computes logits from the row before each spec row, and reports the spec's."""
    forward = runner._forward

    def shifted(fb):
        rows = fb.logit_rows
        moved = rows._replace(pruned_rows=(rows.pruned_rows - 1).clip(min=0))
        out = forward(dataclasses.replace(fb, logit_rows=moved))
        return dataclasses.replace(out, logit_rows=rows)
    runner._forward = shifted


def _spec_decode_positions_plus_one(scheduler, runner) -> None:
    """Every batch this scheduler hands out computes decode positions one too high."""
    from shared.batch.positions import Positions

    get_next = scheduler.get_next_batch_to_run

    def patched(now):
        batch = get_next(now)
        if batch is not None and "positions" not in vars(batch):
            spec_positions = type(batch).positions

            def shifted(b=batch):
                p = spec_positions(b)
                return Positions(p.positions + 1, p.extend_start_loc) if b.forward_mode.is_decode() else p
            batch.positions = shifted
        return batch
    scheduler.get_next_batch_to_run = patched


def _lpm_shortest_prefix_first(scheduler, runner) -> None:
    policy = scheduler.policy
    calc = policy.calc_priority

    def patched(queue):
        computed = calc(queue)
        if policy.active_policy(len(queue)) == "lpm":
            queue.sort(key=lambda r: len(r.prefix_indices))  # stable: shortest match first
        return computed
    policy.calc_priority = patched


def _free_list_from_the_back(scheduler, runner) -> None:
    alloc = scheduler.mem.allocator

    def take(n_pages):
        free = alloc._free_pages
        if n_pages > len(free):
            return None
        cut = len(free) - n_pages
        pages, alloc._free_pages = free[cut:], free[:cut]
        alloc._is_free[pages] = False
        return pages
    alloc._take = take


def _chunk_budget_one_page_more(scheduler, runner) -> None:
    c = scheduler.config
    if c.chunk_size is not None:
        scheduler.config = dataclasses.replace(c, chunked_prefill_size=c.chunk_size + c.page_size)


DEFECTS = (
    Defect("positions fed to rotary +1", "exec runner", _rotary_positions_plus_one),
    Defect("KV written one slot off", "exec runner", _kv_slots_plus_one),
    Defect("LM head reads the row before the spec's", "exec runner", _lm_head_row_before),
    Defect("decode positions +1 (spec side)", "exec scheduler", _spec_decode_positions_plus_one),
    Defect("LPM: shortest cached prefix first", "exec scheduler.policy", _lpm_shortest_prefix_first),
    Defect("KV page from the back of the free list", "exec scheduler.mem.allocator",
           _free_list_from_the_back),
    Defect("chunk budget one page too large", "exec scheduler.config", _chunk_budget_one_page_more),
)


class Outcome(NamedTuple):
    caught: bool
    examples: int      # examples run, the failing one included
    seconds: float
    error: str


def _settings(settings, phase, health):
    return settings(max_examples=EXAMPLES, database=None, derandomize=SEED_DERANDOMIZE,
                    deadline=None, phases=[phase.explicit, phase.generate],
                    suppress_health_check=list(health), print_blob=False)


def _outcome(run: Callable[[], None], counter: list[int]) -> Outcome:
    t0 = time.perf_counter()
    try:
        run()
    except Exception as e:  # any failure of the check counts as a catch
        line = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return Outcome(True, counter[0], time.perf_counter() - t0, f"{type(e).__name__}: {line}"[:140])
    return Outcome(False, counter[0], time.perf_counter() - t0, "")


def _counted(check: Callable[[Any], None], counter: list[int]) -> Callable[[Any], None]:
    def body(case):
        counter[0] += 1
        check(case)
    return body


def run_checks(mutant, checks=CHECKS) -> dict[str, Outcome]:
    """The three checks against `mutant` (a TinyExec whose runners carry the defect)."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis.stateful import run_state_machine_as_test

    from exec.runner.spec_probe import TorchSpecProbe
    from experiments.dev.lockstep_machine import LockstepMachine
    from experiments.dev.tiny_exec import ARRIVAL_TICK, TINY_INFO
    from sim.conformance import cases, check_agreement, check_conformance, replay_runner

    strategy = cases(TINY_INFO, arrival_tick=ARRIVAL_TICK)
    bodies = {
        "agreement": lambda case: check_agreement(mutant.make_runner, replay_runner(), case,
                                                  clock=mutant.clock),
        "conformance": lambda case: check_conformance(mutant.make_runner, case, clock=mutant.clock,
                                                      probe=TorchSpecProbe),
    }
    results = {}
    for name in checks:
        counter = [0]
        if name == "machine":
            def factory(counter=counter):
                counter[0] += 1
                return LockstepMachine(mutant)
            run = lambda factory=factory: run_state_machine_as_test(  # noqa: E731
                factory, settings=_settings(settings, Phase, HealthCheck))
        else:
            run = _settings(settings, Phase, HealthCheck)(
                given(case=strategy)(_counted(bodies[name], counter)))
        results[name] = _outcome(run, counter)
    return results


def mutant_class():
    from experiments.dev.tiny_exec import TinyExec

    class Mutant(TinyExec):
        """TinyExec whose every exec runner (and its scheduler) carries `defect`."""

        defect: Defect | None = None

        def make_runner(self, scheduler, reference=None):
            runner = super().make_runner(scheduler, reference)
            if self.defect is not None:
                self.defect.plant(scheduler, runner)
            return runner
    return Mutant


def print_table(rows: list[tuple[Defect, dict[str, Outcome]]]) -> None:
    head = f"{'defect':<42} {'planted in':<28} " + " ".join(f"{c:<30}" for c in CHECKS)
    print(head)
    print("-" * len(head))
    for d, res in rows:
        cells = [f"caught @{res[c].examples} ({res[c].error.split(':')[0]})" if res[c].caught
                 else f"missed ({res[c].examples})" for c in CHECKS]
        print(f"{d.name:<42} {d.where:<28} " + " ".join(f"{x:<30}" for x in cells))
    print("\n'caught @k (Error)': the check failed on its k-th example (machine: k-th machine "
          "built) with that error; 'missed (n)': n examples passed.")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", default=None, metavar="PATH", help="also write the results as JSON")
    p.add_argument("--only", default=None, help="run only defects whose name contains this")
    args = p.parse_args(argv)

    from exec.device.torch_threads import torch_threads
    from experiments.dev.tiny_models import make_checkpoint

    rows = []
    with tempfile.TemporaryDirectory() as tmp, torch_threads(1):
        folder = Path(tmp)
        make_checkpoint(folder, "llama")
        mutant = mutant_class()(folder)
        baseline = run_checks(mutant)  # no defect: every check must pass
        if any(o.caught for o in baseline.values()):
            print(f"baseline failed: {baseline}", file=sys.stderr)
            return 2
        for d in DEFECTS:
            if args.only and args.only not in d.name:
                continue
            mutant.defect = d
            rows.append((d, run_checks(mutant)))
            print(f"  {d.name}: " + ", ".join(f"{c} {'caught' if o.caught else 'missed'} "
                                               f"({o.examples} ex, {o.seconds:.1f} s)"
                                               for c, o in rows[-1][1].items()), file=sys.stderr)
    print_table(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"examples_per_check": EXAMPLES, "baseline": {c: o._asdict() for c, o in baseline.items()},
             "defects": [{"defect": d.name, "where": d.where,
                          **{c: o._asdict() for c, o in res.items()}} for d, res in rows]},
            indent=2) + "\n")
    escaped = [d.name for d, res in rows if not any(o.caught for o in res.values())]
    if escaped:
        print(f"NOT CAUGHT: {escaped}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
