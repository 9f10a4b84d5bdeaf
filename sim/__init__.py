"""batchtwin's SimPy cost-model executor: replays the spec's batches and prices each one.

`simulate(workload, deployment, layout)` is the entry point (`Deployment`: one engine
instance; layouts `Single`, `Fleet`, `Disaggregated`; the flat keywords `simulate(workload,
model=..., hardware=..., tp=...)` build the Deployment for you); the pieces it wires
(`SimModelRunner`, token sources, `drive_workload`, cost models) are exported for callers who
assemble their own run (e.g. exec's runner under a cost-model clock). `replay(trace)` re-runs a
recorded trace teacher-forced. The conformance kit (`sim.conformance`, Hypothesis strategies and
`check_conformance` / `check_agreement`) is imported on its own.
"""

from sim.cost.base import CostModel, StepCost, ZeroCostModel
from sim.cost.batch_shape import BatchShape
from sim.cost.registry import COST_MODELS
from sim.fleet.disagg_layout import Disaggregated
from sim.fleet.fleet_layout import Fleet
from sim.run.build import Simulation, build_simulation
from sim.run.deployment import Deployment
from sim.run.driver import drive_workload
from sim.run.replay import ReplayResult, replay
from sim.run.sim_model_runner import SimModelRunner
from sim.run.simulate import Single, simulate
from sim.run.token_source import ReplayTokenSource, SyntheticTokenSource, TokenSource

__all__ = [
    "COST_MODELS",
    "BatchShape",
    "CostModel",
    "Deployment",
    "Disaggregated",
    "Fleet",
    "ReplayResult",
    "ReplayTokenSource",
    "SimModelRunner",
    "Simulation",
    "Single",
    "StepCost",
    "SyntheticTokenSource",
    "TokenSource",
    "ZeroCostModel",
    "build_simulation",
    "drive_workload",
    "replay",
    "simulate",
]
