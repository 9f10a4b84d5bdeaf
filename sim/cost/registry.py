"""The cost models by name: `COST_MODELS` maps a name (`--cost-model NAME`, `cost_model=NAME`)
to the function that builds it from a run's `CostInputs`. A new cost model is its folder or
file under `sim/cost/` plus one row here (its builder); `CostModel.describe` names it in
the trace header. Besides a name, `build_cost_model` takes a CostModel as it is and a path to
a calibrated model's JSON (`sim.cost.calibrated`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

from sim.cost.base import CostModel
from sim.cost.calibrated import CalibratedCostModel
from sim.cost.engine_profile import EngineProfile, get_engine_profile
from sim.cost.kernel.model import KernelCostModel
from sim.cost.kernel.params import KernelParams
from sim.cost.roofline.model import RooflineCostModel
from sim.hardware.hardware import Hardware
from sim.model.ep_options import EPOptions
from sim.model.shape import ModelShape

CostModelSpec = CostModel | str | os.PathLike[str] | None


class CostInputs(NamedTuple):
    """What a named cost model is built from: the run's model shape, chip and parallelism,
    the largest CUDA-graph decode batch (None: the model's default), the kernel model's
    constants (None: the defaults) and the engine profile (None: SGLang's)."""

    shape: ModelShape
    hardware: Hardware
    tp: int = 1
    ep_size: int = 1
    expert_zipf: float = 0.0
    cuda_graph_max_bs: int | None = None
    kernel_params: KernelParams | None = None
    attention_dp: int = 1
    ep_options: EPOptions | None = None
    engine_profile: EngineProfile | None = None


def roofline(i: CostInputs) -> CostModel:
    """The roofline of model, hardware and tp (`sim.cost.roofline`); no attention DP."""
    _refuse_attention_dp(i.attention_dp)
    return RooflineCostModel(i.shape, i.hardware, i.tp, ep_size=i.ep_size, expert_zipf=i.expert_zipf)


def kernel(i: CostInputs) -> CostModel:
    """The kernel-level model (`sim.cost.kernel`) with the engine profile's CPU time."""
    graphs = {} if i.cuda_graph_max_bs is None else {"cuda_graph_max_bs": i.cuda_graph_max_bs}
    return KernelCostModel(i.shape, i.hardware, i.tp, i.ep_size, i.expert_zipf,
                           i.kernel_params or KernelParams(), attention_dp=i.attention_dp,
                           ep_options=i.ep_options or EPOptions(),
                           engine=get_engine_profile(i.engine_profile), **graphs)


COST_MODELS: MappingProxyType[str, Callable[[CostInputs], CostModel]] = MappingProxyType({
    "roofline": roofline,
    "kernel": kernel,
})
DEFAULT_COST_MODEL = "kernel"
FALLBACK_COST_MODEL = "roofline"   # the default on a chip with no kernel constants


def default_cost_model_name(hardware: Hardware) -> str:
    """The cost model None stands for on `hardware`: DEFAULT_COST_MODEL, or the roofline
    where the chip's entry has no kernel constants (a hardware JSON without `kernels`)."""
    return DEFAULT_COST_MODEL if hardware.kernels is not None else FALLBACK_COST_MODEL


def build_cost_model(spec: CostModelSpec, inputs: CostInputs) -> CostModel:
    """A COST_MODELS name (None: `default_cost_model_name` of the chip) built from `inputs`;
    a CostModel as it is; a path: a calibrated model's JSON. Attention DP
    (`inputs.attention_dp` > 1) is priced by the kernel model only: ValueError for the others."""
    if isinstance(spec, CostModel):
        return spec
    name = default_cost_model_name(inputs.hardware) if spec is None else spec
    if isinstance(name, str) and name in COST_MODELS:
        return COST_MODELS[name](inputs)
    if isinstance(name, (str, os.PathLike)):
        _refuse_attention_dp(inputs.attention_dp)
        if not Path(name).is_file():
            raise ValueError(f"cost model file {os.fspath(name)!r} does not exist "
                             f"(name a calibrated-model JSON, {_names(' or ')})")
        return CalibratedCostModel.load(name)
    raise ValueError(f"cost_model must be None, {_names(', ')}, a CostModel or a "
                     f"calibrated JSON path, got {type(spec).__name__}")


def _names(last: str) -> str:
    """"'roofline' or 'kernel'" (`last` joins the last two)."""
    names = [repr(n) for n in COST_MODELS]
    return last.join([", ".join(names[:-1]), names[-1]]) if len(names) > 1 else names[0]


def _refuse_attention_dp(attention_dp: int) -> None:
    if attention_dp > 1:
        raise ValueError(f"attention data parallelism (dp_size={attention_dp}) is priced by "
                         f"the kernel cost model only; pass cost_model='kernel' "
                         f"(--cost-model kernel)")
