"""Helpers for driving both online engines (`shared.online.online_engine`) in tests: a simulated and
a real engine, and a collector of one request's events."""

from __future__ import annotations

import threading

from shared.online.serving_loop import ServingLoop
from sim.run.build import build_simulation
from sim.run.online_sim import SimStepper

HANG_S = 60   # NOTE: hang detection only: every wait here ends long before


def sim_engine():
    return ServingLoop(SimStepper(build_simulation(model="llama-3-8b", hardware="h100"), "m", 100.0))


def exec_engine(tiny_checkpoint):
    from exec.engine.engine import Engine
    from exec.engine.online_engine import ExecStepper

    return ServingLoop(ExecStepper(Engine(tiny_checkpoint("llama")[0], max_total_tokens=1024), "m"))


class Collected:
    """One request's events; `done` is set at its last."""

    def __init__(self) -> None:
        self.events, self.done = [], threading.Event()

    def __call__(self, event) -> None:
        self.events.append(event)
        if event.finish is not None:
            self.done.set()
