"""batchtwin's SimPy cost-model executor: replays the spec's batches and prices each one.

`simulate(workload, deployment, layout)` is the entry point (`Deployment`: one engine
instance; layouts `Single`, `Fleet`, `Disaggregated`; the flat keywords `simulate(workload,
model=..., hardware=..., tp=...)` build the Deployment for you); the pieces it wires
(`SimModelRunner`, token sources, `drive_workload`, cost models) are exported for callers who
assemble their own run (e.g. exec's runner under a cost-model clock). `replay(trace)` re-runs a
recorded trace teacher-forced. The conformance kit (`sim.conformance`, Hypothesis strategies and
`check_conformance` / `check_agreement`) is imported on its own.

Each public name is imported from its module (`EXPORTS`) when first read (PEP 562), so
`import sim`, or importing one of its modules, loads only what is used: a single engine's
run never loads the fleets, replay or the kernel cost model.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from shared.lazy_exports import export, exported_names

EXPORTS = MappingProxyType({   # public name -> the module that defines it
    "COST_MODELS": "sim.cost.registry",
    "BatchShape": "sim.cost.batch_shape",
    "CostModel": "sim.cost.base",
    "Deployment": "sim.run.deployment",
    "Disaggregated": "sim.fleet.disagg_layout",
    "Fleet": "sim.fleet.fleet_layout",
    "ReplayResult": "sim.run.replay",
    "ReplayTokenSource": "sim.run.token_source",
    "SimModelRunner": "sim.run.sim_model_runner",
    "Simulation": "sim.run.build",
    "Single": "sim.run.simulate",
    "StepCost": "sim.cost.base",
    "SyntheticTokenSource": "sim.run.token_source",
    "TokenSource": "sim.run.token_source",
    "ZeroCostModel": "sim.cost.base",
    "build_simulation": "sim.run.build",
    "drive_workload": "sim.run.driver",
    "replay": "sim.run.replay",
    "simulate": "sim.run.simulate",
})

__all__ = sorted(EXPORTS)


def __getattr__(name: str) -> Any:
    """The public `name`, imported from its module (`EXPORTS`)."""
    return export(__name__, EXPORTS, name)


def __dir__() -> list[str]:
    return exported_names(globals(), EXPORTS)
