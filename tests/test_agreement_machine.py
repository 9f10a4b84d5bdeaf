"""Both executors in lockstep under one `RuleBasedStateMachine` (Hypothesis's
DatabaseComparison pattern, reference/style.md §8): exec (TorchModelRunner on the tiny Llama)
and sim (SimModelRunner), each behind its own Scheduler, get the same operations: add a
request built on a bundle of shared prefixes, abort a request, step. After every step the
latest StepRecords agree; after every rule the pools are consistent, and when both are idle
nothing leaked. Each example ends by stepping both until every request finished. The machine
is `experiments.dev.lockstep_machine.LockstepMachine`, shared with
`python -m experiments.dev.mutation_check`.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from experiments.dev.lockstep_machine import LockstepMachine
from tests.test_agreement import AGREEMENT_EXAMPLES, tiny_exec_fixture

tiny_exec = pytest.fixture(scope="module", name="tiny_exec")(tiny_exec_fixture)


def test_exec_and_sim_agree_after_every_operation(tiny_exec):
    """Adding, aborting and stepping in lockstep keeps exec's and sim's StepRecords equal
    (times aside), their pools consistent, and leaks nothing once both are idle."""
    run_state_machine_as_test(lambda: LockstepMachine(tiny_exec),
                              settings=settings(max_examples=AGREEMENT_EXAMPLES))
