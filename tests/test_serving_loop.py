"""The serving loop's seams: every executor's stepper offers all that `ServingLoop` calls
(`shared.online.stepper.Stepper`), and the admission turn every driver runs
(`shared.loop.admission_turn`) admits the rest and steps again only when nothing ran."""

from __future__ import annotations

import inspect

import pytest

from shared.loop.admission_turn import admission_turn
from shared.online.stepper import Stepper


def _stepper_class(kind: str):
    if kind == "sim":
        from sim.run.online_sim import SimStepper

        return SimStepper
    pytest.importorskip("torch")   # NOTE: the exec package imports it
    from exec.engine.online_engine import ExecStepper

    return ExecStepper


def _protocol_methods() -> dict[str, inspect.Signature]:
    return {name: inspect.signature(f) for name, f in vars(Stepper).items()
            if inspect.isfunction(f) and not name.startswith("_")}


@pytest.mark.parametrize("kind", ["sim", "exec"])
def test_every_stepper_has_every_method_the_serving_loop_calls_with_its_parameters(kind):
    """A stepper missing a method of `Stepper`, or taking other parameters, fails here, not
    on the loop's thread mid-serve."""
    cls = _stepper_class(kind)
    for name, sig in _protocol_methods().items():
        method = getattr(cls, name, None)
        assert callable(method), f"{cls.__name__} lacks {name}()"
        assert list(inspect.signature(method).parameters) == list(sig.parameters), (cls.__name__, name)
    assert isinstance(cls.thread_name, str)


def test_the_simulators_stepper_carries_the_attributes_the_server_reads():
    from sim.run.build import build_simulation
    from sim.run.online_sim import SimStepper

    stepper = SimStepper(build_simulation(model="llama-3-8b", hardware="h100"), "m")
    for name in Stepper.__annotations__:
        assert hasattr(stepper, name), name
    assert (stepper.model_name, stepper.vocab_size) == ("m", 128256)


class _Turn:
    """Records an admission turn's calls; `ran[k]` is what the k-th step returns."""

    def __init__(self, ran: list, arrived: bool, cutoff: float = 1.0, wall: float = 3.0) -> None:
        self.ran, self.arrived, self.cutoff, self.wall, self.calls = ran, arrived, cutoff, wall, []

    def run(self):
        return admission_turn(2.0, self.admission_time, self.admit_until, self.step, self.catch_up)

    def admission_time(self, now):
        self.calls.append(("admission_time", now))
        return self.cutoff

    def admit_until(self, t):
        self.calls.append(("admit_until", t))
        return self.arrived

    def step(self, now):
        self.calls.append(("step", now))
        return self.ran.pop(0)

    def catch_up(self):
        self.calls.append(("catch_up",))
        return self.wall


def test_a_turn_that_ran_a_step_admits_only_by_the_admission_time():
    turn = _Turn(["batch"], arrived=True)
    assert turn.run() == "batch"
    assert turn.calls == [("admission_time", 2.0), ("admit_until", 1.0), ("step", 2.0)]


def test_a_turn_that_ran_nothing_admits_what_arrived_by_the_caught_up_clock_and_steps_there():
    turn = _Turn([None, "batch"], arrived=True)
    assert turn.run() == "batch"
    assert turn.calls[2:] == [("step", 2.0), ("catch_up",), ("admit_until", 3.0), ("step", 3.0)]


def test_a_turn_that_ran_nothing_and_admitted_nothing_does_not_step_again():
    turn = _Turn([None], arrived=False)
    assert turn.run() is None
    assert turn.calls[-2:] == [("catch_up",), ("admit_until", 3.0)]
