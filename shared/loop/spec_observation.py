"""What a spec probe saw a runner do in one forward (ARCHITECTURE §6.2).

The record a `SpecProbe` returns to the conformance kit (`sim.conformance`): it lives in the
spec so that an executor's probe (e.g. `exec.runner.spec_probe.TorchSpecProbe`) can build one
without importing the simulator.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SpecObservation:
    """What a probe saw a runner do in one forward (None: not observed, not checked).
    positions: [T] fed to rotary; written_slots: KV slots whose contents changed;
    hidden: [T, H] final hidden rows; lm_head_input: [R, H] rows given to the LM head."""

    positions: np.ndarray | None = None
    written_slots: np.ndarray | None = None
    hidden: np.ndarray | None = None
    lm_head_input: np.ndarray | None = None
