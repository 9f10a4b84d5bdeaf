"""`Deployment`: one simulated engine instance, frozen: what `simulate` serves a workload on.

    Deployment(model="llama-3-8b", hardware="h100", tp=1, cost_model="kernel",
               engine={"chunked_prefill_size": 4096})

`model`: an embedded key (`sim.model.from_config.EMBEDDED_CONFIGS`), a config.json path or a
config dict. `hardware`: a catalogue key or a hardware JSON path (`sim.hardware.lookup`).
Parallelism and dtypes as SGLang's flags: `tp`, `ep_size` (dividing tp and the experts),
`dp_size` with `enable_dp_attention` (attention data parallelism, priced by the kernel cost
model), `ep_options` (wide-EP flags, `sim.model.ep_options.EPOptions`), `quantization`
(fp8, int4-weight-only, none; None keeps the checkpoint's), `kv_cache_dtype`, `expert_zipf`
(hot experts). `cost_model`: a `sim.cost.registry.COST_MODELS` name (None: the kernel model; the roofline on a chip with no kernel constants), a
CostModel, or a calibrated-model JSON path; `kernel_params`: the kernel model's constants.
`engine_profile`: the engine simulated (`sim.cost.engine_profile`: its CPU time, default
schedule and admission, and vLLM V1's token budget and sequence cap on the hardware; None:
SGLang's). `engine`: EngineConfig fields, over the profile's defaults (an explicit one wins).

Unknown engine fields raise TypeError naming them; the other checks (unknown keys, bad
parallelism, dtypes the chip cannot run) happen when the simulation is built, before
anything runs. `Deployment.from_keywords(**kw)` takes `simulate`'s flat keywords: the
Deployment fields by name, every other keyword an EngineConfig field.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from shared.config.engine_config import EngineConfig
from sim.cost.engine_profile import EngineProfile, get_engine_profile
from sim.cost.kernel.params import KernelParams
from sim.cost.registry import CostModelSpec
from sim.hardware.lookup import get_hardware
from sim.model.ep_options import EPOptions

ModelSpec = str | os.PathLike[str] | Mapping[str, Any]


@dataclass(frozen=True)
class Deployment:
    model: ModelSpec = "llama-3-8b"
    hardware: str | os.PathLike[str] = "h100"
    tp: int = 1
    ep_size: int = 1
    dp_size: int = 1
    enable_dp_attention: bool = False
    ep_options: EPOptions | None = None
    quantization: str | None = None
    kv_cache_dtype: str = "auto"
    expert_zipf: float = 0.0
    cost_model: CostModelSpec = None
    kernel_params: KernelParams | None = None
    engine_profile: str | EngineProfile | None = None
    engine: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        EngineConfig.check_fields(self.engine)
        object.__setattr__(self, "engine", MappingProxyType(dict(self.engine)))

    def __hash__(self) -> int:
        # NOTE: `engine` is a read-only mapping; a deployment hashes by its values
        fields = (getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "engine")
        return hash((*map(_hashable, fields), tuple(sorted(self.engine.items()))))

    @classmethod
    def from_keywords(cls, **keywords: Any) -> Deployment:
        """The Deployment fields by name; every other keyword an EngineConfig field."""
        own = {f.name for f in dataclasses.fields(cls)} - {"engine"}
        return cls(**{k: v for k, v in keywords.items() if k in own},
                   engine={k: v for k, v in keywords.items() if k not in own})

    def replace(self, **changes: Any) -> Deployment:
        """This deployment with `changes` (Deployment fields; `engine=` replaces the whole
        mapping, `engine_changes=` updates it)."""
        extra = changes.pop("engine_changes", None)
        if extra:
            changes["engine"] = {**changes.get("engine", self.engine), **extra}
        return dataclasses.replace(self, **changes)

    def engine_config(self) -> EngineConfig:
        """The EngineConfig: the engine profile's schedule and admission, then `engine`."""
        profile = get_engine_profile(self.engine_profile)
        defaults = profile.schedule_defaults(get_hardware(self.hardware)) \
            if profile.token_budget else {}
        return EngineConfig(**{"disable_overlap_schedule": not profile.overlap,
                               "guaranteed_no_evict": profile.guaranteed_no_evict,
                               **defaults, **self.engine})

    def resolved_ep_options(self) -> EPOptions:
        return self.ep_options or EPOptions()


def _hashable(value: Any) -> Any:
    """A config dict (`model` given as a config.json's contents) as a hashable key."""
    return repr(sorted(value.items())) if isinstance(value, Mapping) else value
